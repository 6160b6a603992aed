"""The checkpoint store survives a second writer, a bad checkpoint and a crash at any step (moto).

Each reproduction here was first run against the store as it was before this file existed;
the docstring of each test says how it failed there.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from ckpt_helpers import (
    BUCKET,
    PREFIX,
    URI,
    Crash,
    HookedClient,
    aws_test_env,
    corrupt_file,
    files_of,
    make_save,
    moto_s3,
    s3_keys,
    s3_objects,
    write_cursor,
    write_model_save,
)
from rltrainer.checkpoints import (
    CheckpointWatcher,
    RetryPolicy,
    S3CheckpointStore,
    prepare_resume,
    read_tracker,
    write_tracker,
)

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch)


def store_for(client, log=None, **kwargs) -> S3CheckpointStore:
    return S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=lambda s: None, log=io.StringIO()),
                             progress_stream=log if log is not None else io.StringIO(), progress_interval_s=3600,
                             **kwargs)


def restored(client, tmp_path: Path, name: str):
    """Resume into a fresh directory; (result, log)."""
    log = io.StringIO()
    result = prepare_resume(store_for(client, log), tmp_path / name, log=log)
    return result, log.getvalue()


# ------------------------------------------------------------------------ second writer


def test_a_stale_writer_never_overwrites_a_complete_iteration(s3, tmp_path: Path):
    """Before: the stale writer re-uploaded every file and the manifest of iter 20 in place."""
    first = make_save(tmp_path / "a", 20, seed=1)
    store_for(s3).upload(tmp_path / "a", 20)
    published = s3_objects(s3)

    make_save(tmp_path / "b", 20, seed=2)  # another pod's iteration 20: different bytes
    log = io.StringIO()
    store_for(s3, log).upload(tmp_path / "b", 20)

    assert s3_objects(s3) == published, "nothing of the complete iteration changed"
    assert "iter_0000020 is already complete" in log.getvalue()
    result, _ = restored(s3, tmp_path, "fresh")
    assert result.iteration == 20
    assert files_of(tmp_path / "fresh", 20) == first


def test_of_two_writers_racing_only_the_first_manifest_is_published(s3, tmp_path: Path):
    """Writer B has checked that 20 is incomplete and uploaded its files; A publishes 20 just before B's
    manifest. Before: B's unconditional put replaced A's manifest (and its files had replaced A's)."""
    make_save(tmp_path / "a", 20, seed=1)
    make_save(tmp_path / "b", 20, seed=2)
    a = store_for(s3)

    def let_a_finish_first(name, _n, kwargs):
        if name == "put_object" and kwargs.get("Key", "").endswith("_COMPLETE.json") and not hooked.raced:
            hooked.raced = True
            a.upload(tmp_path / "a", 20)  # A uploads over B's objects and publishes before B's manifest arrives

    hooked = HookedClient(s3, before=let_a_finish_first)
    hooked.raced = False
    from botocore.exceptions import ClientError

    log = io.StringIO()
    try:
        store_for(hooked, log).upload(tmp_path / "b", 20)
    except ClientError as exc:  # the behaviour we want is a skip, not an error
        pytest.fail(f"second writer raised {exc}")
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + "iter_0000020/_COMPLETE.json")["Body"].read())
    a_files = files_of(tmp_path / "a", 20)
    assert sorted(f["path"] for f in manifest["files"]) == sorted(a_files)
    result, _ = restored(s3, tmp_path, "fresh")
    assert result.iteration == 20
    assert files_of(tmp_path / "fresh", 20) == a_files, "the published checkpoint is A's, whole"
    assert "completed by another writer first" in log.getvalue()


def test_the_manifest_is_written_with_a_conditional_put(s3, tmp_path: Path):
    """Before: put_object without IfNoneMatch."""
    make_save(tmp_path / "a", 5)
    puts = []
    hooked = HookedClient(s3, before=lambda name, _n, kw: puts.append(kw) if name == "put_object" else None)
    store_for(hooked).upload(tmp_path / "a", 5)
    (manifest_put,) = [kw for kw in puts if kw["Key"].endswith("_COMPLETE.json")]
    assert manifest_put["IfNoneMatch"] == "*"
    with pytest.raises(Exception, match="PreconditionFailed"):  # moto 5.2.5 enforces it like S3
        s3.put_object(Bucket=BUCKET, Key=manifest_put["Key"], Body=b"{}", IfNoneMatch="*")


# ------------------------------------------------------------------------ bad checkpoints


def _two_checkpoints(s3, tmp_path: Path) -> dict[str, bytes]:
    src = tmp_path / "src"
    ten = make_save(src, 10, seed=1)
    store_for(s3).upload(src, 10)
    make_save(src, 20, seed=2)
    store_for(s3).upload(src, 20)
    return ten


def _assert_fell_back_to_10(s3, tmp_path, ten, why: str):
    result, log = restored(s3, tmp_path, "fresh")
    assert (result.iteration, result.source) == (10, "s3")
    assert read_tracker(tmp_path / "fresh") == 10
    assert files_of(tmp_path / "fresh", 10) == ten
    assert not (tmp_path / "fresh" / "iter_0000020").exists()
    assert "iter_0000020 in S3 is bad" in log and why in log and "falling back to the next-newest" in log
    assert store_for(s3).list_complete() == [10], "the bad one is quarantined"
    marker = json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + "iter_0000020/_QUARANTINED.json")["Body"].read())
    assert why in marker["reason"]
    # nothing was deleted: the bad checkpoint is still there to look at
    assert "iter_0000020/_COMPLETE.json" in s3_objects(s3, "iter_0000020/")
    # and the next resume does not trip over it again
    again, log2 = restored(s3, tmp_path, "fresh2")
    assert again.iteration == 10 and "is bad" not in log2


def test_a_corrupt_shard_falls_back_to_the_previous_checkpoint(s3, tmp_path: Path):
    """Before: restore raised IOError and the run could not start."""
    ten = _two_checkpoints(s3, tmp_path)
    shard = next(k for k in s3_objects(s3, "iter_0000020/") if k.endswith(".distcp"))
    corrupt_file(s3, shard)
    _assert_fell_back_to_10(s3, tmp_path, ten, "does not match its manifest")


def test_a_missing_shard_falls_back_to_the_previous_checkpoint(s3, tmp_path: Path):
    """Before: restore raised ClientError 404 (a traceback at launch)."""
    ten = _two_checkpoints(s3, tmp_path)
    shard = next(k for k in s3_objects(s3, "iter_0000020/") if k.endswith(".distcp"))
    s3.delete_object(Bucket=BUCKET, Key=PREFIX + shard)
    _assert_fell_back_to_10(s3, tmp_path, ten, "is missing")


def test_a_missing_data_cursor_in_s3_falls_back(s3, tmp_path: Path):
    ten = _two_checkpoints(s3, tmp_path)
    s3.delete_object(Bucket=BUCKET, Key=PREFIX + "rollout/global_dataset_state_dict_20.pt")
    _assert_fell_back_to_10(s3, tmp_path, ten, "is missing")


MALFORMED = {
    "not json": b"{not json",
    "not utf-8": b'{"format": "\xff\xfe"}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "a list": b"[]",
    "files null": {"files": None},
    "files empty": {"files": []},
    "size a string": {"files[0].size": "12"},
    "size a bool": {"files[0].size": True},
    "negative size": {"files[0].size": -1},
    "entry a string": {"files[0]": "iter_0000020/common.pt"},
    "path a number": {"files[0].path": 7},
    "path escapes": {"files[0].path": "../../etc/passwd"},
    "path of another iteration": {"files[0].path": "iter_0000010/common.pt"},
    "duplicate path": {"files[1]": "files[0]"},
    "crc not base64": {"files[0].crc32": "zz"},
    "iteration a string": {"iteration": "20"},
    "iteration mismatch": {"iteration": 21},
    "unknown key": {"owner": "me"},
    "missing key": {"-files": None},
    "wrong total": {"total_bytes": 1},
    "unknown format": {"format": "rltrainer.checkpoint/v0"},
}


def _malform(body: dict, change) -> bytes:
    if isinstance(change, bytes):
        return change
    for where, value in change.items():
        if where.startswith("-"):
            body.pop(where[1:])
        elif where.startswith("files["):
            i = int(where[6])
            field = where.split(".", 1)[1] if "." in where else None
            if field is None:
                body["files"][i] = body["files"][int(value[6])] if isinstance(value, str) and value.startswith("files[") else value
            else:
                body["files"][i][field] = value
        else:
            body[where] = value
    return json.dumps(body).encode()


# one case per way today's store failed: AttributeError, TypeError, a restore of nothing, a silent
# acceptance, an iteration mismatch (the others go through the same path: see the next test)
FALLBACK_CASES = ["a list", "files null", "entry a string", "files empty", "wrong total", "iteration mismatch"]


@pytest.mark.parametrize("case", FALLBACK_CASES)
def test_a_malformed_manifest_falls_back_to_the_previous_checkpoint(s3, tmp_path: Path, case: str):
    """Before: TypeError/AttributeError/KeyError tracebacks, or a restore of nothing (empty file list)."""
    ten = _two_checkpoints(s3, tmp_path)
    key = PREFIX + "iter_0000020/_COMPLETE.json"
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    s3.put_object(Bucket=BUCKET, Key=key, Body=_malform(body, MALFORMED[case]))
    result, log = restored(s3, tmp_path, "fresh")
    assert (result.iteration, result.source) == (10, "s3"), log
    assert files_of(tmp_path / "fresh", 10) == ten
    assert "iter_0000020/_COMPLETE.json" in log and "falling back to the next-newest" in log
    assert store_for(s3).list_complete() == [10]


def test_a_save_of_a_newer_manifest_format_stops_the_resume_and_is_never_quarantined(s3, tmp_path: Path):
    """Before: a manifest a newer image wrote (a format this image does not know, with keys it does
    not know) was "malformed": quarantined for good, so the newer image, once back, could not resume
    from its own save either, and this one trained on from the save before it."""
    from rltrainer.checkpoints import NewerManifestFormat

    _two_checkpoints(s3, tmp_path)
    key = PREFIX + "iter_0000020/_COMPLETE.json"
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(
        {**body, "format": "rltrainer.checkpoint/v4", "writer": "rltrainer 0.2"}).encode())
    for resume in (lambda: restored(s3, tmp_path, "fresh"), lambda: store_for(s3).newest_complete()):
        with pytest.raises(NewerManifestFormat) as err:
            resume()
        assert "format 'rltrainer.checkpoint/v4' was written by a newer rltrainer than this image's, " \
               "which reads up to 'rltrainer.checkpoint/v3'; the save is neither restored nor quarantined" \
               in str(err.value)
        assert store_for(s3).list_complete() == [10, 20]  # no quarantine marker


@pytest.mark.parametrize("case", sorted(set(MALFORMED) - {"iteration mismatch"}))
def test_every_malformed_manifest_is_a_manifest_error_never_a_crash(case: str):
    """Before (v1 schema, sha256 for crc32): 3 raised AttributeError/TypeError, 1 KeyError, 1 RecursionError,
    4 a ValueError the store caught, and 11 were accepted (an empty file list, string sizes, foreign paths, ...)."""
    from rltrainer.checkpoints import Manifest, ManifestError

    good = {"format": "rltrainer.checkpoint/v2", "iteration": 20, "created_at": "", "total_bytes": 12, "files": [
        {"path": "iter_0000020/common.pt", "size": 4, "crc32": "AAAAAA==", "part_size": 0},
        {"path": "iter_0000020/.metadata", "size": 8, "crc32": "AAAAAQ==", "part_size": 0}]}
    assert Manifest.from_json(json.dumps(good)).total_bytes == 12
    with pytest.raises(ManifestError, match="^m: "):
        Manifest.from_json(_malform(json.loads(json.dumps(good)), MALFORMED[case]), where="m")


def test_malformed_manifest_errors_name_the_field():
    from rltrainer.checkpoints import Manifest, ManifestError

    good = {"format": "rltrainer.checkpoint/v2", "iteration": 3, "files": [
        {"path": "iter_0000003/common.pt", "size": 4, "crc32": "AAAAAA==", "part_size": 0}]}
    assert Manifest.from_json(json.dumps(good)).files[0].size == 4
    cases = {
        "files empty": ({**good, "files": []}, "files must be a non-empty list"),
        "size": ({**good, "files": [{**good["files"][0], "size": "4"}]}, "files[0].size must be a non-negative integer, got '4'"),
        "keys": ({**good, "files": [{"path": "iter_0000003/x"}]}, "files[0] must be an object with exactly the keys"),
        "iteration": ({**good, "iteration": None}, "iteration must be a non-negative integer, got None"),
    }
    for name, (body, message) in cases.items():
        with pytest.raises(ManifestError, match=__import__("re").escape(message)):
            Manifest.from_json(json.dumps(body), where="m")


# ------------------------------------------------------------------------ incomplete saves


def test_an_empty_save_is_never_published(s3, tmp_path: Path):
    """Before: a manifest with "files": [] was written and restore 'restored' nothing at iteration 20."""
    src = tmp_path / "src"
    (src / "iter_0000020").mkdir(parents=True)
    write_tracker(src, 20)
    write_cursor(src, 20)
    from rltrainer.checkpoints import IncompleteCheckpoint

    with pytest.raises(IncompleteCheckpoint, match="holds no files; an empty checkpoint is never published"):
        store_for(s3).upload(src, 20)
    assert store_for(s3).list_complete() == []


def test_a_torch_dist_save_without_metadata_is_never_published(s3, tmp_path: Path):
    """Before: the shards were uploaded and the manifest written (missing_shards saw no .metadata: 'nothing to check')."""
    src = tmp_path / "src"
    make_save(src, 20)
    (src / "iter_0000020" / ".metadata").unlink()
    from rltrainer.checkpoints import IncompleteCheckpoint

    with pytest.raises(IncompleteCheckpoint, match="is a torch_dist save without .metadata"):
        store_for(s3).upload(src, 20)
    assert store_for(s3).list_complete() == []


def test_a_save_is_not_published_before_its_data_cursor_exists(s3, tmp_path: Path):
    """Miles writes the cursor after the model save and the tracker (train.py save()).
    Before: the watcher published iter 20 without rollout/global_dataset_state_dict_20.pt."""
    local = tmp_path / "ckpt"
    write_model_save(local, 20)
    write_tracker(local, 20)  # Megatron is done; Miles has not written the cursor yet
    log = io.StringIO()
    watcher = CheckpointWatcher(store_for(s3), local, interval_s=3600, log=log)
    assert watcher.scan_once() == []
    assert store_for(s3).list_complete() == []
    assert "global_dataset_state_dict_20.pt does not exist yet" in log.getvalue()
    (local / "rollout").mkdir()
    (local / "rollout/global_dataset_state_dict_20.pt").write_bytes(b"PK\x03\x04 half a zip")  # being written
    assert watcher.scan_once() == []
    write_cursor(local, 20)
    assert watcher.scan_once() == [20]
    assert "rollout/global_dataset_state_dict_20.pt" in s3_objects(s3, "rollout/")


def test_a_save_without_the_cursor_is_not_resumed_from(s3, tmp_path: Path):
    """Killed between Megatron's tracker and Miles' cursor: the tracker points at a save that is not whole.
    Before: resumed 'from local iter 20' (and uploaded it without the cursor), so the data started over."""
    local = tmp_path / "ckpt"
    ten = make_save(local, 10)
    store_for(s3).upload(local, 10)
    write_model_save(local, 20)
    write_tracker(local, 20)
    result = prepare_resume(store_for(s3), local, log=io.StringIO())
    assert (result.iteration, result.start_rollout_id) == (10, 11)
    assert read_tracker(local) == 10 and files_of(local, 10) == ten
    assert not (local / "iter_0000020").exists()
    assert store_for(s3).list_complete() == [10]


def test_without_s3_the_newest_whole_local_save_is_resumed(s3, tmp_path: Path):
    """The same kill, with S3 not holding anything yet: the local save before it is still whole."""
    local = tmp_path / "ckpt"
    ten = make_save(local, 10)
    write_model_save(local, 20)
    write_tracker(local, 20)
    log = io.StringIO()
    result = prepare_resume(store_for(s3), local, log=log)
    assert (result.iteration, result.source, result.start_rollout_id) == (10, "local", 11)
    assert read_tracker(local) == 10 and files_of(local, 10) == ten
    assert "falling back to local iter_0000010" in log.getvalue()
    assert store_for(s3).list_complete() == [10], "and it is uploaded before training"


def test_torn_saves_above_the_tracker_are_set_aside_before_a_restore(s3, tmp_path: Path):
    """Before: iter_0000030 (torn, above the tracker) stayed, and once training reached 30 again the
    watcher published a directory mixing the torn save's files with the new one's."""
    local = tmp_path / "ckpt"
    make_save(local, 10)
    store_for(s3).upload(local, 10)
    write_model_save(local, 30)  # being written when the pod died
    (local / "iter_0000030" / "__9_0.distcp").write_bytes(b"a shard only the torn save had")
    write_cursor(local, 30)
    write_tracker(local, 10)
    result = prepare_resume(store_for(s3), local, log=io.StringIO())
    assert result.iteration == 10
    assert not (local / "iter_0000030").exists()
    assert not (local / "rollout/global_dataset_state_dict_30.pt").exists()
    (aside,) = list((local / "_quarantine").iterdir())
    assert (aside / "iter_0000030" / "__9_0.distcp").is_file()
    # training reaches 30 again: the new save is published alone
    new = make_save(local, 30, seed=7)
    store_for(s3).upload(local, 30)
    assert {k: v for k, v in s3_objects(s3).items() if "0000030" in k or k.endswith("_30.pt")
            if not k.endswith("_COMPLETE.json")} == new


# ------------------------------------------------------------------------ upload speed


def test_upload_reads_each_file_once_and_s3_checks_the_checksum(s3, tmp_path: Path):
    """Before: every file was read twice, once to hash it and once to send it."""
    src = tmp_path / "src"
    files = make_save(src, 4)
    opened: list[str] = []
    watching = [False]

    def audit(event, args):
        if watching[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(str(src)):
            opened.append(Path(args[0]).relative_to(src).as_posix())

    sys.addaudithook(audit)
    watching[0] = True
    try:
        store_for(s3).upload(src, 4)
    finally:
        watching[0] = False
    data = sorted(rel for rel in files if rel.endswith((".distcp", "common.pt")))
    assert len(data) >= 2
    # the shards are opened once, by the upload; only the small index files (.metadata,
    # metadata.json, the cursor's zip directory) are also read to check that the save is whole
    assert sorted(rel for rel in opened if rel in data) == data, opened
    assert set(opened) == set(files)
    for rel in files:
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + rel, ChecksumMode="ENABLED")
        assert head.get("ChecksumCRC32"), f"{rel} carries an S3 CRC32 checksum"


def test_a_manifest_put_whose_answer_is_lost_counts_as_this_writers_upload(s3, tmp_path: Path):
    """The conditional PUT lands, its response is lost (a read timeout), and the retry gets 412
    from the writer's own manifest: that is this writer's upload, not another writer's, or the
    Capacity Block guard never sees the save it asked for."""
    from botocore.exceptions import ReadTimeoutError

    src = tmp_path / "src"
    make_save(src, 10, seed=1)
    lost = []

    def lose_the_answer(name, _n, kwargs):
        if name == "put_object" and kwargs["Key"].endswith("_COMPLETE.json") and not lost:
            lost.append(kwargs["Key"])
            raise ReadTimeoutError(endpoint_url="https://s3.amazonaws.com")

    log = io.StringIO()
    result = store_for(HookedClient(s3, after=lose_the_answer), log).upload(src, 10)
    assert lost and result.status == "uploaded"
    assert "another writer" not in log.getvalue()  # another writer's 412: the test above


def test_a_bucket_with_versioning_suspended_still_publishes(s3, tmp_path: Path, monkeypatch):
    """S3 answers VersionId "null" for objects put while versioning is suspended (moto answers
    none): the upload and the check before the manifest must read it alike, or no save is ever
    published and every scan uploads every save again."""
    src = tmp_path / "src"
    make_save(src, 10, seed=1)
    store = store_for(s3)
    real_head = store._head
    monkeypatch.setattr(store, "_head", lambda key: {**real_head(key), "VersionId": "null"})
    result = store.upload(src, 10)
    assert result.status == "uploaded" and store.list_complete() == [10]
    assert all(f.version_id is None for f in result.manifest.files)  # nothing pinned


def test_multipart_uploads_use_parallel_parts_and_verify_on_restore(s3, tmp_path: Path):
    """A shard above the multipart threshold goes up in parts; its composite CRC32 verifies on restore."""
    from boto3.s3.transfer import TransferConfig

    from rltrainer.checkpoints import s3_crc32

    src = tmp_path / "src"
    files = make_save(src, 8, extra_bytes=12 << 20)  # one ~12 MiB shard: 3 parts of 5 MiB
    config = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20, max_concurrency=4)
    calls = []
    hooked = HookedClient(s3, before=lambda name, _n, _kw: calls.append(name))
    store = S3CheckpointStore(URI, client=hooked, retry=RetryPolicy(sleep=lambda s: None),
                              progress_stream=io.StringIO(), transfer_config=config)
    result = store.upload(src, 8)
    big = max(result.manifest.files, key=lambda f: f.size)
    assert big.part_size == 5 << 20 and big.size > 10 << 20
    assert big.crc32 == s3_crc32(src / big.path, 5 << 20) != s3_crc32(src / big.path, 0)
    dst = tmp_path / "dst"
    store.restore(store.read_manifest(8), dst)
    assert files_of(dst, 8) == files
    bad = s3_objects(s3)[big.path]
    corrupt_file(s3, big.path, bad[: 6 << 20] + bytes([bad[6 << 20] ^ 1]) + bad[(6 << 20) + 1:])
    from rltrainer.checkpoints import CorruptCheckpoint

    with pytest.raises(CorruptCheckpoint, match="does not match its manifest"):
        store.restore(store.read_manifest(8), tmp_path / "dst2")


# ------------------------------------------------------------------------ crash at every step


def test_a_crash_at_any_step_of_an_upload_loses_nothing_complete(s3, tmp_path: Path):
    """Crash at every S3 call of uploading iter 20 (iter 10 complete), then resume on a fresh volume."""
    src = tmp_path / "src"
    ten = make_save(src, 10, seed=1)
    store_for(s3).upload(src, 10)
    twenty = make_save(src, 20, seed=2)
    baseline = s3_objects(s3)

    probe = HookedClient(s3)
    store_for(probe).upload(src, 20)
    steps = len(probe.calls)
    assert steps > len(twenty), "at least one call per file, then the manifest"
    # dying after call n leaves S3 as dying before call n + 1 would: "before" is needed only for the first
    cases = [(1, "before")] + [(n, "after") for n in range(1, steps + 1)]
    for crash_at, when in cases:
        # start every case from S3 holding only iter 10
        for key in set(s3_keys(s3)) - set(baseline):
            s3.delete_object(Bucket=BUCKET, Key=PREFIX + key)

        def die(_name, n, _kw, crash_at=crash_at):
            if n == crash_at:
                raise Crash(f"killed at call {n}")

        hooked = HookedClient(s3, **{when: die})
        with pytest.raises(Crash):
            store_for(hooked).upload(src, 20)
            pytest.fail(f"no crash at call {crash_at} {when}: {hooked.calls} vs {probe.calls}")
        complete = store_for(s3).list_complete()
        last = (crash_at, when) == (steps, "after")  # the response of the manifest put was lost
        assert complete == ([10, 20] if last else [10]), (crash_at, when, hooked.calls)
        assert s3_objects(s3, only=baseline) == baseline, "iter 10 untouched"
        dst = tmp_path / f"dst{crash_at}{when}"
        result, _ = restored(s3, tmp_path, dst.name)
        want = 10 if complete == [10] else 20
        assert result.iteration == want
        assert files_of(dst, want) == (ten if want == 10 else twenty)
        # a restart of the writer finishes the job
        store_for(s3).upload(src, 20)
        assert store_for(s3).list_complete() == [10, 20]


def test_an_upload_cut_short_resumes_with_the_files_s3_already_has(s3, tmp_path: Path):
    """Before: a retry uploaded the whole save again (terabytes for a 235B save), and on the
    versioned bucket every object sent twice stayed as an old version for 30 days. Now a file S3
    holds with the same size and checksum is not sent again; one that differs (another writer's,
    or damaged) is."""
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    src = tmp_path / "src"
    files = {it: make_save(src, it, seed=it) for it in (20, 30)}
    for it in (20, 30):  # each upload dies as its second file starts
        uploads: list[str] = []

        def die(name, _n, _kw, uploads=uploads):
            if name == "upload_file":
                uploads.append(name)
                if len(uploads) == 2:
                    raise Crash("killed during the second file")

        with pytest.raises(Crash):
            store_for(HookedClient(s3, before=die)).upload(src, it)
    [sent20] = s3_keys(s3, "iter_0000020/")  # one file of each made it
    [sent30] = s3_keys(s3, "iter_0000030/")
    corrupt_file(s3, sent30)  # same size, other bytes: not the file this writer has
    logs = {it: io.StringIO() for it in (20, 30)}
    for it, sent_again in ((20, len(files[20]) - 1), (30, len(files[30]))):
        calls = HookedClient(s3)
        assert store_for(calls, logs[it]).upload(src, it).status == "uploaded"
        assert calls.calls.count("upload_file") == sent_again, (it, calls.calls)
    assert "1 file(s) of iter_0000020 (0.0 GiB) were already in S3 from an upload cut short" in logs[20].getvalue()
    assert "already in S3" not in logs[30].getvalue()
    assert len(s3.list_object_versions(Bucket=BUCKET, Prefix=PREFIX + sent20)["Versions"]) == 1
    for it in (20, 30):
        store = store_for(s3)
        store.restore(store.read_manifest(it), tmp_path / f"dst{it}")
        assert files_of(tmp_path / f"dst{it}", it) == files[it]


def test_a_crash_at_any_step_of_a_restore_leaves_the_volume_as_it_was(s3, tmp_path: Path):
    src = tmp_path / "src"
    make_save(src, 10, seed=1)
    store_for(s3).upload(src, 10)
    twenty = make_save(src, 20, seed=2)
    store_for(s3).upload(src, 20)
    probe = HookedClient(s3)
    prepare_resume(store_for(probe), tmp_path / "probe", log=io.StringIO())
    steps = len(probe.calls)
    for crash_at in range(1, steps + 1):
        local = tmp_path / f"vol{crash_at}"
        ten_local = make_save(local, 10, seed=1)

        def die(_name, n, _kw, crash_at=crash_at):
            if n == crash_at:
                raise Crash(f"killed at call {n}")

        with pytest.raises(Crash):
            prepare_resume(store_for(HookedClient(s3, before=die)), local, log=io.StringIO())
        assert read_tracker(local) == 10, "the tracker moves only after every file is in place"
        assert files_of(local, 10) == ten_local
        result = prepare_resume(store_for(s3), local, log=io.StringIO())
        assert result.iteration == 20 and files_of(local, 20) == twenty
        assert store_for(s3).list_complete() == [10, 20], "a crash never quarantines a good checkpoint"


def test_a_crash_at_any_step_of_a_stale_writer_never_touches_the_complete_iteration(s3, tmp_path: Path):
    make_save(tmp_path / "a", 20, seed=1)
    store_for(s3).upload(tmp_path / "a", 20)
    published = s3_objects(s3)
    make_save(tmp_path / "b", 20, seed=2)
    probe = HookedClient(s3)
    store_for(probe).upload(tmp_path / "b", 20)
    assert s3_objects(s3) == published
    assert set(probe.calls) == {"list_objects_v2"}, probe.calls


# ------------------------------------------------------------------------ S3's own response shapes


def test_real_s3_composite_checksums_and_precondition_errors(monkeypatch):
    """What moto 5.2.5 does differently from S3, checked with botocore's Stubber against S3's model:
    S3 appends "-<parts>" to a composite checksum in HeadObject; a lost conditional put is a 412."""
    aws_test_env(monkeypatch)
    import boto3
    from botocore.stub import ANY, Stubber

    client = boto3.client("s3", region_name="us-east-1")
    store = store_for(client)
    with Stubber(client) as stub:
        stub.add_response("head_object", {"ContentLength": 200 << 20, "ChecksumCRC32": "7ZnX0w==-4",
                                          "ChecksumType": "COMPOSITE"},
                          {"Bucket": BUCKET, "Key": PREFIX + "iter_0000001/__0_0.distcp", "ChecksumMode": "ENABLED"})
        assert store._head_checksum(PREFIX + "iter_0000001/__0_0.distcp") == (200 << 20, "7ZnX0w==")
        stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412,
                              expected_params={"Bucket": BUCKET, "Key": PREFIX + "iter_0000001/_QUARANTINED.json",
                                               "Body": ANY, "ContentType": "application/json", "IfNoneMatch": "*"})
        store.quarantine(1, "already quarantined by another pod")  # a 412 here is not an error
        stub.assert_no_pending_responses()
    assert store.transfer_config.preferred_transfer_client == "classic", "the part size must be ours"


def test_a_full_object_checksum_is_recorded_as_one(tmp_path: Path, monkeypatch):
    """S3 (or a CRT upload) may keep a FULL_OBJECT CRC32 even for a multipart upload: then part_size is 0."""
    aws_test_env(monkeypatch)
    import boto3
    from botocore.stub import Stubber

    from rltrainer.checkpoints import s3_crc32

    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 1000)
    client = boto3.client("s3", region_name="us-east-1")
    store = store_for(client)

    class UploadsNothing:  # the upload itself is not what is tested here; HeadObject is stubbed
        head_object = staticmethod(client.head_object)

        @staticmethod
        def upload_file(*_args, **_kwargs):
            return None

    store.client = UploadsNothing()
    from rltrainer.checkpoints import Progress

    with Stubber(client) as stub:
        for kind in ("FULL_OBJECT", "COMPOSITE"):
            stub.add_response("head_object", {"ContentLength": 1000, "ChecksumCRC32": s3_crc32(src),
                                              "ChecksumType": kind})
        store.transfer_config.multipart_threshold = 100
        store.transfer_config.multipart_chunksize = 8 << 20
        full = store._upload_file(src, "iter_0000001/f.bin", 1000, Progress("t", 1000, io.StringIO()))
        composite = store._upload_file(src, "iter_0000001/f.bin", 1000, Progress("t", 1000, io.StringIO()))
    assert (full.part_size, composite.part_size) == (0, 8 << 20)


def test_checkpoint_cli_lists_a_malformed_manifest_as_an_error_and_restore_falls_back(s3, tmp_path: Path):
    """Before: `rltrainer checkpoint list` died with a traceback on the first malformed manifest."""
    from rltrainer.checkpoint_cli import main as checkpoint_main

    _two_checkpoints(s3, tmp_path)
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "iter_0000020/_COMPLETE.json", Body=b'{"files": null}')
    out = io.StringIO()
    assert checkpoint_main(["list", "--s3-uri", URI], out=out, err=io.StringIO(), client=s3) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["iteration"] for r in rows] == [10, 20]
    assert "files" in rows[0] and "missing keys ['format', 'iteration']" in rows[1]["error"]
    out, err = io.StringIO(), io.StringIO()
    assert checkpoint_main(["restore", "--s3-uri", URI, "--local-dir", str(tmp_path / "dst")], out=out, err=err,
                           client=s3) == 0
    assert json.loads(out.getvalue()) == {"iteration": 10, "source": "s3"}
    assert "falling back to the next-newest" in err.getvalue()

"""S3 checkpoint sync against moto: complete upload/restore, torn uploads, retries."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from boto3.exceptions import RetriesExceededError
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from ckpt_helpers import PREFIX, make_save, moto_s3, write_cursor
from rltrainer.checkpoints import (
    CheckpointWatcher,
    IncompleteCheckpoint,
    Progress,
    RetryPolicy,
    S3CheckpointStore,
    human_bytes,
    prepare_resume,
    read_tracker,
    write_tracker,
)

URI = "s3://ckpt-bucket/runs/qwen3-30b-a3b-grpo/"
pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch)


class Sleeps(list):
    """Records the backoff delays instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class FlakyClient:
    """Wraps a real (moto) client and fails chosen calls, to test what S3 errors do."""

    def __init__(self, client, fail: dict[str, list[Exception]] | None = None, fail_on_nth: dict | None = None):
        self._client = client
        self._fail = {k: list(v) for k, v in (fail or {}).items()}  # method -> errors for its next calls
        self._fail_on_nth = dict(fail_on_nth or {})  # method -> (n, error): fail the n-th call (1-based) and later
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        real = getattr(self._client, name)

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._fail.get(name):
                raise self._fail[name].pop(0)
            nth = self._fail_on_nth.get(name)
            if nth and self.calls[name] >= nth[0]:
                raise nth[1]
            return real(*args, **kwargs)

        return call


def client_error(code: str, status: int, op: str = "PutObject") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, op)


def fake_save(root: Path, iteration: int, seed: int = 0) -> dict[str, bytes]:
    """A Megatron torch_dist save plus Miles' rollout cursor, with the tracker updated (ckpt_helpers)."""
    return make_save(root, iteration, seed=seed)


def store_for(client, sleeps=None, stream=None) -> S3CheckpointStore:
    sleeps = Sleeps() if sleeps is None else sleeps  # an empty Sleeps is falsy: test for None
    return S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=sleeps, log=io.StringIO()),
                             progress_stream=stream if stream is not None else io.StringIO(), progress_interval_s=0)


def test_upload_then_restore_is_byte_identical(s3, tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = fake_save(src, 20)
    progress = io.StringIO()
    store = store_for(s3, stream=progress)

    manifest = store.upload(src, 20).manifest
    assert store.list_complete() == [20]
    assert sorted(f.path for f in manifest.files) == sorted(files)
    assert "rollout/global_dataset_state_dict_20.pt" in files
    assert manifest.total_bytes == sum(len(b) for b in files.values())
    body = json.loads(s3.get_object(Bucket="ckpt-bucket", Key="runs/qwen3-30b-a3b-grpo/iter_0000020/_COMPLETE.json")["Body"].read())
    assert body["iteration"] == 20 and body["format"] == "rltrainer.checkpoint/v2"
    assert all(set(f) == {"path", "size", "crc32", "part_size"} for f in body["files"])
    total = human_bytes(manifest.total_bytes)
    assert progress.getvalue().splitlines()[-1] == f"rltrainer: upload iter_0000020 to {URI}: {total} / {total} (100%)"

    result = prepare_resume(store, dst, log=io.StringIO())
    assert (result.iteration, result.source) == (20, "s3")
    assert read_tracker(dst) == 20
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data


def test_upload_reports_progress_in_bytes():
    out = io.StringIO()
    ticks = iter(range(100))
    p = Progress("upload iter_0000001", 3 << 20, out, min_interval_s=1.0, clock=lambda: next(ticks))
    p(1 << 20)
    p(1 << 20)
    p(1 << 20)
    p.finish()
    assert out.getvalue().splitlines() == [
        "rltrainer: upload iter_0000001: 1.0 MiB / 3.0 MiB (33%)",
        "rltrainer: upload iter_0000001: 2.0 MiB / 3.0 MiB (67%)",
        "rltrainer: upload iter_0000001: 3.0 MiB / 3.0 MiB (100%)",
        "rltrainer: upload iter_0000001: 3.0 MiB / 3.0 MiB (100%)",
    ]


def test_upload_that_dies_midway_leaves_previous_checkpoint_newest(s3, tmp_path: Path):
    src = tmp_path / "src"
    first = fake_save(src, 10, seed=1)
    store_for(s3).upload(src, 10)
    fake_save(src, 20, seed=2)

    # the third file of iteration 20 fails with an error that is not worth retrying
    flaky = FlakyClient(s3, fail_on_nth={"upload_file": (3, client_error("AccessDenied", 403))})
    sleeps = Sleeps()
    with pytest.raises(ClientError, match="AccessDenied"):
        store_for(flaky, sleeps).upload(src, 20)
    assert sleeps == [], "a permission error is not retried"

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt-bucket")["Contents"]]
    # the two files before the failure made it, the rest and the manifest did not
    assert sorted(k for k in keys if "iter_0000020/" in k) == [
        "runs/qwen3-30b-a3b-grpo/iter_0000020/.metadata",
        "runs/qwen3-30b-a3b-grpo/iter_0000020/__0_0.distcp",
    ]

    store = store_for(s3)
    assert store.list_complete() == [10]
    assert store.newest_complete().iteration == 10
    dst = tmp_path / "fresh"
    result = prepare_resume(store, dst, log=io.StringIO())
    assert (result.iteration, result.source) == (10, "s3")
    for rel, data in first.items():
        assert (dst / rel).read_bytes() == data
    assert not (dst / "iter_0000020").exists()


def test_transient_errors_are_retried_with_exponential_backoff(s3, tmp_path: Path):
    src = tmp_path / "src"
    files = fake_save(src, 5)
    flaky = FlakyClient(s3, fail={
        "upload_file": [client_error("SlowDown", 503), client_error("InternalError", 500),
                        EndpointConnectionError(endpoint_url="https://s3.amazonaws.com")],
        "put_object": [client_error("ServiceUnavailable", 503)],
    })
    sleeps = Sleeps()
    store = store_for(flaky, sleeps)
    store.upload(src, 5)
    assert sleeps == [1.0, 2.0, 4.0, 1.0]  # three upload_file retries, then one for the manifest
    assert store.list_complete() == [5]

    flaky_down = FlakyClient(s3, fail={"download_file": [EndpointConnectionError(endpoint_url="https://s3.amazonaws.com")]})
    sleeps = Sleeps()
    dst = tmp_path / "dst"
    store_for(flaky_down, sleeps).restore(store.read_manifest(5), dst)
    assert sleeps == [1.0]
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data


def test_retries_give_up_after_max_attempts(s3, tmp_path: Path):
    src = tmp_path / "src"
    fake_save(src, 1)
    flaky = FlakyClient(s3, fail_on_nth={"upload_file": (1, client_error("SlowDown", 503))})
    sleeps = Sleeps()
    store = S3CheckpointStore(URI, client=flaky, retry=RetryPolicy(max_attempts=4, base_delay_s=0.5, max_delay_s=1.5,
                                                                   sleep=sleeps, log=io.StringIO()),
                              progress_stream=io.StringIO())
    with pytest.raises(ClientError, match="SlowDown"):
        store.upload(src, 1)
    assert sleeps == [0.5, 1.0, 1.5]  # capped at max_delay_s
    assert store_for(s3).list_complete() == []


class TimeoutsOnGet:
    """S3 GETs of keys ending in ``suffix`` time out, ``times`` times: a botocore handler
    raises ReadTimeoutError before the request is built, where s3transfer's GetObject task catches
    it and tries again (s3transfer 0.19.3 download.py), as it would a socket timeout. ``keys``
    records every GET."""

    def __init__(self, client, suffix: str, times: int):
        self.suffix, self.left, self.keys = suffix, times, []
        client.meta.events.register("before-parameter-build.s3.GetObject", self)

    def __call__(self, params, **_kwargs):
        self.keys.append(params["Key"])
        if params["Key"].endswith(self.suffix) and self.left > 0:
            self.left -= 1
            raise ReadTimeoutError(endpoint_url="https://s3.us-east-1.amazonaws.com")


def test_a_part_s3transfer_gave_up_on_is_retried_and_the_restore_goes_on(s3, tmp_path: Path):
    """s3transfer tries a GET 5 times (TransferConfig num_download_attempts) and then raises
    RetriesExceededError, which boto3's download_file re-raises as boto3's own. Before: not
    retryable, so one flaky part ended the restore and the launch."""
    src = tmp_path / "src"
    files = fake_save(src, 20)
    store_for(s3).upload(src, 20)
    gets = TimeoutsOnGet(s3, "/common.pt", times=5)
    sleeps, log = Sleeps(), io.StringIO()
    store = S3CheckpointStore(URI, client=s3, retry=RetryPolicy(sleep=sleeps, log=log), progress_stream=io.StringIO())
    result = prepare_resume(store, tmp_path / "dst", log=io.StringIO())
    assert (result.iteration, result.source) == (20, "s3")
    assert sleeps == [1.0]
    assert sum(k.endswith("/common.pt") for k in gets.keys) == 6, "s3transfer's 5 tries, then one more of ours"
    assert (f"download {URI}iter_0000020/common.pt failed (RetriesExceededError: Max Retries Exceeded (last "
            'try: ReadTimeoutError: Read timeout on endpoint URL: "https://s3.us-east-1.amazonaws.com")); '
            "retry 1/5 in 1s") in log.getvalue()
    for rel, data in files.items():
        assert (tmp_path / "dst" / rel).read_bytes() == data


class BodyCutShort:
    """Delegates to an S3 client; the first ``times`` GetObject bodies break while being read, as
    botocore's StreamingBody does on a dropped connection (ResponseStreamingError) or a short body
    (IncompleteReadError)."""

    def __init__(self, client, error: Exception, times: int = 1):
        self.client, self.error, self.left = client, error, times

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_object(self, **kwargs):
        response = self.client.get_object(**kwargs)
        if self.left > 0:
            self.left -= 1
            error = self.error

            class Broken:
                def read(self, *_a):
                    raise error
            response["Body"] = Broken()
        return response


@pytest.mark.parametrize("error", ["ResponseStreamingError", "IncompleteReadError"])
def test_a_manifest_read_cut_short_is_retried(s3, tmp_path: Path, error: str):
    """Before: a body cut short while reading a manifest was not retryable, and one dropped
    connection ended the resume (EXIT_PREPARE; KubeRay then started a fresh GPU cluster)."""
    from botocore import exceptions

    src = tmp_path / "src"
    fake_save(src, 20)
    store_for(s3).upload(src, 20)
    broken = {"ResponseStreamingError": exceptions.ResponseStreamingError(error="Connection broken"),
              "IncompleteReadError": exceptions.IncompleteReadError(actual_bytes=3, expected_bytes=900)}[error]
    sleeps = Sleeps()
    store = S3CheckpointStore(URI, client=BodyCutShort(s3, broken), retry=RetryPolicy(sleep=sleeps, log=io.StringIO()),
                              progress_stream=io.StringIO())
    assert store.read_manifest(20).iteration == 20
    assert sleeps == [1.0]


def test_a_restore_that_fails_keeps_its_verified_files_for_the_next_attempt(s3, tmp_path: Path):
    """Before: restore's ``finally`` deleted the staging directory, so after S3 reads failed for
    good on the last file, the next attempt (KubeRay's retry) downloaded the whole save again."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = fake_save(src, 20)
    store_for(s3).upload(src, 20)
    cursor = "rollout/global_dataset_state_dict_20.pt"  # the manifest's last file
    gets = TimeoutsOnGet(s3, cursor, times=10**6)
    store = S3CheckpointStore(URI, client=s3, retry=RetryPolicy(max_attempts=2, sleep=Sleeps(), log=io.StringIO()),
                              progress_stream=io.StringIO())
    with pytest.raises(RetriesExceededError):
        prepare_resume(store, dst, log=io.StringIO())
    assert read_tracker(dst) is None and not (dst / "iter_0000020").exists(), "nothing moved into place"
    staged = dst / "_restore_staging"
    assert {p.relative_to(staged).as_posix(): p.read_bytes() for p in staged.rglob("*") if p.is_file()} == {
        rel: data for rel, data in files.items() if rel != cursor}

    gets.left, gets.keys[:] = 0, []  # S3 reads work again
    result = prepare_resume(store_for(s3), dst, log=io.StringIO())
    assert (result.iteration, result.source) == (20, "s3")
    assert [k for k in gets.keys if not k.endswith("_COMPLETE.json")] == [PREFIX + cursor], "only what was missing"
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data
    assert not staged.exists()


def test_staged_files_of_another_save_or_that_no_longer_match_are_not_used(s3, tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = fake_save(src, 20)
    store_for(s3).upload(src, 20)
    staged = dst / "_restore_staging"
    (staged / "iter_0000010").mkdir(parents=True)
    (staged / "iter_0000010" / "common.pt").write_bytes(b"a file of another save's restore")
    (staged / "iter_0000020").mkdir()
    (staged / "iter_0000020" / "common.pt").write_bytes(b"torn")  # cut short by a killed pod
    result = prepare_resume(store_for(s3), dst, log=io.StringIO())
    assert (result.iteration, result.source) == (20, "s3")
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data
    assert not (dst / "iter_0000010").exists() and not staged.exists()


def test_a_resume_that_restores_nothing_clears_what_a_failed_restore_staged(s3, tmp_path: Path):
    local = tmp_path / "ckpt"
    fake_save(local, 20)
    (local / "_restore_staging" / "iter_0000030").mkdir(parents=True)
    (local / "_restore_staging" / "iter_0000030" / "common.pt").write_bytes(b"x" * 100)
    result = prepare_resume(store_for(s3), local, log=io.StringIO())
    assert (result.iteration, result.source) == (20, "local")
    assert not (local / "_restore_staging").exists()


def test_restore_refuses_a_file_that_does_not_match_its_manifest(s3, tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    fake_save(src, 30)
    store = store_for(s3)
    manifest = store.upload(src, 30).manifest
    s3.put_object(Bucket="ckpt-bucket", Key="runs/qwen3-30b-a3b-grpo/iter_0000030/common.pt", Body=b"bit rot")
    dst.mkdir()
    with pytest.raises(IOError, match=r"iter_0000030/common.pt does not match its manifest: size 7 \(expected \d+\), crc32 differs"):
        store.restore(manifest, dst)
    assert read_tracker(dst) is None, "the tracker is written only after every file checks out"
    assert not (dst / "iter_0000030" / "common.pt").exists()


def test_local_complete_save_missing_from_s3_is_uploaded_before_training(s3, tmp_path: Path):
    local = tmp_path / "ckpt"
    fake_save(local, 10)
    store = store_for(s3)
    store.upload(local, 10)
    fake_save(local, 20)  # Megatron finished 20 (tracker says so), the pod died before the upload
    result = prepare_resume(store, local, log=io.StringIO())
    assert (result.iteration, result.source, result.uploaded) == (20, "local", [20])
    assert store.list_complete() == [10, 20]


def test_fresh_start_when_s3_is_empty(s3, tmp_path: Path):
    result = prepare_resume(store_for(s3), tmp_path / "ckpt", log=io.StringIO())
    assert (result.iteration, result.source) == (None, "fresh")
    assert read_tracker(tmp_path / "ckpt") is None


def test_watcher_uploads_only_saves_the_tracker_has_reached(s3, tmp_path: Path):
    local = tmp_path / "ckpt"
    fake_save(local, 10)
    fake_save(local, 20)
    write_tracker(local, 10)  # iter_0000020 exists but Megatron has not finished it
    log = io.StringIO()
    watcher = CheckpointWatcher(store_for(s3), local, interval_s=3600, log=log)
    assert watcher.scan_once() == [10]
    assert watcher.pending() == []
    write_tracker(local, 20)
    assert watcher.pending() == [20]
    assert watcher.scan_once() == [20]
    assert watcher.scan_once() == []
    assert store_for(s3).list_complete() == [10, 20]
    assert "iter_0000020 is complete in s3://ckpt-bucket/runs/qwen3-30b-a3b-grpo/" in log.getvalue()


def test_watcher_keeps_going_when_an_upload_fails(s3, tmp_path: Path):
    local = tmp_path / "ckpt"
    fake_save(local, 10)
    flaky = FlakyClient(s3, fail={"upload_file": [client_error("AccessDenied", 403)]})
    log = io.StringIO()
    watcher = CheckpointWatcher(store_for(flaky), local, interval_s=3600, log=log)
    assert watcher.scan_once() == []
    assert "AccessDenied" in watcher.failures[10]
    assert watcher.pending() == [10]
    assert watcher.scan_once() == [10], "the next scan retries the save"
    assert "upload of iter_0000010 failed, will retry" in log.getvalue()
    assert watcher.failures == {}, "an uploaded save's failure is not kept"


class DownStore:
    """S3 refusing every upload, as for a week of an expired role."""

    uri = "s3://ckpt-bucket/runs/down/"
    require_data_cursor = True

    def _markers(self):
        return set(), set()

    def upload(self, root, iteration):
        raise RuntimeError("An error occurred (AccessDenied) when calling the PutObject operation: Access Denied")


def test_a_save_that_fails_every_scan_is_kept_once_and_said_now_and_then(tmp_path: Path):
    """Before: every 30 s scan appended its failure and printed it: a week of one failing save
    was 20,160 entries in memory and as many log lines."""
    local = tmp_path / "ckpt"
    make_save(local, 10)
    log = io.StringIO()
    watcher = CheckpointWatcher(DownStore(), local, interval_s=30, log=log)
    now = [0.0]
    watcher.monotonic = lambda: now[0]
    for _ in range(10_000):  # 83 hours of 30 s scans
        assert watcher.scan_once() == []
        now[0] += 30
    assert list(watcher.failures) == [10] and "AccessDenied" in watcher.failures[10]
    lines = log.getvalue().splitlines()
    assert len(lines) == 10_000 * 30 // CheckpointWatcher.REMIND_S + 1  # the first, then one per 30 min
    assert lines[1] == ("rltrainer: upload of iter_0000010 failed, will retry: An error occurred (AccessDenied) "
                        "when calling the PutObject operation: Access Denied (the same failure 59 more time(s) "
                        "since it was last said)")
    # A save set aside meanwhile (torn, quarantined) is not kept either.
    import shutil

    shutil.rmtree(local)
    watcher.scan_once()
    assert watcher.failures == {}


def test_unsafe_manifest_paths_are_rejected():
    from rltrainer.checkpoints import Manifest

    body = {"format": "rltrainer.checkpoint/v1", "iteration": 1, "files": [{"path": "../etc/passwd", "size": 1, "sha256": "0"}]}
    with pytest.raises(ValueError, match="unsafe path in checkpoint manifest: '../etc/passwd'"):
        Manifest.from_json(json.dumps(body))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # a one-process save is intended here
def test_a_save_missing_shards_of_other_nodes_is_never_uploaded(s3, tmp_path: Path):
    """torch_dist lists every shard in .metadata; one that is not visible here means a torn save."""
    import torch
    import torch.distributed.checkpoint as dcp

    local = tmp_path / "ckpt"
    it_dir = local / "iter_0000040"
    dcp.save({"weight": torch.arange(8.0), "bias": torch.ones(2)}, checkpoint_id=str(it_dir))
    write_tracker(local, 40)
    write_cursor(local, 40)
    store = store_for(s3)
    (shard,) = [p.name for p in it_dir.glob("*.distcp")]
    hidden = it_dir / shard
    data = hidden.read_bytes()
    hidden.unlink()  # as if another node wrote it to its own local disk
    with pytest.raises(IncompleteCheckpoint, match=rf"lacks 1 shard\(s\) its .metadata lists \(e.g. {shard}\); "
                                                  "on a multi-node run checkpoint.local_dir must be storage every node"):
        store.upload(local, 40)
    assert store.list_complete() == []
    hidden.write_bytes(data)
    manifest = store.upload(local, 40).manifest
    assert sorted(f.path for f in manifest.files) == ["iter_0000040/.metadata", f"iter_0000040/{shard}",
                                                      "rollout/global_dataset_state_dict_40.pt"]

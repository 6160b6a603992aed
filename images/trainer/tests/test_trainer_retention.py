"""A run that saves for a week: local retention, bounded quarantine, versions pinned in the
manifest, a finished run that retries its upload and not the job, Lustre striping.

Each test names what broke before (issue 21, section 2).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ckpt_helpers import (BUCKET, PREFIX, URI, Crash, HookedClient, files_of, make_save, moto_s3, s3_keys,
                          write_cursor, write_model_save)
from rltrainer.checkpoints import (
    CheckpointWatcher,
    Retention,
    RetryPolicy,
    S3CheckpointStore,
    VERSIONED_MANIFEST_FORMAT,
    local_iterations,
    prepare_resume,
    read_tracker,
    stripe_across_targets,
)
from rltrainer.checkpoints import retention as retention_module

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch)


def store_for(client, log=None) -> S3CheckpointStore:
    return S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=lambda s: None, log=io.StringIO()),
                             progress_stream=log if log is not None else io.StringIO(), progress_interval_s=3600)


def cursors(root: Path) -> list[int]:
    return sorted(int(p.name[len("global_dataset_state_dict_"):-3]) for p in (root / "rollout").glob("*.pt"))


# ------------------------------------------------------------------------ local retention


def test_only_saves_complete_in_s3_beyond_the_newest_k_are_deleted(s3, tmp_path: Path):
    """Before: every save stayed on the file system, so the third one failed with ENOSPC."""
    root = tmp_path / "ckpt"
    store = store_for(s3)
    log = io.StringIO()
    watcher = CheckpointWatcher(store, root, log=log, retention=Retention(keep_local=2))
    for it in (10, 20, 30):
        make_save(root, it, seed=it)
        watcher.scan_once()
    assert local_iterations(root) == [20, 30] and cursors(root) == [20, 30]
    assert "deleted local iter_0000010 (complete in S3" in log.getvalue()
    # a finished save S3 does not hold yet (its upload fails) is never deleted, however old
    make_save(root, 40, seed=40)
    make_save(root, 50, seed=50)
    assert Retention(keep_local=1).prunable(root, complete_in_s3=[10, 20, 30, 50]) == [20, 30]
    assert 40 not in Retention(keep_local=1).prunable(root, complete_in_s3=[10, 20, 30, 50])
    # the newest complete in S3 and the tracker's save stay even with keep_local 1
    assert Retention(keep_local=1).prunable(root, complete_in_s3=[20, 30]) == [20]
    # a protected save (being restored / resumed from) stays
    assert Retention(keep_local=1).prunable(root, complete_in_s3=[20, 30, 50], protect=[20]) == [30]
    # no tracker: nothing is known finished, nothing is deleted
    (root / "latest_checkpointed_iteration.txt").unlink()
    assert Retention(keep_local=1).prunable(root, complete_in_s3=[10, 20, 30, 40, 50]) == []


def test_a_save_under_a_quarantined_number_goes_once_a_newer_one_is_in_s3(s3, tmp_path: Path):
    """Before: after a fallback from bad iter 20, Megatron saved 20 again; the store never uploads
    to a quarantined number, so that save was never complete in S3 and never deleted, and the
    volume (sized for keep_local + 1 saves) was full at the next save."""
    store = store_for(s3)
    first = tmp_path / "first-pod"
    for it in (10, 20):
        make_save(first, it, seed=it)
        store.upload(first, it)
    store.quarantine(20, "a shard does not match its manifest")
    root, log = tmp_path / "ckpt", io.StringIO()
    retention = Retention(keep_local=1)
    assert prepare_resume(store, root, log=log, retention=retention).iteration == 10
    watcher = CheckpointWatcher(store, root, log=log, retention=retention)
    make_save(root, 20, seed=99)  # the same number again, on the same save grid
    watcher.scan_once()
    assert local_iterations(root) == [10, 20]  # no newer save in S3 yet: nothing is superseded
    make_save(root, 30, seed=30)
    watcher.scan_once()
    assert store.list_complete() == [10, 30] and local_iterations(root) == [30]
    assert cursors(root) == [30]
    assert ("deleted local iter_0000020 (quarantined in S3, so never uploaded; a newer save is "
            "complete there") in log.getvalue()
    # a resume prunes the same way (the save reappears below the tracker, which stays at 30)
    write_model_save(root, 20, seed=98)
    write_cursor(root, 20, seed=98)
    assert local_iterations(root) == [20, 30] and read_tracker(root) == 30
    assert prepare_resume(store, root, log=io.StringIO(), retention=retention).iteration == 30
    assert local_iterations(root) == [30]


def test_a_save_being_written_above_the_tracker_is_never_deleted(s3, tmp_path: Path):
    root = tmp_path / "ckpt"
    make_save(root, 10)
    make_save(root, 20)
    (root / "iter_0000030").mkdir()  # Megatron is writing it; the tracker still says 20
    assert Retention(keep_local=1).prunable(root, complete_in_s3=[10, 20, 30]) == [10]


def test_keep_local_below_one_is_refused():
    with pytest.raises(ValueError, match="keep_local must be >= 1"):
        Retention(keep_local=0)


def test_a_crash_half_way_through_a_delete_leaves_no_partial_save(s3, tmp_path: Path, monkeypatch):
    """The save is renamed into _pruning/ before it is removed: a crash there leaves no iter_ directory."""
    root = tmp_path / "ckpt"
    store = store_for(s3)
    for it in (10, 20):
        make_save(root, it, seed=it)
        store.upload(root, it)
    real_rmtree = retention_module.shutil.rmtree

    def die(path, *a, **kw):
        raise Crash(f"killed while deleting {path}")

    monkeypatch.setattr(retention_module.shutil, "rmtree", die)
    with pytest.raises(Crash):
        Retention(keep_local=1).prune(root, [10, 20], log=io.StringIO())
    assert local_iterations(root) == [20] and cursors(root) == [20]
    assert (root / "_pruning").is_dir()
    monkeypatch.setattr(retention_module.shutil, "rmtree", real_rmtree)
    result = prepare_resume(store, root, log=io.StringIO(), retention=Retention(keep_local=1))
    assert result.iteration == 20 and not (root / "_pruning").exists()


def test_resume_prunes_old_local_saves_but_never_its_start_point(s3, tmp_path: Path):
    root = tmp_path / "ckpt"
    store = store_for(s3)
    for it in (10, 20, 30):
        make_save(root, it, seed=it)
        store.upload(root, it)
    result = prepare_resume(store, root, log=io.StringIO(), retention=Retention(keep_local=1))
    assert result.iteration == 30 and local_iterations(root) == [30]
    assert read_tracker(root) == 30


# ------------------------------------------------------------------------ retention in S3


def iterations_in_s3(client) -> list[int]:
    """Iterations with any object left in S3 (their directory or their data cursor)."""
    found = {int(k.split("/")[0][len("iter_"):]) for k in s3_keys(client, "iter_")}
    found |= {int(k[len("rollout/global_dataset_state_dict_"):-3]) for k in s3_keys(client, "rollout/")}
    return sorted(found)


def test_s3_keeps_the_newest_k_complete_saves_and_deletes_the_rest_whole(s3, tmp_path: Path):
    """Before: S3 kept every save of a run for good (a 235B save is terabytes, every 20
    rollouts). With keep_s3, the older saves go: manifest, shards and data cursor."""
    root, log = tmp_path / "ckpt", io.StringIO()
    store = store_for(s3)
    watcher = CheckpointWatcher(store, root, log=log, retention=Retention(keep_local=1, keep_s3=2))
    for it in (10, 20, 30, 40, 50):
        make_save(root, it, seed=it)
        watcher.scan_once()
    assert store.list_complete() == [40, 50] and iterations_in_s3(s3) == [40, 50]
    assert local_iterations(root) == [50]
    assert f"deleted iter_0000010 from {URI} (keeping the newest 2 complete save(s) there)" in log.getvalue()
    # the default keeps every save
    assert Retention(keep_local=1).s3_prunable([10, 20, 30], on_disk=[]) == []
    # never one still on the shared file system (an uploader's source), never the start point
    assert Retention(keep_s3=1).s3_prunable([10, 20, 30], on_disk=[20, 30]) == [10]
    assert Retention(keep_s3=1).s3_prunable([10, 20, 30], on_disk=[], protect=[10]) == [20]
    with pytest.raises(ValueError, match="keep_s3 must be >= 0"):
        Retention(keep_s3=-1)


def test_a_delete_cut_short_is_finished_at_the_next_resume_and_uploads_are_left_alone(s3, tmp_path: Path):
    """The manifest goes first, so a pod killed during a delete leaves a save that is gone for
    every reader but still stored; the next resume deletes those objects. Objects without a
    manifest that may be an upload under way (a save on the file system, or newer than every save
    kept) stay."""
    first = tmp_path / "first-pod"
    store = store_for(s3)
    for it in (10, 20, 30):
        make_save(first, it, seed=it)
        store.upload(first, it)

    def die(name, _n, _kw):
        if name == "delete_objects":
            raise Crash("killed while deleting")

    with pytest.raises(Crash):
        Retention(keep_s3=2).prune_s3(store_for(HookedClient(s3, before=die)), [10, 20, 30], tmp_path / "empty",
                                      log=io.StringIO())
    assert store.list_complete() == [20, 30] and iterations_in_s3(s3) == [10, 20, 30]
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "iter_0000040/__0_0.distcp", Body=b"x")  # a newer writer's
    log = io.StringIO()
    result = prepare_resume(store, tmp_path / "ckpt", log=log, retention=Retention(keep_local=1, keep_s3=2))
    assert result.iteration == 30
    assert iterations_in_s3(s3) == [20, 30, 40]
    assert f"deleted what a cut-short delete left of iter_0000010 in {URI}" in log.getvalue()
    # an old save on the shared file system whose upload is under way (or was cut short) stays too
    shared = tmp_path / "shared"
    write_model_save(shared, 7, seed=7)
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "iter_0000007/__0_0.distcp", Body=b"x")
    Retention(keep_s3=2).prune_s3(store, [20, 30], shared, log=io.StringIO(), orphans=True)
    assert iterations_in_s3(s3) == [7, 20, 30, 40]


def test_keep_s3_deletes_quarantined_saves_older_than_every_save_kept(s3, tmp_path: Path):
    """Quarantined saves stayed in S3 for good, even under keep_s3. One older than every save
    kept can never be resumed from (with its marker removed keep_s3 would prune it at once):
    the resume deletes it, manifest first, marker last. A newer one stays for inspection."""
    src, store = tmp_path / "src", store_for(s3)
    for it in (10, 20, 30):
        make_save(src, it, seed=it)
        store.upload(src, it)
    store.quarantine(10, "a shard does not match its manifest")
    store.quarantine(30, "a shard does not match its manifest")
    # without keep_s3 every quarantined save stays
    Retention(keep_local=1).prune_s3(store, [20], tmp_path / "empty", orphans=True,
                                     quarantined_in_s3=[10, 30])
    assert store.list_quarantined() == [10, 30]
    log = io.StringIO()
    result = prepare_resume(store, tmp_path / "ckpt", log=log, retention=Retention(keep_local=1, keep_s3=1))
    assert result.iteration == 20
    assert iterations_in_s3(s3) == [20, 30] and store.list_quarantined() == [30]
    assert (f"deleted quarantined iter_0000010 from {URI} (older than every save kept: keep_s3 1 "
            "would delete it even with its marker removed)") in log.getvalue()


def versions_of(client, iteration: int) -> dict[str, list]:
    """What the bucket stores of ``iteration`` (its directory and its data cursor), noncurrent
    versions and delete markers included: {"Versions": [(key, size)], "DeleteMarkers": [key]}."""
    out: dict[str, list] = {"Versions": [], "DeleteMarkers": []}
    for prefix in (f"{PREFIX}iter_{iteration:07d}/", f"{PREFIX}rollout/global_dataset_state_dict_{iteration}.pt"):
        for page in client.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
            out["Versions"] += [(v["Key"][len(PREFIX):], v["Size"]) for v in page.get("Versions", [])]
            out["DeleteMarkers"] += [v["Key"][len(PREFIX):] for v in page.get("DeleteMarkers", [])]
    return out


def versioned_saves(s3, tmp_path: Path, iterations=(10, 20, 30)) -> Path:
    """Saves uploaded to the versioned bucket (as the kit's is), where a second writer put one
    file and the data cursor of the first save again after its manifest (new versions, the
    pinned ones now noncurrent). Returns the local directory of the saves."""
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    src, store = tmp_path / "src", store_for(s3)
    for it in iterations:
        make_save(src, it, seed=it)
        store.upload(src, it)
    first = iterations[0]
    for rel in (f"iter_{first:07d}/common.pt", f"rollout/global_dataset_state_dict_{first}.pt"):
        s3.put_object(Bucket=BUCKET, Key=PREFIX + rel, Body=(src / rel).read_bytes())
    return src


def test_keep_s3_on_a_versioned_bucket_deletes_every_version_of_a_pruned_save(s3, tmp_path: Path):
    """Before: the delete named no VersionId, so on the kit's versioned bucket it only added delete
    markers and every byte of a pruned save stayed stored, and billed, until the lifecycle's
    NoncurrentVersionExpiration (storage.noncurrent_version_days, 30): a week of hourly Qwen3-30B
    saves (~400 GiB each) with keep_s3: 2 still held ~65 TiB. Now the versions go with the save,
    the pinned ones, a second writer's and the delete markers alike; the kept saves are untouched."""
    src = versioned_saves(s3, tmp_path)
    kept = {it: versions_of(s3, it) for it in (20, 30)}
    assert len(versions_of(s3, 10)["Versions"]) == len(files_of(src, 10)) + 1 + 2  # the manifest, two rewrites
    log = io.StringIO()
    assert Retention(keep_s3=2).prune_s3(store_for(s3), [10, 20, 30], tmp_path / "empty", log=log) == [10]
    assert versions_of(s3, 10) == {"Versions": [], "DeleteMarkers": []}
    assert {it: versions_of(s3, it) for it in (20, 30)} == kept
    assert store_for(s3).list_complete() == [20, 30]
    result = prepare_resume(store_for(s3), tmp_path / "fresh", log=io.StringIO())
    assert result.iteration == 30 and files_of(tmp_path / "fresh", 30) == files_of(src, 30)


@pytest.mark.parametrize("crash_at", range(1, 7))
def test_a_versioned_delete_cut_short_anywhere_never_shows_the_save_and_the_next_resume_frees_it(
        s3, tmp_path: Path, monkeypatch, crash_at: int):
    """Killed before any of the DeleteObjects requests of a versioned delete (two versions a
    request here, so there are several): the pruned save is never complete again for a reader
    (its manifest's delete marker goes last), and what is left is either an orphan the next resume
    deletes whole, every version of it, or delete markers alone (no bytes)."""
    from rltrainer.checkpoints import s3_delete

    monkeypatch.setattr(s3_delete, "DELETE_BATCH", 2)
    src = versioned_saves(s3, tmp_path)
    requests = []

    def die(name, _n, _kw):
        if name == "delete_objects":
            requests.append(name)
            if len(requests) == crash_at:
                raise Crash(f"killed before DeleteObjects request {crash_at}")

    # 3 noncurrent versions (the manifest, common.pt and the cursor as the upload wrote them),
    # 5 current ones, 1 delete marker (the manifest's): 2 + 3 + 1 requests
    with pytest.raises(Crash):
        Retention(keep_s3=2).prune_s3(store_for(HookedClient(s3, before=die)), [10, 20, 30], tmp_path / "empty",
                                      log=io.StringIO())
    store = store_for(s3)
    assert store.list_complete() == [20, 30]
    with pytest.raises(s3.exceptions.ClientError):
        s3.head_object(Bucket=BUCKET, Key=PREFIX + "iter_0000010/_COMPLETE.json")
    log = io.StringIO()
    result = prepare_resume(store, tmp_path / "fresh", log=log, retention=Retention(keep_local=1, keep_s3=2))
    assert result.iteration == 30 and files_of(tmp_path / "fresh", 30) == files_of(src, 30)
    # a kill among the markers may leave the manifest's delete marker, which stores no bytes
    # (moto 5.2.5 lists a directory holding only delete markers as a CommonPrefix, so here the
    # next resume takes it for an orphan and deletes that too)
    left = versions_of(s3, 10)
    assert left["Versions"] == [], log.getvalue()
    assert set(left["DeleteMarkers"]) <= ({"iter_0000010/_COMPLETE.json"} if crash_at == 6 else set()), left
    assert store.list_complete() == [20, 30]


def test_without_permission_to_list_versions_a_delete_goes_by_key_as_before(s3, tmp_path: Path):
    """A role without s3:ListBucketVersions (a stack deployed before the trainer's role had it, or
    a fork's): the pruned save still goes for every reader, by key, and the log says that its
    bytes stay until the lifecycle expires them, instead of the resume failing."""
    from botocore.exceptions import ClientError

    versioned_saves(s3, tmp_path)

    def refuse(name, _n, _kw):
        if name == "list_object_versions":
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectVersions")

    log = io.StringIO()
    store = store_for(HookedClient(s3, before=refuse), log)
    assert Retention(keep_s3=2).prune_s3(store, [10, 20, 30], tmp_path / "empty", log=log) == [10]
    assert store_for(s3).list_complete() == [20, 30] and iterations_in_s3(s3) == [20, 30]
    assert "s3:ListBucketVersions" in log.getvalue() and "deleting by key" in log.getvalue()
    assert versions_of(s3, 10)["Versions"], "noncurrent versions stay for the lifecycle"


# ------------------------------------------------------------------------ quarantine


def test_quarantine_keeps_at_most_n_batches_and_never_the_next_saves_room(tmp_path: Path):
    """Before: every torn save stayed in _quarantine/ on the same file system, for good."""
    root = tmp_path / "ckpt"
    make_save(root, 10, extra_bytes=4000)
    for batch in ("20260101T000000Z", "20260102T000000Z", "20260103T000000Z"):
        torn = root / "_quarantine" / batch / "iter_0000020"
        torn.mkdir(parents=True)
        (torn / "__0_0.distcp").write_bytes(b"t" * 1000)
    log = io.StringIO()
    plenty = Retention(keep_local=1, keep_quarantined=2, free_bytes=lambda p: 10 << 30)
    assert plenty.bound_quarantine(root, log) == ["_quarantine/20260101T000000Z"]
    assert sorted(p.name for p in (root / "_quarantine").iterdir()) == ["20260102T000000Z", "20260103T000000Z"]
    # less free space than the newest save takes: quarantine goes, oldest first, until it fits
    free = {"bytes": 100}

    def free_bytes(_path):
        return free["bytes"] + 1000 * (2 - len(list((root / "_quarantine").iterdir())))

    tight = Retention(keep_local=1, keep_quarantined=2, free_bytes=free_bytes)
    save = retention_module.save_bytes(root, 10)
    free["bytes"] = save - 1500  # one batch (1000 B) freed is not enough, two are
    assert tight.bound_quarantine(root, log) == ["_quarantine/20260102T000000Z", "_quarantine/20260103T000000Z"]
    assert "never at the cost of the next save's space" in log.getvalue()


def test_quarantine_makes_room_for_the_next_save_after_a_first_save_at_iteration_0(tmp_path: Path):
    """Before: a tracker at 0 read as "no finished save" (``read_tracker(root) or -1``), so the
    room kept for the next save was one quarantine batch, not iter_0000000's size: a torn batch
    stayed while the next save had no room. Iteration 0 is a real save: Miles saves under the
    0-based rollout id (miles/backends/megatron_utils/actor.py ``save_model`` passes ``rollout_id``
    as Megatron's iteration; miles/utils/misc.py ``should_run_periodic_action``: "0-based";
    radixark/miles@78527b9, v0.1.0), and the launcher asks for a save after the first rollout."""
    root = tmp_path / "ckpt"
    make_save(root, 0, extra_bytes=4000)
    torn = root / "_quarantine" / "20260101T000000Z" / "iter_0000001"
    torn.mkdir(parents=True)
    (torn / "__0_0.distcp").write_bytes(b"t" * 10)
    save = retention_module.save_bytes(root, 0)
    tight = Retention(keep_local=1, keep_quarantined=5, free_bytes=lambda p: save - 1)  # < one save
    log = io.StringIO()
    assert tight.bound_quarantine(root, log) == ["_quarantine/20260101T000000Z"]
    assert "never at the cost of the next save's space" in log.getvalue()


def test_torn_saves_moved_aside_at_resume_are_bounded(s3, tmp_path: Path, monkeypatch):
    from rltrainer.checkpoints import local

    days = iter(range(1, 10))
    monkeypatch.setattr(local, "stamp", lambda: f"202601{next(days):02d}T000000Z")  # one batch per restart
    root = tmp_path / "ckpt"
    store = store_for(s3)
    make_save(root, 10)
    store.upload(root, 10)
    for _ in range(3):  # three pods died while writing iteration 20
        (root / "iter_0000020").mkdir()
        (root / "iter_0000020" / "__0_0.distcp").write_bytes(b"x" * 100)
        prepare_resume(store, root, log=io.StringIO(), retention=Retention(keep_local=1, keep_quarantined=1))
    assert [p.name for p in (root / "_quarantine").iterdir()] == ["20260103T000000Z"]


@pytest.mark.parametrize("tracker", [b"", b"\0\0", b"\xff\xfe4", None], ids=["empty", "zeros", "not-text", "missing"])
def test_a_lost_tracker_is_rebuilt_from_the_newest_whole_save_not_taken_for_all_torn(s3, tmp_path: Path, tracker):
    """Megatron writes the tracker in place (open 'w', write, no fsync), so a node lost right
    after a save can leave it empty. Before: every local save counted as above an unknown tracker,
    was moved aside and, with the file system sized for keep_local + 1 saves, deleted for good;
    the resume went back to 20 in S3 and the 20 rollouts after it were trained again."""
    root = tmp_path / "ckpt"
    store = store_for(s3)
    make_save(root, 20)
    store.upload(root, 20)
    forty = make_save(root, 40)  # finished; the pod died before its upload
    if tracker is None:
        (root / "latest_checkpointed_iteration.txt").unlink()
    else:
        (root / "latest_checkpointed_iteration.txt").write_bytes(tracker)
    log = io.StringIO()
    result = prepare_resume(store, root, log=log, retention=Retention(keep_local=1, free_bytes=lambda p: 1))
    assert (result.iteration, result.source, result.uploaded) == (40, "local", [40])
    assert read_tracker(root) == 40
    assert files_of(root, 40) == forty
    assert store.list_complete() == [20, 40]
    assert local_iterations(root) == [40], "20 goes as usual: complete in S3, beyond keep_local"
    assert not (root / "_quarantine").exists()
    what = "missing" if tracker is None else "empty" if tracker == b"" else "unreadable"
    assert (f"rltrainer: Megatron's tracker {root / 'latest_checkpointed_iteration.txt'} is {what}; "
            "pointing it at iter_0000040, the newest whole local save") in log.getvalue()


def test_with_a_lost_tracker_a_save_not_provably_finished_is_still_moved_aside(s3, tmp_path: Path):
    """Only a save that passes the whole-save check (torch_dist .metadata and every shard, the
    data cursor, and Megatron's metadata.json, which it writes after the shards) stands in for the
    tracker; newer saves are torn and go to the quarantine as above a tracker."""
    root = tmp_path / "ckpt"
    store = store_for(s3)
    twenty = make_save(root, 20)
    write_model_save(root, 40)  # torch_dist finished, Megatron's metadata.json not yet written
    (root / "iter_0000040" / "metadata.json").unlink()
    write_cursor(root, 40)
    write_model_save(root, 60)  # no data cursor yet
    (root / "latest_checkpointed_iteration.txt").write_text("")
    result = prepare_resume(store, root, log=io.StringIO())
    assert (result.iteration, result.source) == (20, "local")
    assert read_tracker(root) == 20 and files_of(root, 20) == twenty
    assert local_iterations(root) == [20]
    (aside,) = (root / "_quarantine").iterdir()
    assert sorted(p.name for p in aside.iterdir()) == ["iter_0000040", "iter_0000060", "rollout"]


@pytest.mark.parametrize("cursor", [True, False], ids=["data-cursor", "no-data-cursor"])
def test_a_restore_into_a_directory_without_a_tracker_cut_short_at_any_move_is_never_taken_for_a_save(
        s3, tmp_path: Path, monkeypatch, cursor):
    """A restore moves the verified files into place one by one and writes the tracker last. With
    no tracker to go by, the files one cut short had moved must not pass for a whole save, also
    where no data cursor is required (--disable-rollout-global-dataset): there Megatron's
    metadata.json, moved after the shards and common.pt, is what tells."""
    from rltrainer.checkpoints import store as store_module

    src = tmp_path / "src"
    twenty = make_save(src, 20)
    if not cursor:
        (src / "rollout" / "global_dataset_state_dict_20.pt").unlink()
        twenty = files_of(src, 20)

    def store_for(client):
        return S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=lambda s: None, log=io.StringIO()),
                                 progress_stream=io.StringIO(), require_data_cursor=cursor)

    store_for(s3).upload(src, 20)
    real_replace = store_module.os.replace
    moves = len(twenty)
    for crash_after in range(moves):
        local = tmp_path / f"vol{crash_after}"
        done = []

        def replace(a, b, crash_after=crash_after, done=done):
            if len(done) == crash_after:
                raise Crash(f"killed after {crash_after} move(s)")
            done.append(b)
            real_replace(a, b)

        monkeypatch.setattr(store_module.os, "replace", replace)
        with pytest.raises(Crash):
            prepare_resume(store_for(s3), local, log=io.StringIO())
        monkeypatch.setattr(store_module.os, "replace", real_replace)
        assert read_tracker(local) is None
        result = prepare_resume(store_for(s3), local, log=io.StringIO())
        assert (result.iteration, result.source) == (20, "s3"), crash_after
        assert files_of(local, 20) == twenty


# ------------------------------------------------------------------------ versions pinned


def test_restore_reads_the_versions_the_manifest_recorded(s3, tmp_path: Path):
    """Before: a second writer that put a key of a published checkpoint changed what restore read
    (a size-preserving overwrite with a matching checksum cannot be told apart without versions)."""
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    first = make_save(tmp_path / "a", 20, seed=1)
    store = store_for(s3)
    manifest = store.upload(tmp_path / "a", 20).manifest
    assert manifest.format == VERSIONED_MANIFEST_FORMAT
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + "iter_0000020/_COMPLETE.json")["Body"].read())
    assert all(f["version_id"] for f in body["files"])
    # a second writer puts every file of iteration 20 again, with its own bytes
    other = make_save(tmp_path / "b", 20, seed=2)
    for rel, data in other.items():
        s3.put_object(Bucket=BUCKET, Key=PREFIX + rel, Body=data)
    result = prepare_resume(store, tmp_path / "fresh", log=io.StringIO())
    assert result.iteration == 20
    assert files_of(tmp_path / "fresh", 20) == first


def pinned_save(s3, tmp_path: Path):
    """Iterations 10 and 20 uploaded to the versioned bucket; (source dir, iteration 20's first
    file entry, whose version the manifest pins)."""
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    store = store_for(s3)
    src = tmp_path / "src"
    make_save(src, 10, seed=1)
    store.upload(src, 10)
    make_save(src, 20, seed=2)
    return src, store.upload(src, 20).manifest.files[0]


def test_a_pinned_version_the_lifecycle_expired_is_read_from_the_identical_current_object(s3, tmp_path: Path):
    """Before: a second writer that passed its skip check before the manifest existed puts the
    same file of the same save after it; the pinned version becomes noncurrent, the bucket's
    lifecycle rule (NoncurrentVersionExpiration, storage.noncurrent_version_days) removes it 30
    days later, and restore found it missing: CorruptCheckpoint, and the save was quarantined for
    good although the current object holds the very bytes the manifest describes."""
    src, entry = pinned_save(s3, tmp_path)
    key = PREFIX + entry.path
    s3.put_object(Bucket=BUCKET, Key=key, Body=(src / entry.path).read_bytes(), ChecksumAlgorithm="CRC32")
    s3.delete_object(Bucket=BUCKET, Key=key, VersionId=entry.version_id)  # what the lifecycle does
    log = io.StringIO()
    result = prepare_resume(store_for(s3, log), tmp_path / "fresh", log=log)
    assert (result.iteration, result.skipped) == (20, [])
    assert files_of(tmp_path / "fresh", 20) == files_of(src, 20)
    assert s3_keys(s3, "iter_0000020/_QUARANTINED.json") == []
    assert (f"version {entry.version_id} of s3://{BUCKET}/{key} is gone; restoring the current object, "
            "kept only if its size and checksum match the manifest") in log.getvalue()


@pytest.mark.parametrize("current", ["other bytes", "none"])
def test_a_recorded_version_that_is_gone_is_a_corrupt_checkpoint_unless_the_current_object_matches(
        s3, tmp_path: Path, current: str):
    """The current object stands in for a pinned version that is gone only when it is the same
    file: another writer's bytes, or no object at all, leave the save corrupt, as before."""
    src, entry = pinned_save(s3, tmp_path)
    key = PREFIX + entry.path
    s3.delete_object(Bucket=BUCKET, Key=key, VersionId=entry.version_id)
    if current == "other bytes":
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"another writer's bytes")
    log = io.StringIO()
    result = prepare_resume(store_for(s3, log), tmp_path / "fresh", log=log)
    assert result.iteration == 10 and result.skipped == [20]
    assert s3_keys(s3, "iter_0000020/_QUARANTINED.json") == ["iter_0000020/_QUARANTINED.json"]
    if current == "none":
        assert f"s3://{BUCKET}/{key} (version {entry.version_id}) is missing, and so is the current object" \
            in log.getvalue()
    else:
        assert f"s3://{BUCKET}/{key} (the current object; version {entry.version_id} is gone) does not match " \
            "its manifest" in log.getvalue()


def test_an_unversioned_bucket_still_writes_v2_manifests(s3, tmp_path: Path):
    make_save(tmp_path / "a", 5)
    assert store_for(s3).upload(tmp_path / "a", 5).manifest.format == "rltrainer.checkpoint/v2"


# ------------------------------------------------------------------------ striping


def test_the_checkpoint_directory_is_striped_across_all_targets_when_lfs_exists(tmp_path: Path):
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    log = io.StringIO()
    assert stripe_across_targets(tmp_path / "ckpt", log, which=lambda name: "/usr/bin/lfs", run=run)
    assert calls == [["/usr/bin/lfs", "setstripe", "-c", "-1", str(tmp_path / "ckpt")]]
    log = io.StringIO()
    assert not stripe_across_targets(tmp_path / "ckpt", log, which=lambda name: None, run=run)
    assert "no lfs command here; not striping" in log.getvalue() and len(calls) == 1
    failing = lambda argv, **kw: subprocess.CompletedProcess(argv, 22, "", "not a Lustre fs")  # noqa: E731
    log = io.StringIO()
    assert not stripe_across_targets(tmp_path / "ckpt", log, which=lambda name: "/usr/bin/lfs", run=failing)
    assert "failed (exit 22: not a Lustre fs)" in log.getvalue()


# ------------------------------------------------------------------------ the final upload


FINISHING_TRAIN = '''
import os, pathlib, sys, zipfile
args = sys.argv[1:]
def last(flag):
    i = len(args) - 1 - args[::-1].index(flag)
    return args[i + 1]
save = pathlib.Path(last("--save"))
it = int(last("--num-rollout")) - 1  # the last rollout: Miles always saves it
d = save / f"iter_{it:07d}" / "model"
d.mkdir(parents=True)
(d / "__0_0.distcp").write_bytes(b"w" * 3000)
(save / "latest_checkpointed_iteration.txt").write_text(str(it))
if "--disable-rollout-global-dataset" not in args:  # no cursor without it (miles/rollout/data_source.py:124-126)
    (save / "rollout").mkdir(exist_ok=True)
    with zipfile.ZipFile(save / "rollout" / f"global_dataset_state_dict_{it}.pt", "w") as z:
        z.writestr("data.pkl", b"cursor")
with open(os.environ["FAKE_TRAIN_LOG"], "a") as log:
    log.write("trained\\n")
sys.exit(int(os.environ.get("FAKE_TRAIN_EXIT", "0")))  # a run that fails after its last save
'''


def _launch_config(tmp_path: Path) -> tuple[list[str], Path]:
    data = yaml.safe_load((TESTS / "fixtures" / "qwen3-30b-a3b.yaml").read_text())
    data["checkpoint"].update({"local_dir": str(tmp_path / "ckpt"), "s3_uri": URI})
    data["model"]["hf_checkpoint"] = str(tmp_path / "hf")
    data["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
    data["grpo"]["num_rollout"] = 4
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text(FINISHING_TRAIN)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"10.0.0.5@tcp:/abcdefgh {tmp_path} lustre rw 0 0\n")
    argv = ["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable,
            "--upload-interval", "3600", "--final-upload-attempts", "4", "--final-upload-delay", "5"]
    return argv, mounts


def test_a_finished_run_whose_last_upload_fails_retries_the_upload_not_the_job(s3, tmp_path: Path, monkeypatch):
    """Before: the launcher exited 3 at once and KubeRay re-ran the whole job on a fresh GPU cluster."""
    from rltrainer import launch

    argv, mounts = _launch_config(tmp_path)
    monkeypatch.setenv("FAKE_TRAIN_LOG", str(tmp_path / "train.log"))
    real_upload = S3CheckpointStore.upload
    failures = {"left": 2}  # S3 refuses the first two attempts (e.g. an outage), then recovers

    def flaky_upload(self, local_dir, iteration):
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("S3 unreachable")
        return real_upload(self, local_dir, iteration)

    monkeypatch.setattr(S3CheckpointStore, "upload", flaky_upload)
    sleeps: list[float] = []
    err = io.StringIO()
    code = launch.main(argv, out=io.StringIO(), err=err, mounts_file=str(mounts), sleep=sleeps.append)
    assert code == 0, err.getvalue()
    assert sleeps == [5, 10]
    assert store_for(s3).list_complete() == [3]
    assert "upload attempt 2/4 in 5s" in err.getvalue()

    # A second attempt of the job (e.g. a retry anyway) finds the run finished and trains nothing.
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=str(mounts), sleep=sleeps.append) == 0
    assert "the run is finished (iteration 3 is its last rollout" in err.getvalue()
    assert (tmp_path / "train.log").read_text() == "trained\n"


def _s3_down(tmp_path: Path, monkeypatch) -> list[dict]:
    """Every upload fails (S3 unreachable); returns the list of the launcher's stop_retries calls."""
    from rltrainer import no_retry

    monkeypatch.setenv("FAKE_TRAIN_LOG", str(tmp_path / "train.log"))

    def down(self, local_dir, iteration):
        raise OSError("S3 unreachable")

    monkeypatch.setattr(S3CheckpointStore, "upload", down)
    stopped: list[dict] = []
    monkeypatch.setattr(no_retry, "stop_retries", lambda log, **kw: stopped.append(kw) or True)
    return stopped


def test_a_final_upload_that_keeps_failing_stops_kuberays_retries_and_says_how_to_upload(
        s3, tmp_path: Path, monkeypatch):
    from rltrainer import launch

    argv, mounts = _launch_config(tmp_path)
    stopped = _s3_down(tmp_path, monkeypatch)
    sleeps: list[float] = []
    err = io.StringIO()
    code = launch.main(argv, out=io.StringIO(), err=err, mounts_file=str(mounts), sleep=sleeps.append)
    assert code == launch.EXIT_UPLOAD
    assert sleeps == [5, 10, 20]
    assert stopped and stopped[0]["reason"] == "training finished but its last upload failed"
    assert (f"rltrainer checkpoint upload --s3-uri {URI} --local-dir {tmp_path / 'ckpt'} --iteration N"
            in err.getvalue())
    assert "for each iteration N in 3:" in err.getvalue()


def test_a_run_without_a_data_cursor_is_uploaded_and_restored_by_hand_with_the_printed_command(
        s3, tmp_path: Path, monkeypatch):
    """A run with --disable-rollout-global-dataset saves no data cursor (Miles v0.1.0
    miles/rollout/data_source.py:124-126). Before: the launcher required none, but the `rltrainer
    checkpoint upload` command it printed after a failed final upload did, and exited 2; `rltrainer
    checkpoint restore` set the good save aside as torn and reported a fresh start."""
    from rltrainer import checkpoint_cli, launch

    argv, mounts = _launch_config(tmp_path)
    config = Path(argv[argv.index("--config") + 1])
    data = yaml.safe_load(config.read_text())
    data["model"]["megatron_args"].append("--disable-rollout-global-dataset")
    config.write_text(yaml.safe_dump(data))
    real_upload = S3CheckpointStore.upload
    _s3_down(tmp_path, monkeypatch)
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=str(mounts),
                       sleep=lambda s: None) == launch.EXIT_UPLOAD
    local = tmp_path / "ckpt"
    assert not (local / "rollout").exists()
    printed = (f"rltrainer: to upload by hand, for each iteration N in 3: rltrainer checkpoint upload "
               f"--s3-uri {URI} --local-dir {local} --iteration N --no-data-cursor\n")
    assert printed in err.getvalue()

    monkeypatch.setattr(S3CheckpointStore, "upload", real_upload)  # S3 is back: the operator runs it
    command = printed.split(": ", 2)[2].split()
    assert command[:3] == ["rltrainer", "checkpoint", "upload"]
    command[command.index("N")] = "3"
    err = io.StringIO()
    assert checkpoint_cli.main(command[2:], out=io.StringIO(), err=err, client=s3) == 0, err.getvalue()
    assert store_for(s3).list_complete() == [3]

    out, err = io.StringIO(), io.StringIO()
    assert checkpoint_cli.main(["restore", "--s3-uri", URI, "--local-dir", str(local), "--no-data-cursor"],
                               out=out, err=err, client=s3) == 0, err.getvalue()
    assert json.loads(out.getvalue()) == {"iteration": 3, "source": "local"}
    assert not (local / "_quarantine").exists() and read_tracker(local) == 3


def test_saves_on_the_pods_own_disk_are_retried_after_any_exit_and_kuberays_retry_stays(
        s3, tmp_path: Path, monkeypatch):
    """A single-node run without a shared file system saves to an emptyDir, which goes with the
    pod. Before: a failed run did not retry the upload (its resume was said to upload the local
    save, which a new pod does not have), and a finished run stopped KubeRay's retries, saying
    the save stayed on the shared file system."""
    from rltrainer import launch

    argv, mounts = _launch_config(tmp_path)
    config = Path(argv[argv.index("--config") + 1])
    data = yaml.safe_load(config.read_text())
    data["parallel"]["nodes"] = 1
    config.write_text(yaml.safe_dump(data))
    mounts.write_text(f"overlay {tmp_path} overlay rw 0 0\n")  # the pod's own disk
    stopped = _s3_down(tmp_path, monkeypatch)
    for exit_code in ("1", "0"):  # a failed run, then a finished one
        monkeypatch.setenv("FAKE_TRAIN_EXIT", exit_code)
        shutil.rmtree(tmp_path / "ckpt", ignore_errors=True)
        sleeps: list[float] = []
        err = io.StringIO()
        code = launch.main(argv, out=io.StringIO(), err=err, mounts_file=str(mounts), sleep=sleeps.append)
        assert code != 0 and sleeps == [5, 10, 20], err.getvalue()
        assert (f"they are on this pod's own disk ({tmp_path / 'ckpt'}) and go with it; KubeRay's "
                "retry resumes from the last save in S3") in err.getvalue()
    assert stopped == []

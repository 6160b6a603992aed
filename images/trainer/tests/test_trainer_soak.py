"""Soak: a run that saves for a week, scaled down to seconds.

The launcher's own checkpoint code -- ``S3CheckpointStore``, ``prepare_resume`` and the
``CheckpointWatcher`` with the ``Retention`` policy, wired as ``rltrainer.launch`` wires them --
goes through more than 30 saves against moto S3 (a versioned bucket, as the kit creates it),
on a directory whose capacity is enforced by accounting: every byte the run writes there (the
trainer's saves, the tracker, the restore's downloads) is checked against the capacity first,
and a write that would exceed it fails with ENOSPC, as on a full file system. The capacity is
what the kit sizes the shared file system for: the reference weights plus ``keep_local + 1``
saves (docs/operations.md, "A run that saves for a week"). S3 keeps the newest ``KEEP_S3``
complete saves (``checkpoint.keep_s3``); without it S3 would hold all of them by the end.

The pod is killed at many points (mid-save, between Megatron's tracker and Miles' cursor,
mid-upload, right after the manifest, mid-delete, mid-delete in S3, mid-restore, the volume
lost), and every restart must resume from the newest whole save with its own data cursor.

Before retention, the third save failed with ENOSPC here, as on FSx: nothing ever freed the
directory.
"""

from __future__ import annotations

import errno
import io
import random
from functools import lru_cache
from pathlib import Path

import pytest

from ckpt_helpers import BUCKET, PREFIX, URI, Crash, HookedClient, moto_s3, torch_bytes
from rltrainer.checkpoints import (
    CheckpointWatcher,
    Retention,
    RetryPolicy,
    S3CheckpointStore,
    VERSIONED_MANIFEST_FORMAT,
    local_iterations,
    prepare_resume,
    read_tracker,
    write_tracker,
)
from rltrainer.checkpoints import retention as retention_module
from rltrainer.checkpoints.retention import tree_bytes

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")

ROLLOUTS = 36  # one save per rollout: iterations 0..35, plus the ones redone after a kill
KEEP_S3 = 3  # complete saves kept in S3
WEIGHTS = 64 << 10
SHARD = 32 << 10
SLACK = 4 << 10  # the tracker file and its temporary copy


@lru_cache(maxsize=None)
def save_files(iteration: int) -> dict[str, bytes]:
    """One save as Megatron + Miles lay it out (model shards, common.pt, then the data cursor)."""
    rng = random.Random(iteration)
    it_dir = f"iter_{iteration:07d}"
    return {
        f"{it_dir}/model/__0_0.distcp": rng.randbytes(SHARD),
        f"{it_dir}/common.pt": rng.randbytes(100),
        # Miles' data cursor: where the prompt data stands after this rollout
        f"rollout/global_dataset_state_dict_{iteration}.pt": torch_bytes(
            {"sample_offset": (iteration + 1) * 32, "epoch_id": 0, "sample_index": (iteration + 1) * 32}),
    }


def largest_save() -> int:
    # not at import: the cursor files need torch, and collection should not import it
    return max(sum(len(b) for b in save_files(i).values()) for i in range(ROLLOUTS))


class CappedDir:
    """A directory that holds at most ``capacity`` bytes: writers ask before they write."""

    def __init__(self, root: Path, capacity: int):
        self.root = root
        self.capacity = capacity
        self.peak = 0

    def used(self) -> int:
        return tree_bytes(self.root)

    def free(self, _path=None) -> int:
        return self.capacity - self.used()

    def reserve(self, nbytes: int, what: str) -> None:
        if self.used() + nbytes > self.capacity:
            raise OSError(errno.ENOSPC, f"No space left on device: {what} needs {nbytes} B, "
                                        f"{self.free()} B free of {self.capacity}")

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        self.reserve(len(data) - (path.stat().st_size if path.exists() else 0), rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.observe()

    def observe(self) -> None:
        used = self.used()
        self.peak = max(self.peak, used)
        assert used <= self.capacity, f"{used} B on a {self.capacity} B file system"


class CappedDownloads:
    """The S3 client, with every download charged to the capped directory before it lands."""

    def __init__(self, client, fs: CappedDir):
        self._client = client
        self._fs = fs

    def __getattr__(self, name):
        return getattr(self._client, name)

    def download_file(self, bucket, key, filename, ExtraArgs=None, Callback=None, Config=None):  # noqa: N803
        head = self._client.head_object(Bucket=bucket, Key=key, **(ExtraArgs or {}))
        self._fs.reserve(head["ContentLength"], key)
        self._client.download_file(bucket, key, filename, ExtraArgs=ExtraArgs, Callback=Callback, Config=Config)
        self._fs.observe()


# What kills the pod, and when: each fires once, the first time the run reaches that save.
KILLS = {
    2: "mid-save",          # Megatron was writing the shards
    5: "before-cursor",     # the tracker moved, Miles' cursor not written yet
    8: "mid-upload",        # the second file of the save was going up
    11: "after-manifest",   # published, not yet pruned
    14: "mid-delete",       # an old save renamed into _pruning/, not yet removed
    17: "volume-lost",      # a new pod on an empty volume: everything comes from S3
    20: "mid-restore",      # the volume lost, and the pod killed while downloading
    22: "mid-s3-delete",    # an old save's manifest deleted from S3, its objects not yet
    24: "mid-save",
    27: "before-cursor",
    30: "mid-upload",
    33: "mid-delete",
}


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch, versioned=True)


def test_a_week_of_saves_stays_inside_the_file_system_and_always_resumes(s3, tmp_path: Path, monkeypatch):
    # the kit's default and the tightest file system it sizes (larger keep_local: test_trainer_retention.py)
    keep_local = 1
    root = tmp_path / "fsx" / "checkpoints" / "run"
    fs = CappedDir(tmp_path / "fsx", WEIGHTS + (keep_local + 1) * largest_save() + SLACK)
    real_rmtree = retention_module.shutil.rmtree
    pending = dict(KILLS)
    armed: dict[str, int] = {}

    def mount_volume() -> None:
        root.mkdir(parents=True, exist_ok=True)
        fs.write("models/weights.safetensors", random.Random(-1).randbytes(WEIGHTS))

    def before(name, n, kwargs):
        if name == "upload_file" and "mid-upload" in armed:
            armed["mid-upload"] -= 1
            if armed["mid-upload"] == 0:
                raise Crash("killed mid-upload")
        if name == "delete_objects" and armed.pop("mid-s3-delete", None):
            raise Crash("killed mid-delete in S3")
        if name == "download_file" and "mid-restore" in armed:
            armed["mid-restore"] -= 1
            if armed["mid-restore"] == 0:
                armed.pop("mid-restore")
                raise Crash("killed mid-restore")

    def after(name, n, kwargs):
        if name == "put_object" and kwargs.get("Key", "").endswith("_COMPLETE.json") and "after-manifest" in armed:
            armed.pop("after-manifest")
            raise Crash("killed right after the manifest")

    def rmtree(path, *args, **kwargs):
        if "mid-delete" in armed and "_pruning" in str(path):
            armed.pop("mid-delete")
            raise Crash("killed mid-delete")
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(retention_module.shutil, "rmtree", rmtree)
    client = HookedClient(CappedDownloads(s3, fs), before=before, after=after)
    whole: list[int] = []  # saves the trainer finished (tracker and cursor written), in order
    restarts = 0
    mount_volume()

    def pod() -> None:
        log = io.StringIO()
        store = S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=lambda s: None, log=log),
                                  progress_stream=log, progress_interval_s=3600)
        policy = Retention(keep_local=keep_local, keep_s3=KEEP_S3, free_bytes=fs.free)
        resume = prepare_resume(store, root, log=log, retention=policy)
        fs.observe()
        # the newest whole save, with its own data cursor, is where the run goes on
        expected = whole[-1] if whole else None
        assert resume.iteration == expected, log.getvalue()
        if expected is not None:
            for rel, data in save_files(expected).items():
                assert (root / rel).read_bytes() == data, rel
            assert read_tracker(root) == expected
        watcher = CheckpointWatcher(store, root, log=log, retention=policy)
        for it in range(resume.start_rollout_id or 0, ROLLOUTS):
            kill = pending.pop(it, None)
            files = list(save_files(it).items())
            for i, (rel, data) in enumerate(files[:-1]):
                fs.write(f"checkpoints/run/{rel}", data)
                if kill == "mid-save" and i == 0:
                    raise Crash("killed mid-save")
            write_tracker(root, it)  # Megatron's tracker, then Miles' cursor (train.py save())
            fs.observe()
            if kill == "before-cursor":
                raise Crash("killed before the data cursor")
            fs.write(f"checkpoints/run/{files[-1][0]}", files[-1][1])
            whole.append(it)
            if kill in ("mid-upload", "after-manifest", "mid-delete", "mid-s3-delete"):
                armed[kill] = 2  # the second upload_file (of three files), or at once for the others
            watcher.scan_once()
            fs.observe()
            if kill in ("volume-lost", "mid-restore"):
                real_rmtree(tmp_path / "fsx")
                mount_volume()
                if kill == "mid-restore":
                    armed["mid-restore"] = 2
                raise Crash(f"{kill} after iteration {it}")
            # S3 holds the newest KEEP_S3 saves the trainer finished (the newest is published now;
            # the whole list every few saves); locally the newest keep_local stay
            if it % 6:
                markers = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}iter_{it:07d}/_").get("Contents", [])
                assert [m["Key"][len(PREFIX):] for m in markers] == [f"iter_{it:07d}/_COMPLETE.json"]
            else:
                assert store.list_complete() == whole[-KEEP_S3:], log.getvalue()
            assert local_iterations(root) == whole[-keep_local:], log.getvalue()

    while True:
        try:
            pod()
            break
        except Crash:
            restarts += 1
            armed.pop("mid-upload", None)
            armed.pop("after-manifest", None)
            armed.pop("mid-delete", None)
            armed.pop("mid-s3-delete", None)

    assert not pending and restarts == len(KILLS) + 1  # mid-restore kills twice: the loss, then the download
    assert whole == list(range(ROLLOUTS)) and len(whole) >= 30
    store = S3CheckpointStore(URI, client=s3, retry=RetryPolicy(sleep=lambda s: None), progress_stream=io.StringIO())
    assert store.list_complete() == whole[-KEEP_S3:] and store.list_quarantined() == []
    # nothing else is left in S3: the older saves went whole, the cut-short delete too
    left = {k[len(PREFIX):].split("/")[0] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=PREFIX) for k in (o["Key"] for o in page.get("Contents", []))}
    assert left == {f"iter_{i:07d}" for i in whole[-KEEP_S3:]} | {"rollout"}
    assert sorted(store._objects_under(PREFIX + "rollout/")) == sorted(
        f"{PREFIX}rollout/global_dataset_state_dict_{i}.pt" for i in whole[-KEEP_S3:])
    # nor stored: on the versioned bucket a delete names every version (before, each deleted save
    # stayed stored and billed as noncurrent versions for storage.noncurrent_version_days)
    stored = {v["Key"][len(PREFIX):] for page in s3.get_paginator("list_object_versions").paginate(
        Bucket=BUCKET, Prefix=PREFIX) for v in page.get("Versions", [])}
    assert stored == {rel for it in whole[-KEEP_S3:] for rel in (*save_files(it), f"iter_{it:07d}/_COMPLETE.json")}
    for it in whole[-KEEP_S3:]:
        manifest = store.read_manifest(it)
        assert manifest.format == VERSIONED_MANIFEST_FORMAT and all(f.version_id for f in manifest.files)
        assert {f.path: f.size for f in manifest.files} == {r: len(b) for r, b in save_files(it).items()}
    assert local_iterations(root) == whole[-keep_local:]
    assert fs.peak <= fs.capacity
    assert not (root / "_pruning").exists()

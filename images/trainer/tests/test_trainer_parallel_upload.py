"""One save uploaded by several uploaders at once, the manifest still last (issue 21, "uploads
where the bandwidth is"): the parts are of about equal bytes, every part finishes before the
manifest is written, and a part that fails publishes nothing."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from ckpt_helpers import make_save, moto_s3
from rltrainer.checkpoints import RetryPolicy, S3CheckpointStore
from rltrainer.checkpoints.layout import MANIFEST_NAME, QUARANTINE_MARKER
from rltrainer.checkpoints.parallel import partition, run_in_threads

URI = "s3://ckpt-bucket/runs/r/"
pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch)


def store(client) -> S3CheckpointStore:
    return S3CheckpointStore(URI, client=client, retry=RetryPolicy(sleep=lambda s: None, log=io.StringIO(),
                                                                   max_attempts=1),
                             progress_stream=io.StringIO(), progress_interval_s=0)


def test_partition_balances_bytes_and_keeps_every_file_once():
    sizes = {"a": 90, "b": 60, "c": 50, "d": 40, "e": 10, "f": 10}
    parts = partition(sizes, 2)
    assert sorted(r for p in parts for r in p) == sorted(sizes)
    assert sorted(sum(sizes[r] for r in p) for p in parts) == [130, 130]
    assert partition({"a": 1}, 4) == [["a"]]  # never an empty part
    with pytest.raises(ValueError, match="parts must be at least 1"):
        partition(sizes, 0)


class Recorder:
    """Wraps the S3 client: the order of object writes, and which thread made each."""

    def __init__(self, client, fail_key: str | None = None):
        self._client, self.fail_key = client, fail_key
        self.writes: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def _record(self, key):
        with self.lock:
            self.writes.append((key, threading.current_thread().name))
        if self.fail_key and key.endswith(self.fail_key):
            raise OSError(f"network down while uploading {key}")

    def upload_file(self, path, bucket, key, **kwargs):
        self._record(key)
        return self._client.upload_file(path, bucket, key, **kwargs)

    def put_object(self, **kwargs):
        self._record(kwargs["Key"])
        return self._client.put_object(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_parts_upload_at_once_and_the_manifest_comes_last(s3, tmp_path: Path):
    files = make_save(tmp_path, 10)
    client = Recorder(s3)
    result = store(client).upload(tmp_path, 10, uploaders=3)
    assert result.status == "uploaded"
    keys = [k for k, _ in client.writes]
    assert keys[-1].endswith(f"iter_0000010/{MANIFEST_NAME}")
    assert sorted(k.removeprefix("runs/r/") for k in keys[:-1]) == sorted(files)
    assert len({thread for _, thread in client.writes[:-1]}) == 3  # three uploaders
    # The same manifest as one uploader writes (files in the save's order).
    assert [f.path for f in result.manifest.files] == sorted(files)


def test_a_failed_part_publishes_nothing(s3, tmp_path: Path):
    files = make_save(tmp_path, 10)
    failing = sorted(files)[-1]
    client = Recorder(s3, fail_key=failing)
    with pytest.raises(OSError, match="network down"):
        store(client).upload(tmp_path, 10, uploaders=2)
    assert not [k for k, _ in client.writes if k.endswith(MANIFEST_NAME)]
    assert store(s3).list_complete() == []


def test_a_caller_may_run_the_parts_elsewhere(s3, tmp_path: Path):
    """The runner gets one zero-argument task per part (what a Ray task on another node would
    call); the store publishes only after it returns every part's entries."""
    make_save(tmp_path, 10)
    seen = []

    def runner(tasks):
        seen.append(len(tasks))
        return run_in_threads(tasks)

    assert store(s3).upload(tmp_path, 10, uploaders=2, run_parts=runner).status == "uploaded"
    assert seen == [2]


class ListCounter:
    """Wraps the S3 client: every ListObjectsV2 call and how many entries (keys and common
    prefixes) it returned."""

    def __init__(self, client):
        self._client = client
        self.lists: list[tuple[dict, int]] = []

    def list_objects_v2(self, **kwargs):
        page = self._client.list_objects_v2(**kwargs)
        self.lists.append((kwargs, len(page.get("Contents", [])) + len(page.get("CommonPrefixes", []))))
        return page

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_the_per_file_marker_check_does_not_grow_with_the_save(s3, tmp_path: Path):
    """Before: the check before each file listed iter_N/_, which also holds every torch_dist shard
    (__<rank>_<n>.distcp) uploaded so far: 500 LISTs returning ~125,000 keys for a 500-shard save."""
    shards = 500
    make_save(tmp_path, 10)
    for i in range(shards):
        (tmp_path / "iter_0000010" / f"__{i}_1.distcp").write_bytes(b"x")
    client = ListCounter(s3)
    assert store(client).upload(tmp_path, 10).status == "uploaded"
    marker_lists = [n for kwargs, n in client.lists if kwargs["Prefix"].endswith("iter_0000010/_")]
    assert len(marker_lists) >= shards  # still checked before every file
    assert max(marker_lists) <= 3, max(marker_lists)  # the two markers and one common prefix, __
    assert sum(n for _, n in client.lists) < 3 * len(client.lists) + 2 * shards
    # the delimiter lists a marker only while its name has no "_" after the first character
    assert "_" not in MANIFEST_NAME[1:] and "_" not in QUARANTINE_MARKER[1:]


@pytest.mark.parametrize("marker", ["complete", "quarantined"])
def test_a_marker_written_mid_upload_still_stops_the_next_file(s3, tmp_path: Path, marker):
    """With shards already there, the delimited listing still finds a marker another writer (or a
    quarantine) put between two files; nothing after it is uploaded and nothing is published."""
    make_save(tmp_path, 10)
    for i in range(20):
        (tmp_path / "iter_0000010" / f"__{i}_1.distcp").write_bytes(b"x")
    key = "runs/r/iter_0000010/" + (MANIFEST_NAME if marker == "complete" else QUARANTINE_MARKER)

    class Interloper(Recorder):
        def upload_file(self, path, bucket, key_, **kwargs):
            if len(self.writes) == 10:
                self._client.put_object(Bucket=bucket, Key=key, Body=b"{}")
            return super().upload_file(path, bucket, key_, **kwargs)

    client = Interloper(s3)
    result = store(client).upload(tmp_path, 10)
    assert result.status == ("already-complete" if marker == "complete" else "quarantined")
    assert len(client.writes) == 11  # the file in flight when the marker came, then no more

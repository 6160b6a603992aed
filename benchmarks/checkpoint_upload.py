"""What uploading a checkpoint costs the launcher: bytes read from disk, requests, time.

    python benchmarks/checkpoint_upload.py [--shards 4] [--shard-mib 96]

Writes a synthetic save (``--shards`` torch_dist-sized shard files plus Megatron's and Miles'
small files), uploads it with ``S3CheckpointStore`` to an in-process moto S3, and prints:

- bytes read from the save's files per byte uploaded (counted on every file object opened on
  them during the upload; 1.0 means the data is read once, by the upload itself, with the
  checksum computed as it streams; the v1 store read it twice: a sha256 pass, then the upload);
- the S3 requests made, by operation;
- wall time of the upload, and what a separate sha256 pass over the same files takes here (the
  time the checksums computed during the upload save).

moto runs in this process over botocore's HTTPS code path (trailer checksums, unsigned streaming
payloads, as with real S3), so the read count is botocore's and s3transfer's own; the times are
CPU-bound figures of this machine with moto storing the data, not S3 throughput.
``--uploaders N`` splits the upload into N parts at once (``S3CheckpointStore.upload``), the
manifest still last.

Then the time per save for the default config's model, from the kit's catalog and config (a
model of the bottlenecks, not a measurement): the save's bytes over the slowest of the file
system's baseline throughput (capacity x throughput tier; FSx may burst above it) and the network
of the uploaders: the Ray head on a system node (m7i.xlarge, 1.5625 Gbps baseline, the figure
issue 21 quotes), one GPU node, or every GPU node of the run in parallel (taken as one network
card's share of the instance's bandwidth each: an assumption, not a published figure).
"""

from __future__ import annotations

import argparse
import builtins
import collections
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "images" / "trainer" / "src"))
sys.path.insert(0, str(ROOT))

from rltrainer.checkpoints import RetryPolicy, S3CheckpointStore, sha256_file, write_tracker  # noqa: E402


class ReadCounter:
    """Counts the bytes read through every file object opened on files under ``root``."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.bytes = 0
        self._open = builtins.open

    def __enter__(self):
        counter = self

        class Counted:
            def __init__(self, fh):
                self._fh = fh

            def read(self, *args):
                data = self._fh.read(*args)
                counter.bytes += len(data)
                return data

            def readinto(self, buf):
                n = self._fh.readinto(buf)
                counter.bytes += n or 0
                return n

            def __getattr__(self, name):
                return getattr(self._fh, name)

            def __iter__(self):
                return iter(self._fh)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._fh.close()

        def counting_open(file, mode="r", *args, **kwargs):
            fh = self._open(file, mode, *args, **kwargs)
            if isinstance(file, (str, os.PathLike)) and str(file).startswith(self.root) and "b" in mode:
                return Counted(fh)
            return fh

        builtins.open = counting_open
        return self

    def __exit__(self, *exc):
        builtins.open = self._open


def write_save(root: Path, shards: int, shard_mib: int) -> int:
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp

    it_dir = root / "iter_0000010"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a one-process save, no process group: intended
        dcp.save({"w": torch.zeros(1024)}, checkpoint_id=str(it_dir))  # a real .metadata and __0_0.distcp
    for rank in range(1, shards + 1):  # the other ranks' shards: random bytes of shard size
        (it_dir / f"__{rank}_0.distcp").write_bytes(os.urandom(shard_mib << 20))
    (it_dir / "common.pt").write_bytes(b"\0" * 4096)
    (root / "rollout").mkdir()
    torch.save({"sample_offset": 320}, root / "rollout" / "global_dataset_state_dict_10.pt")
    write_tracker(root, 10)
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and f.name != "latest_checkpointed_iteration.txt")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--shard-mib", type=int, default=96)
    p.add_argument("--uploaders", type=int, default=1, help="parts uploaded at once")
    args = p.parse_args()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ[key] = value
    from moto import mock_aws

    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        import boto3

        root = Path(tmp)
        payload = write_save(root, args.shards, args.shard_mib)
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        calls: collections.Counter[str] = collections.Counter()
        client.meta.events.register("before-call.s3.*", lambda model, **_: calls.update([model.name]))
        store = S3CheckpointStore("s3://bench/run/", client=client, retry=RetryPolicy(), progress_stream=io.StringIO())

        with ReadCounter(root) as counter:
            t0 = time.perf_counter()
            result = store.upload(root, 10, uploaders=args.uploaders)
            upload_s = time.perf_counter() - t0
        read = counter.bytes
        assert result.status == "uploaded"

        t0 = time.perf_counter()
        for f in result.manifest.files:
            sha256_file(root / f.path)
        hash_s = time.perf_counter() - t0

    print(f"payload: {payload / (1 << 20):.1f} MiB in {len(result.manifest.files)} files "
          f"({args.shards} x {args.shard_mib} MiB shards)")
    print(f"local bytes read per byte uploaded: {read / payload:.2f}")
    print("S3 requests: " + ", ".join(f"{name} {n}" for name, n in sorted(calls.items())))
    print(f"upload wall time ({args.uploaders} uploader(s)): {upload_s:.2f} s; a separate sha256 "
          f"pass over the same files: {hash_s:.2f} s")
    print()
    for line in save_time_model():
        print(line)
    return 0


HEAD_BASELINE_GBPS = 1.5625  # m7i.xlarge baseline network bandwidth (issue 21's figure)


def save_time_model() -> list[str]:
    """Minutes per save of the default config's model under each place the upload can run."""
    from infra.catalog import INSTANCE_TYPES
    from infra.catalog.models import MODEL_CATALOG, checkpoint_bytes
    from infra.config import parse_config

    cfg = parse_config({})
    fs = cfg.storage.shared_filesystem
    save = checkpoint_bytes(MODEL_CATALOG[cfg.training.model])
    fs_bytes_s = fs.capacity_gib / 1024 * fs.throughput_mb_s_per_tib * 1e6
    from infra.config.derived import head_s3_gbps

    gpu = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    card_bytes_s = head_s3_gbps(cfg) * 1e9 / 8  # network card 0's baseline (the catalog)
    nodes = cfg.training.nodes
    lines = [f"time per save, default config ({cfg.training.model}, {save / (1 << 30):.0f} GiB a save; "
             f"FSx {fs.capacity_gib} GiB x {fs.throughput_mb_s_per_tib} MB/s/TiB = "
             f"{fs_bytes_s / 1e6:.0f} MB/s baseline):"]
    for where, net in ((f"a Ray head on {cfg.system_nodes.instance_type} (before the head moved "
                        "to a GPU node)", HEAD_BASELINE_GBPS * 1e9 / 8),
                       (f"one {gpu.name} node (today: the Ray head is the run's first GPU node)",
                        card_bytes_s),
                       (f"{nodes} {gpu.name} nodes in parallel", nodes * card_bytes_s)):
        rate = min(fs_bytes_s, net)
        limit = "the file system" if fs_bytes_s <= net else "the network"
        lines.append(f"  upload from {where}: {save / rate / 60:.0f} min (limited by {limit}, "
                     f"{rate / 1e6:.0f} MB/s)")
    lines.append(f"  Megatron's write of the save to the file system, for comparison: "
                 f"{save / fs_bytes_s / 60:.0f} min at the same baseline")
    return lines


if __name__ == "__main__":
    sys.exit(main())

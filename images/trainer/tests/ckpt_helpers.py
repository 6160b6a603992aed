"""Helpers for the checkpoint tests: saves laid out the way Megatron and Miles write them.

A save here is a real torch.distributed.checkpoint (torch_dist) directory -- ``.metadata``
plus ``__<rank>_<n>.distcp`` shards -- with Megatron's ``metadata.json`` and ``common.pt``
beside it, and Miles' data cursor written by ``torch.save`` (a zip archive), in the order
Miles v0.1.0 writes them (``train.py`` ``save()``: model and tracker, then the cursor).
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

BUCKET = "ckpt-bucket"
PREFIX = "runs/qwen3-30b-a3b-grpo/"
URI = f"s3://{BUCKET}/{PREFIX}"


def torch_bytes(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_model_save(root: Path, iteration: int, seed: int = 0, extra_bytes: int = 0) -> None:
    """Megatron's part of a save: the iter_XXXXXXX directory (torch_dist), no tracker, no cursor."""
    import torch
    import torch.distributed.checkpoint as dcp

    it_dir = root / f"iter_{iteration:07d}"
    gen = torch.Generator().manual_seed(iteration * 1000 + seed)
    state = {"weight": torch.randn(64 + extra_bytes // 4, generator=gen), "bias": torch.randn(8, generator=gen)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one-process save without a process group is intended
        dcp.save(state, checkpoint_id=str(it_dir))
    (it_dir / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "iteration": iteration}))
    (it_dir / "common.pt").write_bytes(torch_bytes({"iteration": iteration, "seed": seed}))


def write_cursor(root: Path, iteration: int, seed: int = 0) -> None:
    """Miles' data cursor (miles/rollout/data_source.py save(): a dict through torch.save)."""
    path = root / f"rollout/global_dataset_state_dict_{iteration}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(torch_bytes({"sample_offset": iteration * 32 + seed, "epoch_id": 0, "sample_group_index": 0,
                                  "sample_index": iteration * 32, "metadata": {}}))


def make_save(root: Path, iteration: int, seed: int = 0, extra_bytes: int = 0) -> dict[str, bytes]:
    """A whole save, tracker updated; returns relative path -> bytes of every file in it."""
    from rltrainer.checkpoints import write_tracker

    root.mkdir(parents=True, exist_ok=True)
    write_model_save(root, iteration, seed, extra_bytes)
    write_tracker(root, iteration)
    write_cursor(root, iteration, seed)
    return files_of(root, iteration)


def files_of(root: Path, iteration: int) -> dict[str, bytes]:
    out = {}
    for path in sorted((root / f"iter_{iteration:07d}").rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    cursor = root / f"rollout/global_dataset_state_dict_{iteration}.pt"
    if cursor.is_file():
        out[cursor.relative_to(root).as_posix()] = cursor.read_bytes()
    return out


def s3_keys(client, under: str = "") -> list[str]:
    """The key of every object under the run prefix (+ ``under``), relative to it."""
    keys = []
    token = None
    while True:
        kwargs = {"Bucket": BUCKET, "Prefix": PREFIX + under}
        if token:
            kwargs["ContinuationToken"] = token
        page = client.list_objects_v2(**kwargs)
        keys += [obj["Key"][len(PREFIX):] for obj in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


def s3_objects(client, under: str = "", only=None) -> dict[str, bytes]:
    """Every object under the run prefix (+ ``under``), or those of its keys in ``only``:
    relative key -> bytes."""
    return {key: client.get_object(Bucket=BUCKET, Key=PREFIX + key)["Body"].read()
            for key in s3_keys(client, under) if only is None or key in only}


def aws_test_env(monkeypatch) -> None:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)


def moto_s3(monkeypatch, versioned: bool = False):
    """A moto S3 holding the test bucket (optionally versioned, as the kit's bucket is); yields
    its client. The trainer tests' one fake S3: fixtures ``yield from`` it."""
    aws_test_env(monkeypatch)
    from moto import mock_aws

    with mock_aws():
        import boto3

        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        if versioned:
            client.put_bucket_versioning(Bucket=BUCKET,
                                         VersioningConfiguration={"Status": "Enabled"})
        yield client


class Crash(BaseException):
    """A process dying at this point: not an Exception, so nothing in the code under test catches it."""


class HookedClient:
    """A real (moto) client whose calls can run a hook first (to crash, or to let another writer in)."""

    def __init__(self, client, before=None, after=None):
        self._client = client
        self._before = before  # before(method_name, call_number, kwargs): runs before the real call
        self._after = after  # the same, after the real call (its response is then lost)
        self.calls: list[str] = []

    def __getattr__(self, name):
        real = getattr(self._client, name)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            self.calls.append(name)
            n = len(self.calls)
            if self._before is not None:
                self._before(name, n, kwargs)
            try:
                return real(*args, **kwargs)
            finally:  # also after a call that failed: the process dies either way
                if self._after is not None:
                    self._after(name, n, kwargs)

        return call


def corrupt_file(client, relkey: str, data: bytes | None = None) -> None:
    """Replace one object with other bytes of the same size (bit rot that a size check misses)."""
    key = PREFIX + relkey
    old = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    new = data if data is not None else bytes(b ^ 0xFF for b in old[:16]) + old[16:]
    client.put_object(Bucket=BUCKET, Key=key, Body=new)

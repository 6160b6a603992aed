"""Step 2 of ``rltrainer launch``: inputs given as s3:// URIs (the Hugging Face weights, the prompt
file) staged under ``<checkpoint.local_dir>/_inputs/``, each download kept only while its S3 object
is the one it was copied from."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import TextIO

from .contract import RunConfig, parse_s3_uri


def staged_path(cfg: RunConfig, uri: str, kind: str) -> str:
    """Local path an s3:// input is staged to (the URI itself if it is already local)."""
    if not uri.startswith("s3://"):
        return uri
    _bucket, key = parse_s3_uri(uri)
    name = PurePosixPath(key.rstrip("/")).name or "input"
    return str(PurePosixPath(cfg.checkpoint.local_dir) / "_inputs" / kind / name)


STAGED_INDEX = ".staged.json"  # in _inputs/: the S3 object (key, ETag, size) each staged file is a copy of


def _read_staged_index(inputs: Path) -> dict[str, dict]:
    try:
        files = json.loads((inputs / STAGED_INDEX).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return {}  # none yet (or torn): every file counts as unknown and is downloaded again
    return files if isinstance(files, dict) else {}


def _write_staged_index(inputs: Path, files: dict[str, dict]) -> None:
    tmp = inputs / f"{STAGED_INDEX}.tmp"
    tmp.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    os.replace(tmp, inputs / STAGED_INDEX)


def stage_inputs(cfg: RunConfig, client=None, log: TextIO | None = None) -> tuple[str, str]:
    """Download s3:// inputs once; return the local (hf_checkpoint, prompt_data) paths.

    A staged file is current only while its S3 object has the key, ETag and size recorded when it
    was downloaded (``_inputs/.staged.json``): a replacement of the same size (a corrected prompt
    file, other weights of the same shape) has another ETag. Files the model prefix no longer
    holds are deleted, so the weights are exactly what the prefix holds now.
    """
    from .checkpoints import Progress, RetryPolicy

    out = log or sys.stderr
    hf = staged_path(cfg, cfg.model.hf_checkpoint, "model")
    data = staged_path(cfg, cfg.data.prompt_data, "data")
    if not (cfg.model.hf_checkpoint.startswith("s3://") or cfg.data.prompt_data.startswith("s3://")):
        return hf, data
    if client is None:
        import boto3

        client = boto3.client("s3")
    retry = RetryPolicy(log=out)
    inputs = Path(cfg.checkpoint.local_dir) / "_inputs"
    index = _read_staged_index(inputs)

    def fetch(bucket: str, key: str, dest: Path, etag: str, size: int) -> None:
        rel = dest.relative_to(inputs).as_posix()
        source = {"uri": f"s3://{bucket}/{key}", "etag": etag, "size": size}
        if dest.is_file() and dest.stat().st_size == size and index.get(rel) == source:
            return  # staged by an earlier attempt, from this very object
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.partial")
        retry.call(f"download s3://{bucket}/{key}", lambda: client.download_file(bucket, key, str(tmp)))
        os.replace(tmp, dest)
        # Recorded after the file is in place: a pod lost in between leaves an old or no record,
        # and the next attempt downloads the file again.
        index[rel] = source
        _write_staged_index(inputs, index)

    if cfg.model.hf_checkpoint.startswith("s3://"):
        bucket, prefix = parse_s3_uri(cfg.model.hf_checkpoint)
        prefix = prefix if prefix.endswith("/") else prefix + "/"
        objects = []
        token = None
        while True:
            kwargs = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = retry.call(f"list s3://{bucket}/{prefix}", lambda kw=kwargs: client.list_objects_v2(**kw))
            objects += [o for o in page.get("Contents", []) if not o["Key"].endswith("/")]
            if not page.get("IsTruncated"):
                break
            token = page.get("NextContinuationToken")
        if not objects:
            raise FileNotFoundError(f"model.hf_checkpoint {cfg.model.hf_checkpoint} holds no objects")
        wanted = {Path(hf) / o["Key"][len(prefix):] for o in objects}
        stale = sorted(p for p in Path(hf).rglob("*") if p.is_file() and p not in wanted)
        for path in stale:  # left from other weights under this prefix, or a download cut short
            path.unlink()
            index.pop(path.relative_to(inputs).as_posix(), None)
        if stale:
            _write_staged_index(inputs, index)
            print(f"rltrainer: removed {len(stale)} staged file(s) that s3://{bucket}/{prefix} no longer holds, "
                  f"e.g. {stale[0]}", file=out, flush=True)
        progress = Progress(f"stage {cfg.model.hf_checkpoint}", sum(o["Size"] for o in objects), out)
        for obj in objects:
            fetch(bucket, obj["Key"], Path(hf) / obj["Key"][len(prefix):], obj.get("ETag", ""), obj["Size"])
            progress(obj["Size"])
        progress.finish()
    if cfg.data.prompt_data.startswith("s3://"):
        bucket, key = parse_s3_uri(cfg.data.prompt_data)
        head = retry.call(f"stat s3://{bucket}/{key}", lambda: client.head_object(Bucket=bucket, Key=key))
        fetch(bucket, key, Path(data), head.get("ETag", ""), head["ContentLength"])
    return hf, data

"""Step 2 of ``rltrainer launch``: inputs given as s3:// URIs (the Hugging Face weights, the prompt
file) staged under ``<checkpoint.local_dir>/_inputs/``, each download kept only while its S3 object
is the one it was copied from.

Each input has one place: ``_inputs/model/<last part of the prefix>`` and ``_inputs/data/<file
name>``. A run that keeps its ``run_name`` but changes ``model.hf_checkpoint`` or
``data.prompt_data`` would otherwise keep the earlier copy beside the new one for good, and the
kit sizes the shared file system for one set of weights plus ``keep_local + 1`` saves (DeepSeek-V3:
about 148 GiB to spare, one copy of its weights about 1.2 TiB). So before staging, everything
directly under ``_inputs/model/`` and ``_inputs/data/`` that is not where the current inputs live is
deleted, each with a log line saying what it was and how big; links are removed, never followed;
nothing outside this run's ``_inputs`` is touched. This is safe because only one launcher stages
into a run's ``_inputs``: the kit runs one RayJob per run name (``rlkit launch`` refuses a second
one and ``--replace`` deletes the old one, waiting for its pods, before applying the new one), and
``checkpoint.local_dir`` is ``/fsx/checkpoints/<run_name>``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import TextIO

from .checkpoints.layout import INPUTS_DIR
from .checkpoints.retention import tree_bytes
from .contract import RunConfig, parse_s3_uri


def staged_path(cfg: RunConfig, uri: str, kind: str) -> str:
    """Local path an s3:// input is staged to (the URI itself if it is already local)."""
    if not uri.startswith("s3://"):
        return uri
    _bucket, key = parse_s3_uri(uri)
    name = PurePosixPath(key.rstrip("/")).name or "input"
    return str(PurePosixPath(cfg.checkpoint.local_dir) / INPUTS_DIR / kind / name)


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


KINDS = (("model", "model.hf_checkpoint"), ("data", "data.prompt_data"))  # _inputs/<kind>/, the field


def _size(n: int) -> str:
    if n >= 100 << 20:
        return f"{n / (1 << 30):,.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):,.1f} MiB"
    return f"{n:,} bytes"


def _recorded_source(index: dict[str, dict], rel: str) -> str | None:
    """The s3:// source the index records for staged file or directory ``rel`` (``model/A``)."""
    for key, entry in sorted(index.items()):
        uri = entry.get("uri") if isinstance(entry, dict) else None
        if not isinstance(uri, str):
            continue
        if key == rel:
            return uri
        rest = key[len(rel) + 1:] if key.startswith(rel + "/") else None
        if rest and uri.endswith("/" + rest):
            return uri[:-len(rest)]
    return None


def remove_earlier_inputs(cfg: RunConfig, inputs: Path, index: dict[str, dict], out: TextIO) -> bool:
    """Delete what this run staged under ``inputs``/model/ and ``inputs``/data/ for sources it no
    longer reads (module docstring), saying what and how big first; True when the index changed.
    An entry is kept when it is, holds or lies inside a current input's path (a local
    ``hf_checkpoint`` may point into ``_inputs``), or is the partial download of one."""
    if inputs.is_symlink():
        print(f"rltrainer: {inputs} is a link; not removing inputs staged from earlier sources there",
              file=out, flush=True)
        return False
    current = {"model": (cfg.model.hf_checkpoint, staged_path(cfg, cfg.model.hf_checkpoint, "model")),
               "data": (cfg.data.prompt_data, staged_path(cfg, cfg.data.prompt_data, "data"))}
    keep = [os.path.realpath(path) for _uri, path in current.values()]
    removed, freed, changed = 0, 0, False
    for kind, field in KINDS:
        base = inputs / kind
        if base.is_symlink() or not base.is_dir():
            continue
        uri, path = current[kind]
        partial = f".{PurePosixPath(path).name}.partial"  # fetch() downloads to it, then renames
        for child in sorted(base.iterdir()):
            real = os.path.realpath(child)
            if child.name == partial and PurePosixPath(path).parent == PurePosixPath(base.as_posix()):
                continue
            if any(real == k or k.startswith(real + os.sep) or real.startswith(k + os.sep) for k in keep):
                continue
            rel = f"{kind}/{child.name}"
            link = child.is_symlink()
            size = 0 if link else tree_bytes(child)
            source = _recorded_source(index, rel)
            what = "a link; what it points to is kept" if link else _size(size)
            print(f"rltrainer: removing {child} ({what}), "
                  + (f"staged from {source}" if source else "its source not recorded")
                  + f": {field} is now {uri}, and only the launcher of this run (one RayJob per run name) "
                  "stages here", file=out, flush=True)
            if link or not child.is_dir():
                child.unlink()
            else:
                shutil.rmtree(child)
            for key in [k for k in index if k == rel or k.startswith(rel + "/")]:
                del index[key]
                changed = True
            removed += 1
            freed += size
    if removed:
        print(f"rltrainer: removed {removed} input(s) this run staged from earlier sources: {_size(freed)} freed",
              file=out, flush=True)
    return changed


def stage_inputs(cfg: RunConfig, client=None, log: TextIO | None = None) -> tuple[str, str]:
    """Download s3:// inputs once; return the local (hf_checkpoint, prompt_data) paths.

    A staged file is current only while its S3 object has the key, ETag and size recorded when it
    was downloaded (``_inputs/.staged.json``): a replacement of the same size (a corrected prompt
    file, other weights of the same shape) has another ETag. Files the model prefix no longer
    holds are deleted, so the weights are exactly what the prefix holds now; inputs staged for
    an earlier ``hf_checkpoint`` or ``prompt_data`` of this run are deleted before anything is
    staged (``remove_earlier_inputs``), also when the run now reads local paths only.
    """
    from .checkpoints import Progress, RetryPolicy

    out = log or sys.stderr
    hf = staged_path(cfg, cfg.model.hf_checkpoint, "model")
    data = staged_path(cfg, cfg.data.prompt_data, "data")
    inputs = Path(cfg.checkpoint.local_dir) / INPUTS_DIR
    index = _read_staged_index(inputs)
    if remove_earlier_inputs(cfg, inputs, index, out):
        _write_staged_index(inputs, index)
    if not (cfg.model.hf_checkpoint.startswith("s3://") or cfg.data.prompt_data.startswith("s3://")):
        return hf, data
    if client is None:
        import boto3

        client = boto3.client("s3")
    retry = RetryPolicy(log=out)

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

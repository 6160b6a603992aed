"""Checkpoints to and from S3: never torn, never overwritten, never a bad one restored.

Layout. Megatron (and therefore Miles) saves into ``--save``::

    <local_dir>/latest_checkpointed_iteration.txt          # Megatron: written after a save completes
    <local_dir>/iter_0000020/...                            # one directory per save
    <local_dir>/rollout/global_dataset_state_dict_20.pt     # Miles' data cursor for that save

Megatron's torch_dist format writes one ``__<rank>_<n>.distcp`` per writer and, once every
writer is done, ``.metadata`` listing them all (Megatron-LM 37f9161
``megatron/core/dist_checkpointing/strategies/filesystem_async.py``). Miles v0.1.0 writes the
data cursor *after* the model save, tracker included: ``train.py`` ``save()`` awaits
``save_model`` and then ``rollout_manager.save`` (``miles/ray/rollout/rollout_manager.py``
``save`` -> ``miles/rollout/data_source.py`` ``save``, a plain ``torch.save``). On resume Miles
loads the cursor of the loaded iteration (``miles/ray/placement_group.py``:
``rollout_manager.load(start_rollout_id - 1)``). So a save is complete only when the tracker
has reached it *and* its cursor is a whole file: without the cursor, a resume silently starts
the prompt data over.

S3 mirrors the same relative paths under the run's prefix, plus one manifest per
checkpoint, written last::

    s3://bucket/prefix/iter_0000020/...                      # every file of the save
    s3://bucket/prefix/rollout/global_dataset_state_dict_20.pt
    s3://bucket/prefix/iter_0000020/_COMPLETE.json           # files, sizes, S3 CRC32 checksums
    s3://bucket/prefix/iter_0000020/_QUARANTINED.json        # only if restore found it bad

Rules:

- A checkpoint exists in S3 only once its ``_COMPLETE.json`` does and no ``_QUARANTINED.json``
  sits beside it. An upload that dies half way leaves files but no manifest.
- A complete checkpoint is never written again: an uploader that finds the manifest skips
  the whole iteration, checks again before every file, and writes the manifest with a
  conditional put (``If-None-Match: *``), so of two writers only the first one publishes.
- Checksums are S3's own (``ChecksumAlgorithm=CRC32``): botocore computes them while it sends
  each request and S3 checks them on arrival, so an upload reads the data once. A single-part
  object carries the CRC32 of the whole object; a multipart one the CRC32 of its parts' CRC32s
  (S3 "composite"), which the manifest records with the part size.
- Restore verifies every file's size and checksum in a staging directory, moves them into
  place and only then writes Megatron's tracker. A checkpoint with a malformed manifest or a
  missing or corrupt file is quarantined (a marker, nothing deleted) and restore falls back
  to the next-newest complete one.
- Before a restore, local iteration directories (and cursors) above the tracker -- saves that
  were being written when the pod died -- are moved to ``<local_dir>/_quarantine/``, so a torn
  save is never published later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, TextIO

from .config import parse_s3_uri

TRACKER_FILE = "latest_checkpointed_iteration.txt"
MANIFEST_NAME = "_COMPLETE.json"
QUARANTINE_MARKER = "_QUARANTINED.json"
LOCAL_QUARANTINE_DIR = "_quarantine"
MANIFEST_FORMAT = "rltrainer.checkpoint/v2"
LEGACY_MANIFEST_FORMAT = "rltrainer.checkpoint/v1"  # sha256 per file; still restorable
CHECKSUM_ALGORITHM = "CRC32"
_ITER_DIR = re.compile(r"^iter_(\d{7})$")
_MARKER_KEY = re.compile(r"iter_(\d{7})/(" + re.escape(MANIFEST_NAME) + "|" + re.escape(QUARANTINE_MARKER) + r")$")
_STAGING_DIR = "_restore_staging"
# S3 error codes worth retrying: throttling and server-side trouble. Anything else
# (AccessDenied, NoSuchBucket, NoSuchKey, ...) fails at once with the real message.
RETRYABLE_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ConditionalRequestConflict",  # 409: a concurrent conditional write on the same key; retry decides
        "500",
        "502",
        "503",
        "504",
    }
)


def iter_dirname(iteration: int) -> str:
    """Megatron's directory name for a save: ``iter_`` and seven digits."""
    return f"iter_{iteration:07d}"


def rollout_state_relpath(iteration: int) -> str:
    """Where Miles keeps the data-cursor state that belongs to a save."""
    return f"rollout/global_dataset_state_dict_{iteration}.pt"


# ------------------------------------------------------------------------------ retry


def _error_chain(exc: BaseException) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def is_retryable(exc: BaseException) -> bool:
    """True for transient S3/network failures (boto3's transfer manager wraps them)."""
    from botocore.exceptions import (  # imported here so the module loads without botocore
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    for e in _error_chain(exc):
        if isinstance(e, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError)):
            return True
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
            return str(err.get("Code", "")) in RETRYABLE_CODES or int(status) >= 500
    return False


@dataclass
class RetryPolicy:
    """Exponential backoff: base, 2 x base, 4 x base, ... capped at ``max_delay_s``.

    ``sleep`` is injectable so tests run without waiting.
    """

    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    log: TextIO | None = None

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified below
                if not is_retryable(exc) or attempt >= self.max_attempts:
                    raise
                wait = self.delay(attempt)
                print(
                    f"rltrainer: {what} failed ({exc.__class__.__name__}: {exc}); "
                    f"retry {attempt}/{self.max_attempts - 1} in {wait:g}s",
                    file=self.log or sys.stderr,
                    flush=True,
                )
                self.sleep(wait)
                attempt += 1


# --------------------------------------------------------------------------- progress


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


class Progress:
    """Thread-safe bytes-done/total reporter (boto3 calls back from several threads).

    Prints at most once per ``min_interval_s`` and always on completion.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None, min_interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last = -float("inf")
        self._lock = threading.Lock()
        self._finished = False

    def __call__(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = self.clock()
            if now - self._last >= self.min_interval_s:
                self._last = now
                self._print()

    def rewind(self, nbytes: int) -> None:
        """Undo the bytes of an attempt that failed and will be retried."""
        with self._lock:
            self.done = max(0, self.done - nbytes)

    def finish(self) -> None:
        with self._lock:
            if not self._finished:
                self._finished = True
                self._print()

    def _print(self) -> None:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(f"rltrainer: {self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} ({pct:.0f}%)",
              file=self.stream, flush=True)

# --------------------------------------------------------------------------- manifest


class ManifestError(ValueError):
    """A manifest that does not follow the schema; the checkpoint is not restorable."""


class CorruptCheckpoint(IOError):
    """A file of a complete checkpoint is missing from S3 or does not match its manifest."""


class IncompleteCheckpoint(RuntimeError):
    """A local save that is not whole yet (or never will be): it is not uploaded."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint.

    ``crc32`` is S3's base64 CRC32 of the object (``part_size == 0``: single-part upload, the
    CRC32 of the whole file; otherwise the CRC32 of the CRC32s of ``part_size``-byte parts).
    ``sha256`` is set instead only in legacy v1 manifests.
    """

    path: str  # relative to the checkpoint root (local_dir / S3 prefix), POSIX separators
    size: int
    crc32: str = ""
    part_size: int = 0
    sha256: str = ""

    def to_json(self) -> dict:
        if self.sha256:
            return {"path": self.path, "size": self.size, "sha256": self.sha256}
        return {"path": self.path, "size": self.size, "crc32": self.crc32, "part_size": self.part_size}


_V2_FILE_KEYS = frozenset({"path", "size", "crc32", "part_size"})
_V1_FILE_KEYS = frozenset({"path", "size", "sha256"})
_TOP_REQUIRED = frozenset({"format", "iteration", "files"})
_TOP_OPTIONAL = frozenset({"created_at", "total_bytes"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _crc32_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return len(base64.b64decode(value, validate=True)) == 4
    except (binascii.Error, ValueError):
        return False


@dataclass(frozen=True)
class Manifest:
    iteration: int
    files: tuple[FileEntry, ...]
    created_at: str = ""
    format: str = MANIFEST_FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        body = {
            "format": self.format,
            "iteration": self.iteration,
            "created_at": self.created_at,
            "total_bytes": self.total_bytes,
            "files": [f.to_json() for f in self.files],
        }
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = "manifest") -> "Manifest":
        """Parse and validate strictly; every problem is a ``ManifestError`` naming the field."""
        try:
            body = json.loads(text)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ManifestError(f"{where}: not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
        if not isinstance(body, dict):
            raise ManifestError(f"{where}: must be a JSON object, got {type(body).__name__}")
        missing = sorted(_TOP_REQUIRED - body.keys())
        unknown = sorted(body.keys() - _TOP_REQUIRED - _TOP_OPTIONAL)
        if missing or unknown:
            raise ManifestError(f"{where}: missing keys {missing}, unknown keys {unknown}")
        fmt = body["format"]
        if fmt not in (MANIFEST_FORMAT, LEGACY_MANIFEST_FORMAT):
            raise ManifestError(f"{where}: format {fmt!r} is not {MANIFEST_FORMAT!r}")
        iteration = body["iteration"]
        if not _is_int(iteration) or iteration < 0:
            raise ManifestError(f"{where}: iteration must be a non-negative integer, got {iteration!r}")
        created_at = body.get("created_at", "")
        if not isinstance(created_at, str):
            raise ManifestError(f"{where}: created_at must be a string, got {created_at!r}")
        files = body["files"]
        if not isinstance(files, list) or not files:
            raise ManifestError(f"{where}: files must be a non-empty list, got {files!r}"[:300])
        wanted_keys = _V2_FILE_KEYS if fmt == MANIFEST_FORMAT else _V1_FILE_KEYS
        own_dir = iter_dirname(iteration) + "/"
        entries: list[FileEntry] = []
        seen: set[str] = set()
        for i, f in enumerate(files):
            label = f"{where}: files[{i}]"
            if not isinstance(f, dict) or set(f.keys()) != wanted_keys:
                raise ManifestError(f"{label} must be an object with exactly the keys {sorted(wanted_keys)}")
            path, size = f["path"], f["size"]
            if not isinstance(path, str):
                raise ManifestError(f"{label}.path must be a string, got {path!r}")
            try:
                _check_relpath(path)
            except ManifestError as exc:
                raise ManifestError(f"{label}.path: {exc}") from None
            if not (path.startswith(own_dir) or path == rollout_state_relpath(iteration)):
                raise ManifestError(f"{label}.path {path!r} does not belong to {iter_dirname(iteration)}")
            if path in seen:
                raise ManifestError(f"{label}.path {path!r} is listed twice")
            seen.add(path)
            if not _is_int(size) or size < 0:
                raise ManifestError(f"{label}.size must be a non-negative integer, got {size!r}")
            if fmt == MANIFEST_FORMAT:
                if not _crc32_ok(f["crc32"]):
                    raise ManifestError(f"{label}.crc32 must be a base64 CRC32 (4 bytes), got {f['crc32']!r}")
                if not _is_int(f["part_size"]) or f["part_size"] < 0:
                    raise ManifestError(f"{label}.part_size must be a non-negative integer, got {f['part_size']!r}")
                entries.append(FileEntry(path=path, size=size, crc32=f["crc32"], part_size=f["part_size"]))
            else:
                if not isinstance(f["sha256"], str) or not _SHA256.match(f["sha256"]):
                    raise ManifestError(f"{label}.sha256 must be 64 lowercase hex digits, got {f['sha256']!r}")
                entries.append(FileEntry(path=path, size=size, sha256=f["sha256"]))
        manifest = cls(iteration=iteration, files=tuple(entries), created_at=created_at, format=fmt)
        total = body.get("total_bytes", manifest.total_bytes)
        if not _is_int(total) or total != manifest.total_bytes:
            raise ManifestError(f"{where}: total_bytes {total!r} is not the sum of the file sizes "
                                f"({manifest.total_bytes})")
        return manifest


def _check_relpath(path: str) -> None:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\\" in path:
        raise ManifestError(f"unsafe path in checkpoint manifest: {path!r}")


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                return h.hexdigest()
            h.update(block)


def s3_crc32(path: Path, part_size: int = 0, chunk: int = 8 << 20) -> str:
    """The CRC32 S3 reports for ``path`` uploaded whole (0) or in ``part_size`` parts."""

    def b64(crc: int) -> str:
        return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")

    with open(path, "rb") as fh:
        if part_size <= 0:
            crc = 0
            while block := fh.read(chunk):
                crc = zlib.crc32(block, crc)
            return b64(crc)
        part_crcs = bytearray()
        while True:
            left, crc, got = part_size, 0, 0
            while left and (block := fh.read(min(chunk, left))):
                crc = zlib.crc32(block, crc)
                left -= len(block)
                got += len(block)
            if not got:
                break
            part_crcs += crc.to_bytes(4, "big")
        return b64(zlib.crc32(bytes(part_crcs)))


def entry_matches(path: Path, entry: FileEntry) -> bool:
    """Whether the local file has the size and checksum the manifest records."""
    if not path.is_file() or path.stat().st_size != entry.size:
        return False
    if entry.sha256:
        return sha256_file(path) == entry.sha256
    return s3_crc32(path, entry.part_size) == entry.crc32


# ------------------------------------------------------------------------ local state


def read_tracker(local_dir: str | Path) -> int | None:
    """The iteration in Megatron's tracker file, or None (missing, empty or ``release``)."""
    try:
        text = (Path(local_dir) / TRACKER_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def write_tracker(local_dir: str | Path, iteration: int) -> None:
    """Atomically point Megatron's tracker at ``iteration``."""
    local_dir = Path(local_dir)
    tmp = local_dir / f".{TRACKER_FILE}.tmp"
    tmp.write_text(f"{iteration}\n")
    os.replace(tmp, local_dir / TRACKER_FILE)


def local_iterations(local_dir: str | Path) -> list[int]:
    """Iterations that have an ``iter_XXXXXXX`` directory, ascending."""
    root = Path(local_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _ITER_DIR.match(child.name)
        if m and child.is_dir():
            found.append(int(m.group(1)))
    return sorted(found)


def local_cursor_iterations(local_dir: str | Path) -> list[int]:
    """Iterations that have a Miles data-cursor file, ascending."""
    rollout = Path(local_dir) / "rollout"
    if not rollout.is_dir():
        return []
    found = []
    for child in rollout.iterdir():
        m = re.fullmatch(r"global_dataset_state_dict_(\d+)\.pt", child.name)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


def checkpoint_files(local_dir: str | Path, iteration: int) -> list[str]:
    """Relative paths of every regular file that belongs to one save."""
    root = Path(local_dir)
    it_dir = root / iter_dirname(iteration)
    if not it_dir.is_dir():
        raise FileNotFoundError(f"no checkpoint directory {it_dir}")
    rels = []
    for dirpath, _dirs, files in os.walk(it_dir):
        for name in files:
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                rels.append(full.relative_to(root).as_posix())
    extra = root / rollout_state_relpath(iteration)
    if extra.is_file():
        rels.append(rollout_state_relpath(iteration))
    return sorted(rels)


def _is_torch_dist(iter_dir: Path) -> bool:
    """Megatron writes metadata.json with the sharded backend; .distcp shards are torch_dist's own."""
    try:
        meta = json.loads((iter_dir / "metadata.json").read_text())
        if isinstance(meta, dict) and meta.get("sharded_backend") == "torch_dist":
            return True
    except (OSError, ValueError):
        pass
    return any(iter_dir.glob("*.distcp"))


def missing_shards(iter_dir: str | Path) -> list[str] | None:
    """Shard files a torch_dist save's ``.metadata`` references but this node cannot see.

    Megatron's torch_dist format (torch.distributed.checkpoint) writes one
    ``__<rank>_<n>.distcp`` per writer and a ``.metadata`` file that lists every one.
    On a multi-node run the launcher (on the Ray head) only sees other nodes' shards if
    ``--save`` is on shared storage; uploading without them would publish a torn
    checkpoint. Returns None when there is no ``.metadata`` or no torch to read it with;
    raises ``IncompleteCheckpoint`` when ``.metadata`` is there but unreadable (torn).
    """
    iter_dir = Path(iter_dir)
    if not (iter_dir / ".metadata").is_file():
        return None
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:  # pragma: no cover - the image and the tests have torch
        return None
    try:
        metadata = dcp.FileSystemReader(str(iter_dir)).read_metadata()
        referenced = {info.relative_path for info in metadata.storage_data.values()}
    except Exception as exc:  # noqa: BLE001 - any failure to read it means we cannot trust the save
        raise IncompleteCheckpoint(f"{iter_dir / '.metadata'} is unreadable ({type(exc).__name__}: {exc}); "
                                   "a torn save is never uploaded") from None
    return sorted(rel for rel in referenced if not (iter_dir / rel).is_file())


def check_local_save(local_dir: str | Path, iteration: int, *, require_data_cursor: bool = True) -> list[str]:
    """The relative files of a whole local save, or ``IncompleteCheckpoint`` saying what is missing."""
    root = Path(local_dir)
    it_dir = root / iter_dirname(iteration)
    if not it_dir.is_dir():
        raise IncompleteCheckpoint(f"no checkpoint directory {it_dir}")
    if _is_torch_dist(it_dir) and not (it_dir / ".metadata").is_file():
        raise IncompleteCheckpoint(
            f"{it_dir} is a torch_dist save without .metadata (torch.distributed.checkpoint writes it last, "
            "after every shard), so it is not finished or was torn; it is not uploaded")
    missing = missing_shards(it_dir)
    if missing:
        raise IncompleteCheckpoint(
            f"{it_dir} lacks {len(missing)} shard(s) its .metadata lists "
            f"(e.g. {missing[0]}); on a multi-node run checkpoint.local_dir must be storage every node "
            "writes to (e.g. FSx for Lustre), or the saves of the other nodes never reach S3"
        )
    rels = checkpoint_files(root, iteration)
    if not any(r.startswith(iter_dirname(iteration) + "/") for r in rels):
        raise IncompleteCheckpoint(f"{it_dir} holds no files; an empty checkpoint is never published")
    if require_data_cursor:
        cursor = root / rollout_state_relpath(iteration)
        if not cursor.is_file():
            raise IncompleteCheckpoint(
                f"{cursor} does not exist yet: Miles writes the data cursor after the model save, and a "
                "checkpoint without it would restart the prompt data on resume")
        if not zipfile.is_zipfile(cursor):  # torch.save writes a zip archive; a torn one has no central directory
            raise IncompleteCheckpoint(f"{cursor} is not a whole torch.save file yet (no zip central directory)")
    return rels


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def quarantine_local(local_dir: str | Path, iterations: Iterable[int], reason: str,
                     log: TextIO | None = None) -> list[str]:
    """Move the given iterations' directories and cursors to ``<local_dir>/_quarantine/<stamp>/``."""
    root = Path(local_dir)
    moved: list[str] = []
    dest_root = root / LOCAL_QUARANTINE_DIR / _stamp()
    for iteration in sorted(set(iterations)):
        for rel in (iter_dirname(iteration), rollout_state_relpath(iteration)):
            src = root / rel
            if not src.exists():
                continue
            dest = dest_root / rel
            n = 1
            while dest.exists():
                dest = dest_root / f"{rel}.{n}"
                n += 1
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
            moved.append(rel)
    if moved:
        print(f"rltrainer: moved {', '.join(moved)} to {dest_root} ({reason})", file=log or sys.stderr, flush=True)
    return moved


def quarantine_above_tracker(local_dir: str | Path, log: TextIO | None = None) -> list[str]:
    """Move aside saves above the tracker: they were being written when the run stopped."""
    tracker = read_tracker(local_dir)
    above = [i for i in set(local_iterations(local_dir)) | set(local_cursor_iterations(local_dir))
             if tracker is None or i > tracker]
    what = "above the tracker" if tracker is not None else "with no tracker"
    return quarantine_local(local_dir, above, f"saves {what} are torn and must never be uploaded", log)


# ---------------------------------------------------------------------------- S3 store


@dataclass(frozen=True)
class UploadResult:
    """What ``upload`` did: ``uploaded``, or skipped because S3 already has it complete / quarantined."""

    iteration: int
    status: str  # "uploaded", "already-complete", "quarantined"
    manifest: Manifest | None = None


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


class S3CheckpointStore:
    """The checkpoints of one run under one S3 prefix."""

    def __init__(
        self,
        s3_uri: str,
        client: Any = None,
        retry: RetryPolicy | None = None,
        progress_stream: TextIO | None = None,
        progress_interval_s: float = 10.0,
        transfer_config: Any = None,
        require_data_cursor: bool = True,
    ):
        bucket, key = parse_s3_uri(s3_uri)
        self.bucket = bucket
        self.prefix = key if (not key or key.endswith("/")) else key + "/"
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.client = client
        self.retry = retry or RetryPolicy()
        self.progress_stream = progress_stream
        self.progress_interval_s = progress_interval_s
        if transfer_config is None:
            from boto3.s3.transfer import TransferConfig

            # 64 MiB parts, 16 in flight: Megatron shards are hundreds of MiB to GiBs each. The
            # classic transfer manager, always: boto3's "auto" switches to the CRT one on p4d/p5
            # when awscrt is installed, which ignores these settings and picks its own part size.
            transfer_config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20,
                                             max_concurrency=16, preferred_transfer_client="classic")
        self.transfer_config = transfer_config
        self.require_data_cursor = require_data_cursor

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _log(self, message: str) -> None:
        print(f"rltrainer: {message}", file=self.progress_stream or sys.stderr, flush=True)

    def key(self, relpath: str) -> str:
        return self.prefix + relpath

    def manifest_key(self, iteration: int) -> str:
        return self.key(f"{iter_dirname(iteration)}/{MANIFEST_NAME}")

    def quarantine_key(self, iteration: int) -> str:
        return self.key(f"{iter_dirname(iteration)}/{QUARANTINE_MARKER}")

    # -- listing

    def _markers(self) -> tuple[set[int], set[int]]:
        def _list() -> tuple[set[int], set[int]]:
            manifests: set[int] = set()
            quarantined: set[int] = set()
            token = None
            while True:
                kwargs = {"Bucket": self.bucket, "Prefix": self.key("iter_")}
                if token:
                    kwargs["ContinuationToken"] = token
                page = self.client.list_objects_v2(**kwargs)
                for obj in page.get("Contents", []):
                    m = _MARKER_KEY.fullmatch(obj["Key"][len(self.prefix):])
                    if m:
                        (manifests if m.group(2) == MANIFEST_NAME else quarantined).add(int(m.group(1)))
                if not page.get("IsTruncated"):
                    return manifests, quarantined
                token = page.get("NextContinuationToken")

        return self.retry.call(f"list {self.uri}", _list)

    def list_complete(self) -> list[int]:
        """Iterations with a manifest and no quarantine marker, ascending (manifests not parsed here)."""
        manifests, quarantined = self._markers()
        return sorted(manifests - quarantined)

    def list_quarantined(self) -> list[int]:
        return sorted(self._markers()[1])

    def is_complete(self, iteration: int) -> bool:
        return iteration in self.list_complete()

    def read_manifest(self, iteration: int) -> Manifest:
        """The manifest of ``iteration``; ``ManifestError`` if it is malformed."""

        def _get() -> bytes:
            return self.client.get_object(Bucket=self.bucket, Key=self.manifest_key(iteration))["Body"].read()

        text = self.retry.call(f"read manifest of {iter_dirname(iteration)}", _get)
        manifest = Manifest.from_json(text, where=f"s3://{self.bucket}/{self.manifest_key(iteration)}")
        if manifest.iteration != iteration:
            raise ManifestError(f"manifest at {self.manifest_key(iteration)} says iteration {manifest.iteration}")
        return manifest

    def newest_complete(self) -> Manifest | None:
        """The newest checkpoint with a valid manifest; quarantines malformed ones on the way."""
        for iteration in reversed(self.list_complete()):
            try:
                return self.read_manifest(iteration)
            except ManifestError as exc:
                self.quarantine(iteration, f"malformed manifest: {exc}")
        return None

    def quarantine(self, iteration: int, reason: str) -> None:
        """Mark a checkpoint bad (nothing is deleted; remove the marker to undo)."""
        from botocore.exceptions import ClientError

        body = json.dumps({"iteration": iteration, "reason": reason, "at": _stamp()}, indent=2).encode()
        self._log(f"quarantining {iter_dirname(iteration)} in {self.uri}: {reason}")
        try:
            self.retry.call(f"quarantine {iter_dirname(iteration)}", lambda: self.client.put_object(
                Bucket=self.bucket, Key=self.quarantine_key(iteration), Body=body,
                ContentType="application/json", IfNoneMatch="*"))
        except ClientError as exc:
            if _error_code(exc) not in ("PreconditionFailed", "412"):
                raise  # 412: somebody quarantined it already

    # -- upload

    def upload(self, local_dir: str | Path, iteration: int) -> UploadResult:
        """Upload one finished save, then mark it complete by writing its manifest last.

        Never writes to an iteration that S3 already has complete (or quarantined): that is a
        second, stale writer, and it skips.
        """
        from botocore.exceptions import ClientError

        root = Path(local_dir)
        rels = check_local_save(root, iteration, require_data_cursor=self.require_data_cursor)
        skip = self._skip_reason(iteration)
        if skip:
            return skip
        sizes = {rel: (root / rel).stat().st_size for rel in rels}
        progress = Progress(f"upload {iter_dirname(iteration)} to {self.uri}", sum(sizes.values()),
                            self.progress_stream, self.progress_interval_s)
        entries = []
        for rel in rels:
            skip = self._skip_reason(iteration)  # another writer may have finished it meanwhile
            if skip:
                return skip
            entries.append(self._upload_file(root / rel, rel, sizes[rel], progress))
        progress.finish()
        # The manifest names the objects as they are now: if a concurrent writer replaced one
        # while we uploaded the rest, do not publish a mix.
        for entry in entries:
            now = self._head_checksum(self.key(entry.path))
            if now != (entry.size, entry.crc32):
                skip = self._skip_reason(iteration)
                if skip:
                    return skip
                raise IncompleteCheckpoint(f"s3://{self.bucket}/{self.key(entry.path)} changed during the upload "
                                           f"of {iter_dirname(iteration)} (another writer?); not publishing it")
        manifest = Manifest(iteration=iteration, files=tuple(entries), created_at=_stamp())
        body = manifest.to_json().encode("utf-8")
        try:
            self.retry.call(
                f"write manifest of {iter_dirname(iteration)}",
                lambda: self.client.put_object(Bucket=self.bucket, Key=self.manifest_key(iteration), Body=body,
                                               ContentType="application/json", IfNoneMatch="*"),
            )
        except ClientError as exc:
            if _error_code(exc) in ("PreconditionFailed", "412"):
                self._log(f"{iter_dirname(iteration)} was completed by another writer first; keeping theirs")
                return UploadResult(iteration, "already-complete")
            raise
        return UploadResult(iteration, "uploaded", manifest)

    def _skip_reason(self, iteration: int) -> UploadResult | None:
        """Skip an iteration S3 already has complete or quarantined (one LIST finds both markers)."""
        prefix = self.key(f"{iter_dirname(iteration)}/_")
        page = self.retry.call(f"list {self.uri}{iter_dirname(iteration)}/",
                               lambda: self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix))
        names = {obj["Key"][len(prefix) - 1:] for obj in page.get("Contents", [])}
        if QUARANTINE_MARKER in names:
            self._log(f"{iter_dirname(iteration)} is quarantined in {self.uri}; not uploading it again")
            return UploadResult(iteration, "quarantined")
        if MANIFEST_NAME in names:
            self._log(f"{iter_dirname(iteration)} is already complete in {self.uri}; not overwriting it")
            return UploadResult(iteration, "already-complete")
        return None

    def _part_size(self, size: int) -> int:
        """The part size boto3 will use for ``size`` bytes (0: one PutObject)."""
        if size < self.transfer_config.multipart_threshold:
            return 0
        from s3transfer.utils import ChunksizeAdjuster

        return ChunksizeAdjuster().adjust_chunksize(self.transfer_config.multipart_chunksize, size)

    def _head(self, key: str) -> dict:
        return self.retry.call(f"stat s3://{self.bucket}/{key}",
                               lambda: self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED"))

    @staticmethod
    def _size_and_crc(head: dict) -> tuple[int, str]:
        value = str(head.get("ChecksumCRC32") or "")
        return int(head["ContentLength"]), value.split("-", 1)[0]  # composite values end in -<parts>

    def _head_checksum(self, key: str) -> tuple[int, str]:
        return self._size_and_crc(self._head(key))

    def _upload_file(self, path: Path, rel: str, size: int, progress: Progress) -> FileEntry:
        key = self.key(rel)
        sent = [0]

        def callback(n: int) -> None:
            sent[0] += n
            progress(n)

        def attempt() -> None:
            progress.rewind(sent[0])
            sent[0] = 0
            self.client.upload_file(str(path), self.bucket, key, Callback=callback, Config=self.transfer_config,
                                    ExtraArgs={"ChecksumAlgorithm": CHECKSUM_ALGORITHM})

        self.retry.call(f"upload {path} to s3://{self.bucket}/{key}", attempt)
        head = self._head(key)
        got_size, crc = self._size_and_crc(head)
        if not crc:
            raise IncompleteCheckpoint(f"s3://{self.bucket}/{key} has no CRC32 checksum after the upload; "
                                       "the store must support S3 additional checksums")
        if got_size != size or path.stat().st_size != size:
            raise IncompleteCheckpoint(f"{path} changed size during its upload ({size} -> {got_size} bytes)")
        # S3 says which kind of checksum it kept; without that (moto), the part size decides
        part_size = 0 if head.get("ChecksumType") == "FULL_OBJECT" else self._part_size(size)
        return FileEntry(path=rel, size=size, crc32=crc, part_size=part_size)

    # -- restore

    def restore(self, manifest: Manifest, local_dir: str | Path) -> None:
        """Download and verify every file of ``manifest``, move them into place, then point the tracker at it.

        ``CorruptCheckpoint`` if a file is missing in S3 or does not match (after one re-download).
        """
        root = Path(local_dir)
        root.mkdir(parents=True, exist_ok=True)
        staging = root / _STAGING_DIR
        shutil.rmtree(staging, ignore_errors=True)
        progress = Progress(f"restore {iter_dirname(manifest.iteration)} from {self.uri}", manifest.total_bytes,
                            self.progress_stream, self.progress_interval_s)
        try:
            staged: list[tuple[Path, Path]] = []
            for entry in manifest.files:
                dest = root / entry.path
                if entry_matches(dest, entry):
                    progress(entry.size)  # already here and intact (e.g. a restart on the same volume)
                    continue
                tmp = staging / entry.path
                self._download_verified(entry, tmp, progress)
                staged.append((tmp, dest))
            progress.finish()
            for tmp, dest in staged:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_tracker(root, manifest.iteration)

    def _download_verified(self, entry: FileEntry, tmp: Path, progress: Progress) -> None:
        from botocore.exceptions import ClientError

        key = self.key(entry.path)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        for attempt_no in (1, 2):  # a mismatch may be a bad transfer: fetch once more before calling it corrupt
            got = [0]

            def callback(n: int) -> None:
                got[0] += n
                progress(n)

            def attempt() -> None:
                progress.rewind(got[0])
                got[0] = 0
                self.client.download_file(self.bucket, key, str(tmp), Callback=callback, Config=self.transfer_config)

            try:
                self.retry.call(f"download s3://{self.bucket}/{key}", attempt)
            except ClientError as exc:
                if _error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                    raise CorruptCheckpoint(f"s3://{self.bucket}/{key} is missing") from None
                raise
            if entry_matches(tmp, entry):
                return
            progress.rewind(got[0])
        size = tmp.stat().st_size
        tmp.unlink(missing_ok=True)
        raise CorruptCheckpoint(
            f"s3://{self.bucket}/{key} does not match its manifest: size {size} (expected {entry.size}), "
            f"{'sha256' if entry.sha256 else 'crc32'} differs")


# ------------------------------------------------------------------- resume and watch


@dataclass
class ResumeResult:
    iteration: int | None
    source: str  # "s3", "local", or "fresh"
    uploaded: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # S3 checkpoints found bad and quarantined

    @property
    def start_rollout_id(self) -> int | None:
        """The rollout Miles must start at: one past the saved one (Miles saves iteration == rollout id)."""
        return None if self.iteration is None else self.iteration + 1


def _newest_whole_local(root: Path, *, below: int, require_data_cursor: bool) -> int | None:
    for iteration in reversed(local_iterations(root)):
        if iteration < below:
            try:
                check_local_save(root, iteration, require_data_cursor=require_data_cursor)
                return iteration
            except IncompleteCheckpoint:
                continue
    return None


def prepare_resume(store: S3CheckpointStore, local_dir: str | Path, log: TextIO | None = None) -> ResumeResult:
    """Make ``local_dir`` hold the newest complete checkpoint before training starts.

    0. Saves above the tracker (torn by the stop) are moved to ``_quarantine/``.
    1. A local save the tracker points at is complete if it passes ``check_local_save``
       (an unfinished one -- e.g. the cursor not written yet -- is moved aside too); if S3
       lacks it (the previous pod died mid-upload), upload it now.
    2. If S3 has a newer complete checkpoint than the local tracker, download it and point the
       tracker at it; a bad one is quarantined and the next-newest is tried.
    3. Otherwise start from what is local, or fresh from the reference weights.
    """
    out = log or sys.stderr
    root = Path(local_dir)
    root.mkdir(parents=True, exist_ok=True)
    quarantine_above_tracker(root, out)
    uploaded: list[int] = []
    skipped: list[int] = []
    local = read_tracker(root)
    if local is not None:
        try:
            check_local_save(root, local, require_data_cursor=store.require_data_cursor)
        except IncompleteCheckpoint as exc:
            print(f"rltrainer: the tracker points at {iter_dirname(local)}, which is not whole ({exc}); "
                  "setting it aside", file=out)
            quarantine_local(root, [local], "incomplete save at the tracker", out)
            (root / TRACKER_FILE).unlink(missing_ok=True)
            local = _newest_whole_local(root, below=local, require_data_cursor=store.require_data_cursor)
            if local is not None:
                print(f"rltrainer: falling back to local {iter_dirname(local)}", file=out)
                write_tracker(root, local)
    if local is not None and not store.is_complete(local):
        print(f"rltrainer: local {iter_dirname(local)} is complete but not in S3; uploading it before training", file=out)
        if store.upload(root, local).status == "uploaded":
            uploaded.append(local)
    for iteration in reversed(store.list_complete()):
        if local is not None and iteration <= local:
            break
        try:
            manifest = store.read_manifest(iteration)
            print(f"rltrainer: restoring {iter_dirname(iteration)} from {store.uri}", file=out)
            store.restore(manifest, root)
        except (ManifestError, CorruptCheckpoint) as exc:
            store.quarantine(iteration, f"{type(exc).__name__}: {exc}")
            print(f"rltrainer: {iter_dirname(iteration)} in S3 is bad ({exc}); falling back to the next-newest "
                  "complete checkpoint", file=out)
            skipped.append(iteration)
            continue
        return ResumeResult(iteration, "s3", uploaded, skipped)
    if local is not None:
        print(f"rltrainer: resuming from local {iter_dirname(local)}", file=out)
        return ResumeResult(local, "local", uploaded, skipped)
    print(f"rltrainer: no complete checkpoint in {store.uri}; starting from the reference weights", file=out)
    return ResumeResult(None, "fresh", uploaded, skipped)


class CheckpointWatcher:
    """Uploads every save Megatron finishes, from a background thread.

    A save is ready once the tracker has reached it and ``check_local_save`` passes (its
    data cursor is written). A failed upload is logged and retried on the next scan; it
    never stops training.
    """

    def __init__(self, store: S3CheckpointStore, local_dir: str | Path, interval_s: float = 30.0,
                 log: TextIO | None = None):
        self.store = store
        self.local_dir = Path(local_dir)
        self.interval_s = interval_s
        self.log = log or sys.stderr
        self.uploaded: list[int] = []
        self.failures: list[tuple[int, str]] = []
        self._known: set[int] | None = None  # complete (or quarantined) in S3: never uploaded again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scan_lock = threading.Lock()

    def _known_now(self) -> set[int]:
        if self._known is None:
            manifests, quarantined = self.store._markers()
            self._known = manifests | quarantined
        return self._known

    def scan_once(self) -> list[int]:
        """Upload finished saves that S3 does not have yet; returns what it uploaded."""
        with self._scan_lock:
            tracker = read_tracker(self.local_dir)
            if tracker is None:
                return []
            known = self._known_now()
            done_now = []
            for iteration in local_iterations(self.local_dir):
                if iteration > tracker or iteration in known:
                    continue  # still being written, or already in S3
                try:
                    result = self.store.upload(self.local_dir, iteration)
                except IncompleteCheckpoint as exc:
                    self.failures.append((iteration, str(exc)))
                    print(f"rltrainer: {iter_dirname(iteration)} is not ready to upload, will look again: {exc}",
                          file=self.log, flush=True)
                    continue
                except Exception as exc:  # noqa: BLE001 - keep training; retry next scan
                    self.failures.append((iteration, str(exc)))
                    print(f"rltrainer: upload of {iter_dirname(iteration)} failed, will retry: {exc}",
                          file=self.log, flush=True)
                    continue
                known.add(iteration)
                if result.status != "uploaded":
                    continue
                self.uploaded.append(iteration)
                done_now.append(iteration)
                print(f"rltrainer: {iter_dirname(iteration)} is complete in {self.store.uri}", file=self.log, flush=True)
            return done_now

    def pending(self) -> list[int]:
        """Finished saves (at or below the tracker) that are not complete in S3 yet."""
        tracker = read_tracker(self.local_dir)
        if tracker is None:
            return []
        known = self._known_now()
        return [i for i in local_iterations(self.local_dir) if i <= tracker and i not in known]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.scan_once()
            except Exception as exc:  # noqa: BLE001 - e.g. listing failed after retries
                print(f"rltrainer: checkpoint scan failed, will retry: {exc}", file=self.log, flush=True)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rltrainer-checkpoint-watcher", daemon=True)
        self._thread.start()

    def stop(self, final_scan: bool = True) -> list[int]:
        """Stop the thread; by default upload whatever finished since the last scan."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.scan_once() if final_scan else []

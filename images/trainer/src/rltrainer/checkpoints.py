"""Checkpoints to and from S3, never torn.

Layout. Megatron (and therefore Miles) saves into ``--save``::

    <local_dir>/latest_checkpointed_iteration.txt          # written after a save completes
    <local_dir>/iter_0000020/...                            # one directory per save
    <local_dir>/rollout/global_dataset_state_dict_20.pt     # Miles' data-cursor for that save

S3 mirrors the same relative paths under the run's prefix, plus one manifest per
checkpoint, written last::

    s3://bucket/prefix/iter_0000020/...                      # every file of the save
    s3://bucket/prefix/rollout/global_dataset_state_dict_20.pt
    s3://bucket/prefix/iter_0000020/_COMPLETE.json           # files, sizes, sha256

A checkpoint exists in S3 only once its ``_COMPLETE.json`` does. An upload that dies
half way leaves files but no manifest, so restore never sees it and falls back to
the newest checkpoint that does have one. A restore verifies every file's size and
sha256 before it writes Megatron's tracker file, so a restore that dies half way
leaves the tracker pointing where it pointed before.

Megatron writes ``latest_checkpointed_iteration.txt`` only after a save has finished
(for async saves, after finalization), so an ``iter_N`` directory with ``N <= tracker``
is complete and safe to upload; one above the tracker is still being written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, TextIO

from .config import parse_s3_uri

TRACKER_FILE = "latest_checkpointed_iteration.txt"
MANIFEST_NAME = "_COMPLETE.json"
MANIFEST_FORMAT = "rltrainer.checkpoint/v1"
_ITER_DIR = re.compile(r"^iter_(\d{7})$")
_MANIFEST_KEY = re.compile(r"iter_(\d{7})/" + re.escape(MANIFEST_NAME) + r"$")

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


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the checkpoint root (local_dir / S3 prefix), POSIX separators
    size: int
    sha256: str


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
            "files": [asdict(f) for f in self.files],
        }
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        body = json.loads(text)
        if body.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {body.get('format')!r}")
        files = []
        for f in body["files"]:
            path = str(f["path"])
            _check_relpath(path)
            files.append(FileEntry(path=path, size=int(f["size"]), sha256=str(f["sha256"])))
        return cls(iteration=int(body["iteration"]), files=tuple(files), created_at=str(body.get("created_at", "")))


def _check_relpath(path: str) -> None:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"unsafe path in checkpoint manifest: {path!r}")


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                return h.hexdigest()
            h.update(block)


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


class IncompleteCheckpoint(RuntimeError):
    """A save whose shard files are not all visible from this node."""


def missing_shards(iter_dir: str | Path) -> list[str] | None:
    """Shard files a torch_dist save references but this node cannot see.

    Megatron's torch_dist format (torch.distributed.checkpoint) writes one
    ``__<rank>_<n>.distcp`` per writer and a ``.metadata`` file that lists every one.
    On a multi-node run the launcher (on the Ray head) only sees other nodes' shards if
    ``--save`` is on shared storage; uploading without them would publish a torn
    checkpoint. Returns None when there is nothing to verify against (no ``.metadata``,
    no torch, or a format this torch cannot read).
    """
    iter_dir = Path(iter_dir)
    if not (iter_dir / ".metadata").is_file():
        return None
    try:
        import torch.distributed.checkpoint as dcp

        metadata = dcp.FileSystemReader(str(iter_dir)).read_metadata()
        referenced = {info.relative_path for info in metadata.storage_data.values()}
    except Exception as exc:  # noqa: BLE001 - unverifiable is not the same as torn
        print(f"rltrainer: cannot read {iter_dir / '.metadata'} to verify shards ({exc}); uploading what is here",
              file=sys.stderr)
        return None
    return sorted(rel for rel in referenced if not (iter_dir / rel).is_file())


# ---------------------------------------------------------------------------- S3 store


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

            # 64 MiB parts: Megatron shards are hundreds of MiB to GiBs each.
            transfer_config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=8)
        self.transfer_config = transfer_config

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, relpath: str) -> str:
        return self.prefix + relpath

    def manifest_key(self, iteration: int) -> str:
        return self.key(f"{iter_dirname(iteration)}/{MANIFEST_NAME}")

    # -- listing

    def list_complete(self) -> list[int]:
        """Iterations whose manifest exists, ascending (manifests are not parsed here)."""

        def _list() -> list[int]:
            found: list[int] = []
            token = None
            while True:
                kwargs = {"Bucket": self.bucket, "Prefix": self.key("iter_")}
                if token:
                    kwargs["ContinuationToken"] = token
                page = self.client.list_objects_v2(**kwargs)
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix):]
                    m = _MANIFEST_KEY.fullmatch(rel)
                    if m:
                        found.append(int(m.group(1)))
                if not page.get("IsTruncated"):
                    return sorted(found)
                token = page.get("NextContinuationToken")

        return self.retry.call(f"list {self.uri}", _list)

    def is_complete(self, iteration: int) -> bool:
        return iteration in self.list_complete()

    def read_manifest(self, iteration: int) -> Manifest:
        def _get() -> str:
            resp = self.client.get_object(Bucket=self.bucket, Key=self.manifest_key(iteration))
            return resp["Body"].read().decode("utf-8")

        manifest = Manifest.from_json(self.retry.call(f"read manifest of {iter_dirname(iteration)}", _get))
        if manifest.iteration != iteration:
            raise ValueError(f"manifest at {self.manifest_key(iteration)} says iteration {manifest.iteration}")
        return manifest

    def newest_complete(self) -> Manifest | None:
        """The newest checkpoint with a readable manifest; skips unreadable ones."""
        for iteration in reversed(self.list_complete()):
            try:
                return self.read_manifest(iteration)
            except (ValueError, KeyError) as exc:
                print(f"rltrainer: ignoring checkpoint {iter_dirname(iteration)}: bad manifest ({exc})",
                      file=self.progress_stream or sys.stderr, flush=True)
        return None

    # -- upload

    def upload(self, local_dir: str | Path, iteration: int) -> Manifest:
        """Upload one finished save, then mark it complete by writing its manifest last."""
        root = Path(local_dir)
        missing = missing_shards(root / iter_dirname(iteration))
        if missing:
            raise IncompleteCheckpoint(
                f"{root / iter_dirname(iteration)} lacks {len(missing)} shard(s) its .metadata lists "
                f"(e.g. {missing[0]}); on a multi-node run checkpoint.local_dir must be storage every node "
                "writes to (e.g. FSx for Lustre), or the saves of the other nodes never reach S3"
            )
        rels = checkpoint_files(root, iteration)
        entries = []
        for rel in rels:
            path = root / rel
            entries.append(FileEntry(path=rel, size=path.stat().st_size, sha256=sha256_file(path)))
        manifest = Manifest(
            iteration=iteration,
            files=tuple(entries),
            created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        progress = Progress(f"upload {iter_dirname(iteration)} to {self.uri}", manifest.total_bytes,
                            self.progress_stream, self.progress_interval_s)
        for entry in entries:
            self._upload_file(root / entry.path, self.key(entry.path), progress)
        progress.finish()

        body = manifest.to_json().encode("utf-8")
        self.retry.call(
            f"write manifest of {iter_dirname(iteration)}",
            lambda: self.client.put_object(Bucket=self.bucket, Key=self.manifest_key(iteration), Body=body,
                                           ContentType="application/json"),
        )
        return manifest

    def _upload_file(self, path: Path, key: str, progress: Progress) -> None:
        sent = [0]

        def callback(n: int) -> None:
            sent[0] += n
            progress(n)

        def attempt() -> None:
            progress.rewind(sent[0])
            sent[0] = 0
            self.client.upload_file(str(path), self.bucket, key, Callback=callback, Config=self.transfer_config)

        self.retry.call(f"upload {path} to s3://{self.bucket}/{key}", attempt)

    # -- restore

    def restore(self, manifest: Manifest, local_dir: str | Path) -> None:
        """Download and verify every file of ``manifest``, then point the tracker at it."""
        root = Path(local_dir)
        root.mkdir(parents=True, exist_ok=True)
        progress = Progress(f"restore {iter_dirname(manifest.iteration)} from {self.uri}", manifest.total_bytes,
                            self.progress_stream, self.progress_interval_s)
        for entry in manifest.files:
            dest = root / entry.path
            if dest.is_file() and dest.stat().st_size == entry.size and sha256_file(dest) == entry.sha256:
                progress(entry.size)  # already here and intact (e.g. a restart on the same volume)
                continue
            self._download_file(self.key(entry.path), dest, entry, progress)
        progress.finish()
        write_tracker(root, manifest.iteration)

    def _download_file(self, key: str, dest: Path, entry: FileEntry, progress: Progress) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.partial")
        got = [0]

        def callback(n: int) -> None:
            got[0] += n
            progress(n)

        def attempt() -> None:
            progress.rewind(got[0])
            got[0] = 0
            self.client.download_file(self.bucket, key, str(tmp), Callback=callback, Config=self.transfer_config)

        self.retry.call(f"download s3://{self.bucket}/{key}", attempt)
        size = tmp.stat().st_size
        digest = sha256_file(tmp)
        if size != entry.size or digest != entry.sha256:
            tmp.unlink(missing_ok=True)
            raise IOError(
                f"s3://{self.bucket}/{key} does not match its manifest: "
                f"size {size} (expected {entry.size}), sha256 {digest} (expected {entry.sha256})"
            )
        os.replace(tmp, dest)


# ------------------------------------------------------------------- resume and watch


@dataclass
class ResumeResult:
    iteration: int | None
    source: str  # "s3", "local", or "fresh"
    uploaded: list[int] = field(default_factory=list)


def prepare_resume(store: S3CheckpointStore, local_dir: str | Path, log: TextIO | None = None) -> ResumeResult:
    """Make ``local_dir`` hold the newest complete checkpoint before training starts.

    1. A local save the tracker points at is complete (Megatron wrote the tracker after
       it); if S3 lacks it (the previous pod died mid-upload), upload it now.
    2. If S3 has a newer complete checkpoint than the local tracker (a fresh volume, or
       another pod trained further), download it and point the tracker at it.
    3. Otherwise start from what is local, or fresh from the reference weights.
    """
    out = log or sys.stderr
    root = Path(local_dir)
    root.mkdir(parents=True, exist_ok=True)
    uploaded: list[int] = []
    local = read_tracker(root)
    if local is not None and not (root / iter_dirname(local)).is_dir():
        print(f"rltrainer: tracker points at {iter_dirname(local)} but the directory is missing; ignoring it", file=out)
        local = None
    complete = store.list_complete()
    if local is not None and local not in complete:
        print(f"rltrainer: local {iter_dirname(local)} is complete but not in S3; uploading it before training", file=out)
        store.upload(root, local)
        uploaded.append(local)
        complete.append(local)
    newest = store.newest_complete()
    if newest is not None and (local is None or newest.iteration > local):
        print(f"rltrainer: restoring {iter_dirname(newest.iteration)} from {store.uri}", file=out)
        store.restore(newest, root)
        return ResumeResult(newest.iteration, "s3", uploaded)
    if local is not None:
        print(f"rltrainer: resuming from local {iter_dirname(local)}", file=out)
        return ResumeResult(local, "local", uploaded)
    print(f"rltrainer: no complete checkpoint in {store.uri}; starting from the reference weights", file=out)
    return ResumeResult(None, "fresh", uploaded)


class CheckpointWatcher:
    """Uploads every save Megatron finishes, from a background thread.

    A failed upload is logged and retried on the next scan; it never stops training.
    """

    def __init__(self, store: S3CheckpointStore, local_dir: str | Path, interval_s: float = 30.0,
                 log: TextIO | None = None):
        self.store = store
        self.local_dir = Path(local_dir)
        self.interval_s = interval_s
        self.log = log or sys.stderr
        self.uploaded: list[int] = []
        self.failures: list[tuple[int, str]] = []
        self._known: set[int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scan_lock = threading.Lock()

    def scan_once(self) -> list[int]:
        """Upload finished saves that S3 does not have yet; returns what it uploaded."""
        with self._scan_lock:
            tracker = read_tracker(self.local_dir)
            if tracker is None:
                return []
            if self._known is None:
                self._known = set(self.store.list_complete())
            done_now = []
            for iteration in local_iterations(self.local_dir):
                if iteration > tracker or iteration in self._known:
                    continue  # still being written, or already in S3
                try:
                    self.store.upload(self.local_dir, iteration)
                except Exception as exc:  # noqa: BLE001 - keep training; retry next scan
                    self.failures.append((iteration, str(exc)))
                    print(f"rltrainer: upload of {iter_dirname(iteration)} failed, will retry: {exc}",
                          file=self.log, flush=True)
                    continue
                self._known.add(iteration)
                self.uploaded.append(iteration)
                done_now.append(iteration)
                print(f"rltrainer: {iter_dirname(iteration)} is complete in {self.store.uri}", file=self.log, flush=True)
            return done_now

    def pending(self) -> list[int]:
        """Finished saves (at or below the tracker) that are not complete in S3 yet."""
        tracker = read_tracker(self.local_dir)
        if tracker is None:
            return []
        known = self._known if self._known is not None else set(self.store.list_complete())
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

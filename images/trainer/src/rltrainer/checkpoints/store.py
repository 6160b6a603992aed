"""The S3 side: list, upload, restore and quarantine checkpoints under one run's prefix."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from ..contract import parse_s3_uri
from .layout import (CHECKSUM_ALGORITHM, ITER_DIR, MANIFEST_NAME, MARKER_KEY, QUARANTINE_MARKER, SHARDS_DELIMITER,
                     STAGING_DIR, iter_dirname)
from .local import check_local_save, stamp, write_tracker
from .manifest import (
    CorruptCheckpoint,
    FileEntry,
    IncompleteCheckpoint,
    Manifest,
    ManifestError,
    NewerManifestFormat,
    entry_matches,
)
from .progress import Progress
from .retry import RetryPolicy
from .s3_delete import S3Deletion, error_code as _error_code, missing as _missing


@dataclass(frozen=True)
class UploadResult:
    """What ``upload`` did: ``uploaded``, or skipped because S3 already has it complete / quarantined."""

    iteration: int
    status: str  # "uploaded", "already-complete", "quarantined"
    manifest: Manifest | None = None


def _pinned_version(head: dict) -> str | None:
    """The VersionId a manifest pins: S3 returns one on a versioned bucket, and "null" for an
    object put while versioning was off or suspended, which a later put overwrites in place
    (nothing to pin). Upload and publish compare through this one reading."""
    version = head.get("VersionId")
    return version if version and version != "null" else None




class S3CheckpointStore(S3Deletion):
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
        self._fold_shards = True  # False once the store is found not to apply SHARDS_DELIMITER (``_saves``)

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

    def _list_pages(self, what: str, **kwargs: Any) -> list[dict]:
        """Every page of one ListObjectsV2 listing (retried as a whole)."""
        def _list() -> list[dict]:
            pages: list[dict] = []
            token = None
            while True:
                more = {"ContinuationToken": token} if token else {}
                pages.append(self.client.list_objects_v2(Bucket=self.bucket, **kwargs, **more))
                if not pages[-1].get("IsTruncated"):
                    return pages
                token = pages[-1].get("NextContinuationToken")

        return self.retry.call(what, _list)

    def _saves(self) -> tuple[set[int], set[int], set[int]]:
        """The iterations under the run prefix: (with any object, with a manifest, with a
        quarantine marker), from one listing of ``iter_``.

        A plain listing returned every object of every save: a week of saves of hundreds to
        thousands of torch_dist shards each is tens of thousands of keys, listed in full by each
        resume and each ``rltrainer checkpoint list``. With ``SHARDS_DELIMITER`` S3 rolls each
        save's shards into one CommonPrefix, ``iter_N/__``, and returns as keys only the markers
        and the few other files of a save (``.metadata``, ``common.pt``, ``metadata.json``): the
        listing grows with the number of saves, not their size. A store that does not apply the
        delimiter as asked (refuses it, or rolls up at another string) gets the plain listing,
        once said: markers rolled into a prefix would otherwise read as no save at all."""
        from botocore.exceptions import ClientError

        prefix = self.key("iter_")
        pages, folded = None, []
        if self._fold_shards:
            try:
                pages = self._list_pages(f"list {self.uri}", Prefix=prefix, Delimiter=SHARDS_DELIMITER)
                folded = [c["Prefix"] for page in pages for c in page.get("CommonPrefixes", [])]
            except ClientError as exc:
                if _error_code(exc) not in ("InvalidArgument", "NotImplemented", "400", "501"):
                    raise
                why = f"refused it ({_error_code(exc)})"
            else:
                odd = [p for p in folded if not p.endswith(SHARDS_DELIMITER)]
                why = f"rolled keys up at {odd[0]!r}" if odd else ""
            if why:
                self._log(f"listing {self.uri} with the delimiter {SHARDS_DELIMITER!r}: the store {why}; "
                          "listing every object instead (slower as the run's saves add up)")
                self._fold_shards, pages, folded = False, None, []
        if pages is None:
            pages = self._list_pages(f"list {self.uri}", Prefix=prefix)
        present: set[int] = set()
        manifests: set[int] = set()
        quarantined: set[int] = set()
        for key in [obj["Key"] for page in pages for obj in page.get("Contents", [])] + folded:
            rel = key[len(self.prefix):]
            top, slash, _rest = rel.partition("/")
            if slash and (m := ITER_DIR.fullmatch(top)):
                present.add(int(m.group(1)))
            if m := MARKER_KEY.fullmatch(rel):
                (manifests if m.group(2) == MANIFEST_NAME else quarantined).add(int(m.group(1)))
        return present, manifests, quarantined

    def _markers(self) -> tuple[set[int], set[int]]:
        """(iterations with a manifest, iterations with a quarantine marker)."""
        return self._saves()[1:]

    def list_complete(self) -> list[int]:
        """Iterations with a manifest and no quarantine marker, ascending (manifests not parsed here)."""
        manifests, quarantined = self._markers()
        return sorted(manifests - quarantined)

    def list_quarantined(self) -> list[int]:
        return sorted(self._markers()[1])

    def is_complete(self, iteration: int) -> bool:
        names = self._markers_of(iteration)
        return MANIFEST_NAME in names and QUARANTINE_MARKER not in names

    def _markers_of(self, iteration: int) -> set[str]:
        """The marker names S3 holds for ``iteration``, from one LIST whatever the save's size.

        A plain LIST of ``iter_N/_`` also returned every torch_dist shard uploaded so far
        (``__<rank>_<n>.distcp``, megatron-lm 37f9161 dist_checkpointing/strategies/
        filesystem_async.py ``_StoragePrefix``), up to 1,000 keys. With "_" as the delimiter S3
        lists the markers (no "_" after the prefix) and rolls all those shards into one
        CommonPrefix, ``iter_N/__``. Not HeadObject: for a missing key S3 answers 404 only to a
        caller allowed s3:ListBucket, which the kit grants under an s3:prefix condition
        (infra/constructs/trainer_identity.py) that only a LIST request carries, so the HEAD of
        an absent marker would be refused (403)."""
        prefix = self.key(f"{iter_dirname(iteration)}/_")
        return {obj["Key"][len(prefix) - 1:]
                for page in self._list_pages(f"list {self.uri}{iter_dirname(iteration)}/", Prefix=prefix,
                                             Delimiter="_")
                for obj in page.get("Contents", [])}

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
            except NewerManifestFormat:
                raise  # a newer image's save: never quarantined
            except ManifestError as exc:
                self.quarantine(iteration, f"malformed manifest: {exc}")
        return None

    def quarantine(self, iteration: int, reason: str) -> None:
        """Mark a checkpoint bad (nothing is deleted; remove the marker to undo)."""
        from botocore.exceptions import ClientError

        body = json.dumps({"iteration": iteration, "reason": reason, "at": stamp()}, indent=2).encode()
        self._log(f"quarantining {iter_dirname(iteration)} in {self.uri}: {reason}")
        try:
            self.retry.call(f"quarantine {iter_dirname(iteration)}", lambda: self.client.put_object(
                Bucket=self.bucket, Key=self.quarantine_key(iteration), Body=body,
                ContentType="application/json", IfNoneMatch="*"))
        except ClientError as exc:
            if _error_code(exc) not in ("PreconditionFailed", "412"):
                raise  # 412: somebody quarantined it already

    # -- upload

    def upload(self, local_dir: str | Path, iteration: int, *, uploaders: int = 1,
               run_parts: Callable[[list[Callable[[], Any]]], list[Any]] | None = None) -> UploadResult:
        """Upload one finished save, then mark it complete by writing its manifest last.

        Never writes to an iteration that S3 already has complete (or quarantined): that is a
        second, stale writer, and it skips.

        ``uploaders`` > 1 splits the files into that many parts of about equal bytes
        (``parallel.partition``) and hands one task per part to ``run_parts`` (default: threads
        in this process; a caller may run them elsewhere, e.g. on other nodes that see the same
        file system). Every part finishes before the manifest is written; a part that fails
        fails the upload and publishes nothing.
        """
        from .parallel import partition, run_in_threads

        root = Path(local_dir)
        rels = check_local_save(root, iteration, require_data_cursor=self.require_data_cursor)
        skip = self._skip_reason(iteration)
        if skip:
            return skip
        sizes = {rel: (root / rel).stat().st_size for rel in rels}
        progress = Progress(f"upload {iter_dirname(iteration)} to {self.uri}", sum(sizes.values()),
                            self.progress_stream, self.progress_interval_s)
        parts = partition(sizes, uploaders)
        present = self._sizes_under(iteration)  # what an upload of this save cut short left there
        tasks = [functools.partial(self.upload_files, root, iteration, part, progress, present) for part in parts]
        results = (run_parts or run_in_threads)(tasks) if len(tasks) > 1 else [t() for t in tasks]
        skipped = [r for r in results if isinstance(r, UploadResult)]
        if skipped:
            return skipped[0]
        by_path = {e.path: e for part in results for e in part}
        progress.finish()
        return self.publish(iteration, [by_path[rel] for rel in rels])

    def upload_files(self, root: Path, iteration: int, rels: list[str], progress: Progress | None = None,
                     present: dict[str, int] | None = None) -> list[FileEntry] | UploadResult:
        """Upload ``rels`` of one save (one part of it): their manifest entries, or the
        ``UploadResult`` of a skip when another writer completed or quarantined the iteration.
        A file S3 already holds with the same size and checksum (``present``: an upload of this
        save that was cut short) is not uploaded again."""
        progress = progress or Progress(f"upload part of {iter_dirname(iteration)}", 0, None, 1e9)
        entries, reused = [], []
        for rel in rels:
            skip = self._skip_reason(iteration)  # another writer may have finished it meanwhile
            if skip:
                return skip
            size = (root / rel).stat().st_size
            entry = self._already_there(root / rel, rel, size) if (present or {}).get(rel) == size else None
            if entry is not None:
                progress(size)
                reused.append(size)
            else:
                entry = self._upload_file(root / rel, rel, size, progress)
            entries.append(entry)
        if reused:
            self._log(f"{len(reused)} file(s) of {iter_dirname(iteration)} ({sum(reused) / 2**30:.1f} GiB) were "
                      "already in S3 from an upload cut short, with the same checksum: not uploaded again")
        return entries

    def publish(self, iteration: int, entries: list[FileEntry]) -> UploadResult:
        """Write the manifest of ``entries`` (every file already uploaded): last, and only if
        every object is still what was uploaded and no other writer completed the iteration."""
        from botocore.exceptions import ClientError

        # The manifest names the objects as they are now: if a concurrent writer replaced one
        # while we uploaded the rest, do not publish a mix. On a versioned bucket the manifest
        # also pins each object's version, so a writer that comes after it changes nothing.
        for entry in entries:
            head = self._head(self.key(entry.path))
            now = (*self._size_and_crc(head), _pinned_version(head))
            if now != (entry.size, entry.crc32, entry.version_id):
                skip = self._skip_reason(iteration)
                if skip:
                    return skip
                raise IncompleteCheckpoint(f"s3://{self.bucket}/{self.key(entry.path)} changed during the upload "
                                           f"of {iter_dirname(iteration)} (another writer?); not publishing it")
        manifest = Manifest.of(iteration, tuple(entries), created_at=stamp())
        body = manifest.to_json().encode("utf-8")
        try:
            self.retry.call(
                f"write manifest of {iter_dirname(iteration)}",
                lambda: self.client.put_object(Bucket=self.bucket, Key=self.manifest_key(iteration), Body=body,
                                               ContentType="application/json", IfNoneMatch="*"),
            )
        except ClientError as exc:
            if _error_code(exc) not in ("PreconditionFailed", "412"):
                raise
            if self._holds(iteration, manifest):  # ours: the PUT landed, its answer was lost
                return UploadResult(iteration, "uploaded", manifest)
            self._log(f"{iter_dirname(iteration)} was completed by another writer first; keeping theirs")
            return UploadResult(iteration, "already-complete")
        return UploadResult(iteration, "uploaded", manifest)

    def _holds(self, iteration: int, manifest: Manifest) -> bool:
        """Whether S3's manifest of ``iteration`` is ``manifest`` (its creation stamp included):
        a retried PUT whose first try landed gets 412 from its own manifest."""
        try:
            return self.read_manifest(iteration) == manifest
        except ManifestError:
            return False

    def _skip_reason(self, iteration: int) -> UploadResult | None:
        """Skip an iteration S3 already has complete or quarantined: a second, stale writer must
        not overwrite the objects a published manifest names (checked before every file, since
        another writer may finish the iteration meanwhile, and before publishing).

        Run once per file, so it must not grow with the save (``_markers_of``)."""
        names = self._markers_of(iteration)
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

    def _objects_under(self, prefix: str) -> dict[str, int]:
        """Key -> size of every object under ``prefix``."""
        return {obj["Key"]: int(obj["Size"])
                for page in self._list_pages(f"list s3://{self.bucket}/{prefix}", Prefix=prefix)
                for obj in page.get("Contents", [])}

    def _sizes_under(self, iteration: int) -> dict[str, int]:
        """Size of every object under the save's directory, by path relative to the run prefix."""
        return {key[len(self.prefix):]: size
                for key, size in self._objects_under(self.key(f"{iter_dirname(iteration)}/")).items()}

    def _entry_of(self, rel: str, size: int, head: dict) -> FileEntry:
        # S3 says which kind of checksum it kept; without that (moto), the part size decides
        part_size = 0 if head.get("ChecksumType") == "FULL_OBJECT" else self._part_size(size)
        return FileEntry(path=rel, size=size, crc32=self._size_and_crc(head)[1], part_size=part_size,
                         version_id=_pinned_version(head))

    def _already_there(self, path: Path, rel: str, size: int) -> FileEntry | None:
        """The entry of the object S3 holds for ``rel`` when it is this very file (size and CRC32
        at this store's part size); None when it is not, or cannot be told."""
        head = self._head(self.key(rel))
        got_size, crc = self._size_and_crc(head)
        if got_size != size or not crc:
            return None
        entry = self._entry_of(rel, size, head)
        return entry if entry_matches(path, entry) else None

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
        return self._entry_of(rel, size, head)

    # -- restore

    def restore(self, manifest: Manifest, local_dir: str | Path) -> None:
        """Download and verify every file of ``manifest``, move them into place, then point the tracker at it.

        ``CorruptCheckpoint`` if a file is missing in S3 or does not match (after one re-download).
        A restore that fails (S3 reads that keep failing) leaves the files it verified in the
        staging directory, and the next restore uses each one that still matches its entry,
        instead of downloading the whole save again.
        """
        root = Path(local_dir)
        root.mkdir(parents=True, exist_ok=True)
        staging = root / STAGING_DIR
        _clear_staging(staging, keep={entry.path for entry in manifest.files})
        progress = Progress(f"restore {iter_dirname(manifest.iteration)} from {self.uri}", manifest.total_bytes,
                            self.progress_stream, self.progress_interval_s)
        staged: list[tuple[Path, Path]] = []
        kept: list[int] = []
        for entry in manifest.files:
            dest = root / entry.path
            if entry_matches(dest, entry):
                progress(entry.size)  # already here and intact (e.g. a restart on the same volume)
                continue
            tmp = staging / entry.path
            if entry_matches(tmp, entry):  # size and checksum, as after a download
                progress(entry.size)
                kept.append(entry.size)
            else:
                self._download_verified(entry, tmp, progress)
            staged.append((tmp, dest))
        progress.finish()
        if kept:
            self._log(f"{len(kept)} file(s) of {iter_dirname(manifest.iteration)} ({sum(kept) / 2**30:.1f} GiB) were "
                      "staged and verified by an earlier restore: not downloaded again")
        for tmp, dest in staged:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
        shutil.rmtree(staging, ignore_errors=True)
        write_tracker(root, manifest.iteration)

    def _download_verified(self, entry: FileEntry, tmp: Path, progress: Progress) -> None:
        from botocore.exceptions import ClientError

        key = self.key(entry.path)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        # exactly the version the manifest recorded (v3), not whatever the key holds now
        version = entry.version_id
        for attempt_no in (1, 2):  # a mismatch may be a bad transfer: fetch once more before calling it corrupt
            got = [0]

            def callback(n: int) -> None:
                got[0] += n
                progress(n)

            def attempt() -> None:
                progress.rewind(got[0])
                got[0] = 0
                extra = {"VersionId": version} if version else None
                self.client.download_file(self.bucket, key, str(tmp), ExtraArgs=extra, Callback=callback,
                                          Config=self.transfer_config)

            def fetch() -> None:
                nonlocal version
                try:
                    self.retry.call(f"download s3://{self.bucket}/{key}", attempt)
                except ClientError as exc:
                    if not _missing(exc):
                        raise
                    if not version:
                        gone = f" (version {entry.version_id}) is missing, and so is the current object" \
                            if entry.version_id else " is missing"
                        raise CorruptCheckpoint(f"s3://{self.bucket}/{key}{gone}") from None
                    # The pinned version is gone while the key may still hold the same file: a
                    # second writer's late put of it made the pinned version noncurrent, and the
                    # bucket's lifecycle rule (NoncurrentVersionExpiration,
                    # storage.noncurrent_version_days) removed it. The current object is taken only
                    # if it passes the same size and CRC32 check against the manifest entry as the
                    # pinned version would have.
                    self._log(f"version {version} of s3://{self.bucket}/{key} is gone; restoring the current "
                              "object, kept only if its size and checksum match the manifest")
                    version = None
                    fetch()

            fetch()
            if entry_matches(tmp, entry):
                return
            progress.rewind(got[0])
        size = tmp.stat().st_size
        tmp.unlink(missing_ok=True)
        what = f" (the current object; version {entry.version_id} is gone)" if entry.version_id and not version else ""
        raise CorruptCheckpoint(
            f"s3://{self.bucket}/{key}{what} does not match its manifest: size {size} (expected {entry.size}), "
            f"{'sha256' if entry.sha256 else 'crc32'} differs")


def _clear_staging(staging: Path, keep: set[str]) -> None:
    """Delete what the staging directory holds except the files at the relative paths ``keep``
    (the save being restored): an earlier restore of another save, or a download's temporary file."""
    if not staging.is_dir():
        return
    for dirpath, _dirs, files in os.walk(staging, topdown=False):
        for name in files:
            path = Path(dirpath) / name
            if path.relative_to(staging).as_posix() not in keep:
                path.unlink(missing_ok=True)
        if dirpath != str(staging):
            try:
                os.rmdir(dirpath)  # only once empty
            except OSError:
                pass

"""The manifest written last beside each checkpoint in S3 (``_COMPLETE.json``), and the
checksums it records."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .layout import (
    LEGACY_MANIFEST_FORMAT,
    MANIFEST_FORMAT,
    VERSIONED_MANIFEST_FORMAT,
    iter_dirname,
    rollout_state_relpath,
)


class ManifestError(ValueError):
    """A manifest that does not follow the schema; the checkpoint is not restorable."""


class NewerManifestFormat(ManifestError):
    """A manifest of a format newer than this rltrainer reads: written by a newer image. The save may
    be whole, so it is neither restored nor quarantined (a quarantine marker is permanent, and would
    also hide the save from the image that wrote it)."""


# "rltrainer.checkpoint/v<N>": the formats are numbered, so a larger N is a newer writer's.
_FORMAT_NUMBER = re.compile(r"rltrainer\.checkpoint/v(\d+)")


def _format_number(fmt: object) -> int | None:
    m = _FORMAT_NUMBER.fullmatch(fmt) if isinstance(fmt, str) else None
    return int(m.group(1)) if m else None


class CorruptCheckpoint(IOError):
    """A file of a complete checkpoint is missing from S3 or does not match its manifest."""


class IncompleteCheckpoint(RuntimeError):
    """A local save that is not whole yet (or never will be): it is not uploaded."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint.

    ``crc32`` is S3's base64 CRC32 of the object (``part_size == 0``: single-part upload, the
    CRC32 of the whole file; otherwise the CRC32 of the CRC32s of ``part_size``-byte parts).
    ``sha256`` is set instead only in legacy v1 manifests. ``version_id`` is the S3 VersionId
    of the object the upload wrote (v3 manifests; None where the bucket kept no version).
    """

    path: str  # relative to the checkpoint root (local_dir / S3 prefix), POSIX separators
    size: int
    crc32: str = ""
    part_size: int = 0
    sha256: str = ""
    version_id: str | None = None

    def to_json(self, versioned: bool = False) -> dict:
        if self.sha256:
            return {"path": self.path, "size": self.size, "sha256": self.sha256}
        body = {"path": self.path, "size": self.size, "crc32": self.crc32, "part_size": self.part_size}
        if versioned:
            body["version_id"] = self.version_id
        return body


_V2_FILE_KEYS = frozenset({"path", "size", "crc32", "part_size"})
_V3_FILE_KEYS = _V2_FILE_KEYS | {"version_id"}
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

    @classmethod
    def of(cls, iteration: int, files: tuple[FileEntry, ...], created_at: str = "") -> "Manifest":
        """A new manifest: v3 (versions pinned) when S3 returned a VersionId for any file, else v2."""
        fmt = VERSIONED_MANIFEST_FORMAT if any(f.version_id for f in files) else MANIFEST_FORMAT
        return cls(iteration=iteration, files=files, created_at=created_at, format=fmt)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        versioned = self.format == VERSIONED_MANIFEST_FORMAT
        body = {
            "format": self.format,
            "iteration": self.iteration,
            "created_at": self.created_at,
            "total_bytes": self.total_bytes,
            "files": [f.to_json(versioned) for f in self.files],
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
        newest = _format_number(VERSIONED_MANIFEST_FORMAT)
        if (_format_number(body.get("format")) or 0) > newest:
            raise NewerManifestFormat(
                f"{where}: format {body['format']!r} was written by a newer rltrainer than this image's, "
                f"which reads up to {VERSIONED_MANIFEST_FORMAT!r}; the save is neither restored nor "
                "quarantined. Run the image that wrote it (or a newer one), or move that save aside by "
                "hand if this run must start from an older one")
        missing = sorted(_TOP_REQUIRED - body.keys())
        unknown = sorted(body.keys() - _TOP_REQUIRED - _TOP_OPTIONAL)
        if missing or unknown:
            raise ManifestError(f"{where}: missing keys {missing}, unknown keys {unknown}")
        fmt = body["format"]
        if fmt not in (VERSIONED_MANIFEST_FORMAT, MANIFEST_FORMAT, LEGACY_MANIFEST_FORMAT):
            raise ManifestError(f"{where}: format {fmt!r} is not {VERSIONED_MANIFEST_FORMAT!r} or {MANIFEST_FORMAT!r}")
        iteration = body["iteration"]
        if not _is_int(iteration) or iteration < 0:
            raise ManifestError(f"{where}: iteration must be a non-negative integer, got {iteration!r}")
        created_at = body.get("created_at", "")
        if not isinstance(created_at, str):
            raise ManifestError(f"{where}: created_at must be a string, got {created_at!r}")
        files = body["files"]
        if not isinstance(files, list) or not files:
            raise ManifestError(f"{where}: files must be a non-empty list, got {files!r}"[:300])
        wanted_keys = {VERSIONED_MANIFEST_FORMAT: _V3_FILE_KEYS, MANIFEST_FORMAT: _V2_FILE_KEYS}.get(fmt, _V1_FILE_KEYS)
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
            if fmt != LEGACY_MANIFEST_FORMAT:
                if not _crc32_ok(f["crc32"]):
                    raise ManifestError(f"{label}.crc32 must be a base64 CRC32 (4 bytes), got {f['crc32']!r}")
                if not _is_int(f["part_size"]) or f["part_size"] < 0:
                    raise ManifestError(f"{label}.part_size must be a non-negative integer, got {f['part_size']!r}")
                version = f.get("version_id")
                if version is not None and (not isinstance(version, str) or not version):
                    raise ManifestError(f"{label}.version_id must be an S3 VersionId or null, got {version!r}")
                entries.append(FileEntry(path=path, size=size, crc32=f["crc32"], part_size=f["part_size"],
                                         version_id=version))
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

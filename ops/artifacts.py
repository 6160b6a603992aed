"""Where the pinned external artifacts are (charts, CRDs, upstream sources), and whether they are
the locked ones: one locator for `rlkit check`, `rlkit validate`/`render` and the tests.

The lock (``artifacts.lock.json`` at the repository root) names every chart archive, CRD directory
and upstream source tree the kit checks against, with its source URL and checksum. An artifact is
looked for in ``../shared`` beside the repository (this project's CI), then in the cache that
``scripts/fetch_artifacts.py`` fills: ``$RLKIT_ARTIFACTS``, else ``$XDG_CACHE_HOME/rlkit/artifacts``,
else ``~/.cache/rlkit/artifacts``. ``locate`` accepts a copy only when it matches the lock.

Checksums: a chart archive is locked by the sha256 of its file and by a content digest over the
files inside it (an archive downloaded from a chart repository has other tar and gzip metadata
than one packaged locally from the same sources); a directory by a tree digest: sha256 over
``"<relative path>\\0<sha256 of file>\\n"`` for every file, sorted by path.

Standard library only: ``scripts/fetch_artifacts.py`` imports it (through tests/support) with no
kit dependencies installed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = REPO_ROOT / "artifacts.lock.json"
SHARED = REPO_ROOT.parent / "shared"
FETCH_SCRIPT = "scripts/fetch_artifacts.py"
FETCH_HINT = f"run `python {FETCH_SCRIPT}` (downloads and verifies every locked artifact)"
CACHE_ENV = "RLKIT_ARTIFACTS"


def cache_root() -> Path:
    """The local cache ``scripts/fetch_artifacts.py`` fills."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlkit" / "artifacts"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest_of(files: dict[str, str]) -> str:
    """Tree digest of ``{relative path: sha256 of its bytes}``."""
    lines = "".join(f"{rel}\0{files[rel]}\n" for rel in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def tree_files(root: Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every regular file under ``root``."""
    return {p.relative_to(root).as_posix(): file_sha256(p)
            for p in sorted(root.rglob("*")) if p.is_file()}


def tree_digest(root: Path) -> str:
    """Tree digest of every file under ``root`` (see the module docstring)."""
    return digest_of(tree_files(root))


def archive_files(data: bytes) -> dict[str, str]:
    """``{member path: sha256}`` of the regular files in a .tgz (a chart archive)."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            if member.isfile():
                files[member.name] = hashlib.sha256(tar.extractfile(member).read()).hexdigest()
    return files


def load_lock(path: Path = LOCK_FILE) -> dict:
    return json.loads(path.read_text())


def entries(lock: dict | None = None) -> dict[str, dict]:
    """Locked artifacts by name."""
    lock = lock if lock is not None else load_lock()
    return {e["name"]: e for e in lock["artifacts"]}


def problems(entry: dict, path: Path) -> list[str]:
    """What differs between the artifact at ``path`` and its lock entry (empty: it matches)."""
    if not path.exists():
        return [f"{entry['name']}: missing ({path})"]
    if entry["kind"] == "chart":
        found = []
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            found.append(f"{entry['name']}: sha256 of {path} is {hashlib.sha256(data).hexdigest()}, "
                         f"the lock says {entry['sha256']}")
        try:
            content = digest_of(archive_files(data))
        except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
            return found + [f"{entry['name']}: {path} is not a readable .tgz ({err})"]
        if content != entry["content_sha256"]:
            found.append(f"{entry['name']}: content digest of {path} is {content}, "
                         f"the lock says {entry['content_sha256']}")
        return found
    files = tree_files(path)
    listed = set(entry["files"])
    found = [f"{entry['name']}: {rel} is in {path} but not in the lock" for rel in sorted(set(files) - listed)]
    found += [f"{entry['name']}: {rel} is locked but missing from {path}" for rel in sorted(listed - set(files))]
    digest = digest_of(files)
    if not found and digest != entry["tree_sha256"]:
        found.append(f"{entry['name']}: tree digest of {path} is {digest}, the lock says "
                     f"{entry['tree_sha256']} (a file's content changed)")
    return found


def find(name: str) -> Path | None:
    """The locked artifact ``name``: in ../shared, else in the cache; None when in neither
    (not verified: the tests and the lock check verify)."""
    entry = entries()[name]  # KeyError: nobody locked it
    for base in (SHARED, cache_root()):
        candidate = base / entry["path"]
        if candidate.exists():
            return candidate
    return None


def locate(name: str) -> tuple[Path | None, list[str]]:
    """The locked artifact ``name`` where its checksums match the lock (../shared first, then the
    cache), and what was wrong with the copies that did not match (or where none was)."""
    entry = entries().get(name)
    if entry is None:
        return None, [f"{name} is not in {LOCK_FILE.name}"]
    why: list[str] = []
    for base in (SHARED, cache_root()):
        candidate = base / entry["path"]
        if not candidate.exists():
            why.append(f"not in {base}")
            continue
        wrong = problems(entry, candidate)
        if entry["kind"] == "chart":  # the same chart files, packaged elsewhere, are the same chart
            wrong = [w for w in wrong if "sha256 of" not in w]
        if not wrong:
            return candidate, []
        why += wrong
    return None, why


def locate_by_path(relative: str) -> tuple[Path | None, list[str]]:
    """``locate`` for the entry whose lock path is ``relative`` (e.g. ``charts/x-1.0.tgz``)."""
    for name, entry in entries().items():
        if entry["path"] == relative:
            return locate(name)
    return None, [f"{relative} is not in {LOCK_FILE.name}"]

"""Pinned external artifacts the contract tests read: where they are, and whether they are the
locked ones.

The lock (``artifacts.lock.json`` at the repository root) names every chart archive, CRD directory
and upstream source tree a test reads, with its source URL and checksum. A test asks for one by
name; it is looked for in ``../shared`` beside the repository (this project's CI), then in the
cache that ``scripts/fetch_artifacts.py`` fills (``$XDG_CACHE_HOME/rlkit/artifacts``, else
``~/.cache/rlkit/artifacts``; ``RLKIT_ARTIFACTS`` overrides it). Not found: the test fails in CI
(``CI=true``) and skips elsewhere, naming the script to run.

Checksums: a chart archive is locked by the sha256 of its file, and also by a content digest
(the same tree digest, over the files inside the archive), because an archive downloaded from a
chart repository has other tar and gzip metadata than one packaged locally from the same
sources. A directory (source tree, CRDs) is locked by a tree digest: sha256 over
``"<relative path>\\0<sha256 of file>\\n"`` for every listed file, sorted by path (see
:func:`tree_digest`).

Standard library only: ``scripts/fetch_artifacts.py`` imports this module, with no kit installed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = REPO_ROOT / "artifacts.lock.json"
SHARED = REPO_ROOT.parent / "shared"
FETCH_SCRIPT = "scripts/fetch_artifacts.py"
FETCH_HINT = f"run `python {FETCH_SCRIPT}` (downloads and verifies every locked artifact)"

# The test ids marked ``external`` in this session (filled at collection by tests/conftest.py),
# so that a helper reached from an unmarked test is refused: the inner loop, -m "not external",
# must never need an artifact.
EXTERNAL_TESTS: set[str] = set()
collected = False


def cache_root() -> Path:
    """The local cache ``scripts/fetch_artifacts.py`` fills."""
    if os.environ.get("RLKIT_ARTIFACTS"):
        return Path(os.environ["RLKIT_ARTIFACTS"])
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
    """The locked artifact ``name``: in ../shared, else in the cache; None when in neither."""
    entry = entries()[name]  # KeyError: a test asked for an artifact nobody locked
    for base in (SHARED, cache_root()):
        candidate = base / entry["path"]
        if candidate.exists():
            return candidate
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(name: str, *, what: str = "") -> Path:
    """The locked artifact ``name`` for a test; missing: fail in CI, skip elsewhere.

    Only tests marked ``external`` may call this (checked when tests/conftest.py collected them).
    """
    import pytest

    path = find(name)
    if path is None:
        entry = entries()[name]
        message = (f"{what or name} is missing: looked for {entry['path']} in {SHARED} and in "
                   f"{cache_root()}. Fix: {FETCH_HINT}, or put ../shared beside the repository")
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    check_marked(name)
    return path


def check_marked(name: str) -> None:
    """Fail the running test when it reads artifact ``name`` without the ``external`` marker."""
    import pytest

    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if collected and current and current not in EXTERNAL_TESTS:
        pytest.fail(f"{current} reads the external artifact {name} but is not marked "
                    "@pytest.mark.external (the inner loop, -m 'not external', must not need it)")


def require_chart_dir() -> Path:
    """The directory holding every locked chart archive (``<chart>-<version>.tgz``), as
    ``rlkit check --chart-dir`` and ``ops.helm.chart_archive`` take it."""
    import pytest

    charts = [name for name, e in entries().items() if e["kind"] == "chart"]
    paths = [require(name, what=f"chart archive {name}.tgz") for name in charts]
    folders = {p.parent for p in paths}
    if len(folders) != 1:  # some in ../shared, some in the cache: make the cache whole
        pytest.fail(f"the locked charts are split across {sorted(map(str, folders))}. Fix: {FETCH_HINT}")
    return folders.pop()


def common_root(names: tuple[str, ...], kind_dir: str) -> Path:
    """The folder (``../shared/<kind_dir>`` or the cache's) that holds all of ``names`` side by
    side, as a tool that takes one upstream folder needs; ``../shared/<kind_dir>`` when neither
    does (a test's own check then fails or skips, naming what is missing)."""
    for base in (SHARED, cache_root()):
        if all((base / entries()[name]["path"]).exists() for name in names):
            return base / kind_dir
    return SHARED / kind_dir


def unlocked_chart(chart_dir: Path, archive: str) -> Path:
    """A chart archive from ../shared/charts that the lock lists under ``not_locked`` (read from
    ../shared only: its published package was not compared with it), beside the locked ones in
    ``chart_dir``. Missing: fail in CI, skip elsewhere."""
    import pytest

    path = chart_dir / archive
    if not path.is_file():
        path = SHARED / "charts" / archive
    if path.is_file():
        return path
    message = (f"chart archive {archive} is missing from {chart_dir} and {SHARED / 'charts'}: it "
               "is not in the lock (see not_locked), so only ../shared provides it")
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)

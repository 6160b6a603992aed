"""Pinned external artifacts the contract tests read: where they are, and whether they are the
locked ones.

The lock (``artifacts.lock.json`` at the repository root) names every chart archive, CRD directory
and upstream source tree a test reads, with its source URL and checksum. A test asks for one by
name; it is looked for in ``../shared`` beside the repository (this project's CI), then in the
cache that ``scripts/fetch_artifacts.py`` fills (``$XDG_CACHE_HOME/rlkit/artifacts``, else
``~/.cache/rlkit/artifacts``; ``RLKIT_ARTIFACTS`` overrides it). Not found: the test fails in CI
(``CI=true``) and skips elsewhere, naming the script to run.

The locator and the checksums are product code, ``ops.artifacts`` (`rlkit check` and `rlkit
validate` find the same copies); this module adds the tests' policy: skip or fail, and the
``external`` marker check. Standard library only (``scripts/fetch_artifacts.py`` imports it).
"""

from __future__ import annotations

import os
from pathlib import Path

# The locator is product code (ops/artifacts.py, standard library only), shared with `rlkit check`
# and `rlkit validate`; the tests add the skip-or-fail policy and the marker check.
from ops.artifacts import (  # noqa: F401
    FETCH_HINT,
    FETCH_SCRIPT,
    LOCK_FILE,
    REPO_ROOT,
    SHARED,
    archive_files,
    cache_root,
    digest_of,
    entries,
    file_sha256,
    find,
    load_lock,
    problems,
    tree_digest,
    tree_files,
)

# The test ids marked ``external`` in this session (filled at collection by tests/conftest.py),
# so that a helper reached from an unmarked test is refused: the inner loop, -m "not external",
# must never need an artifact.
EXTERNAL_TESTS: set[str] = set()
collected = False


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

"""Fixtures of the manifest contract tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.miles_parser import UPSTREAM, require_sources


@pytest.fixture(scope="module")
def upstream() -> Path:
    """The pinned upstream sources (../shared/upstream or the cache): required in CI, an explained
    skip elsewhere."""
    require_sources()
    return UPSTREAM

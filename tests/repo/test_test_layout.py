"""Test modules share code through tests/support (and the trainer's helper modules), never by
importing another test module: that import runs the other module's collection-time code and
ties two files' fixtures together (issue 20, "tests mirror the packages")."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

IMPORTS_A_TEST_MODULE = re.compile(r"^\s*(from|import)\s+(tests\.[\w.]*\btest_\w+|test_\w+)\b", re.M)


def test_no_test_module_imports_another():
    offenders = []
    for root in (REPO_ROOT / "tests", REPO_ROOT / "images" / "trainer" / "tests"):
        for path in root.rglob("*.py"):
            for match in IMPORTS_A_TEST_MODULE.finditer(path.read_text()):
                line = path.read_text()[:match.start()].count("\n") + 1
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{line}: {match.group(0).strip()}")
    assert not offenders, ("move what these share into tests/support/: " + "; ".join(offenders))

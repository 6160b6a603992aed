"""The ground layer (catalogs, names, versions, problems, config) imports nothing above it, lazy
imports included: no planner, manifests, ops, stacks or CDK; and the catalogs not even config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.support import REPO_ROOT

REPO = REPO_ROOT
CATALOG = sorted((REPO / "infra" / "catalog").glob("*.py"))
BOTTOM = CATALOG + [REPO / "infra" / f for f in ("names.py", "versions.py", "problems.py", "strict.py")]
CONFIG = sorted((REPO / "infra" / "config").glob("*.py"))
ABOVE = ("infra.planner", "infra.constructs", "manifests", "ops", "stacks", "app", "aws_cdk",
         "constructs")


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", BOTTOM + CONFIG, ids=lambda p: str(p.relative_to(REPO)))
def test_the_ground_layer_imports_nothing_above_it(path):
    assert not [m for m in imports(path) if _within(m, ABOVE)]


@pytest.mark.parametrize("path", BOTTOM, ids=lambda p: str(p.relative_to(REPO)))
def test_catalogs_names_and_versions_do_not_import_config(path):
    assert not [m for m in imports(path) if _within(m, ("infra.config",))]


def test_the_check_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from infra.planner.search import plan\n    import ops.cli\n")
    assert imports(f) == {"infra.planner.search", "ops.cli"}

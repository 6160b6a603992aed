"""Helpers for tests that read synthesized templates: the example configs and resource lookups."""

from __future__ import annotations

from tests.support import REPO_ROOT

EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


def resources(template: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def only(template: dict, type_: str) -> dict:
    found = resources(template, type_)
    assert len(found) == 1, f"expected one {type_}, found {len(found)}"
    return next(iter(found.values()))

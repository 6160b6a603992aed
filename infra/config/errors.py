"""Config problems and ``ConfigError``: every problem of a config, reported at once.

A config problem is an ``infra.problems.Problem`` whose subject is the field path; it quotes the
value found, the rule broken and the fix.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from infra.problems import Problem


def problem(path: str, value: Any, rule: str, fix: str) -> Problem:
    """One config problem: the field path, the value found, the rule broken and the fix."""
    return Problem(subject=path, rule=rule, fix=fix, value=value)


class ConfigError(ValueError):
    """Raised with every problem found in a config."""

    def __init__(self, problems: list[Problem], source: str = "config"):
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s):"] + [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


_MISSING = "<missing>"


def _problems_from_pydantic(error: ValidationError) -> list[Problem]:
    problems = []
    for e in error.errors():
        path = ".".join(str(p) for p in e["loc"]) or "<root>"
        kind = e["type"]
        if kind == "missing":
            problems.append(problem(path, _MISSING, "this field is required", "add it"))
        elif kind == "extra_forbidden":
            problems.append(problem(
                path, e["input"], "unknown field",
                "remove it or correct its spelling (see docs/config-reference.md)",
            ))
        else:
            problems.append(problem(
                path, e.get("input"), e["msg"].rstrip("."),
                "give a value of the documented type (see docs/config-reference.md)",
            ))
    return problems


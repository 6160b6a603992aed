"""The run config's problem type: every problem names the field path, the bad value, the rule
it breaks and how to fix it; ``ConfigError`` reports them all at once."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class _Missing:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid only
        return "MISSING"


MISSING: Any = _Missing()


def render_value(value: Any) -> str:
    """Render a config value the way it reads in YAML-ish JSON (strings quoted)."""
    if value is MISSING:
        return "(missing)"
    try:
        return json.dumps(value, sort_keys=False)
    except TypeError:
        return repr(value)


def close_match(word: str, known: Iterable[str]) -> str | None:
    """The entry of ``known`` closest to ``word``, for a fix's did-you-mean (None when nothing is
    close): one measure for every suggestion the run-config validator makes (difflib's default
    cutoff, 0.6, as the kit's own ``infra.config.errors.close_match``)."""
    match = difflib.get_close_matches(word, list(known), n=1)
    return match[0] if match else None


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the run config."""

    path: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path} = {render_value(self.value)}: {self.rule}. Fix: {self.fix}."


class ConfigError(ValueError):
    """Every problem found in a run config, reported together."""

    def __init__(self, problems: list[Problem], source: str = "run config"):
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))

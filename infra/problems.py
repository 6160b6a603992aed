"""One result type for everything the kit checks: config rules, render problems, preflight checks,
gate findings and the scheduling contract.

Each names *where* (``subject``: a config field path, a stack, a pod on a node group, a node),
*what* (``rule``: the rule broken, or what was checked for a pass), the value when there is one,
and the *fix*. ``status`` says how it came out; a config or render problem is always ``fail``.
The kinds print differently (a config problem quotes its value; a gate finding its measured and
expected figures), so each caller keeps its own text through ``__str__`` or its own ``to_dict``
view, and every kind can be counted, filtered and turned into JSON the same way.

This module is part of the ground layer: it imports nothing from the kit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["pass", "warn", "fail", "recorded", "not-run"]
PASS: Status = "pass"
WARN: Status = "warn"
FAIL: Status = "fail"
RECORDED: Status = "recorded"
NOT_RUN: Status = "not-run"

MAX_QUOTED_CHARS = 160  # values quoted in messages are cut to this length


class _NoValue:
    """Marks a problem that quotes no value (a render or scheduling problem)."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


def shorten(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Problem:
    """One finding: where, what, the value, how it came out, and how to fix it."""

    subject: str
    rule: str
    fix: str = ""
    value: Any = NO_VALUE
    status: Status = FAIL
    check: str = ""  # the named check that produced it (preflight, gate); empty for config rules
    measured: str = ""
    expected: str = ""

    @property
    def path(self) -> str:
        """The config field path (config problems name their subject this way)."""
        return self.subject

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def __str__(self) -> str:
        # User-supplied keys and values are cut short: a 10 kB value must not flood the terminal.
        # A problem without a value (render, scheduling) prints its subject as its author wrote it.
        if self.value is NO_VALUE:
            return f"{self.subject}: {self.rule}. Fix: {self.fix}."
        subject = self.subject if len(self.subject) <= MAX_QUOTED_CHARS else shorten(self.subject)
        return f"{subject} = {shorten(self.value)}: {self.rule}. Fix: {self.fix}."


def failed(problems: list[Problem]) -> list[Problem]:
    """The problems that fail a verdict."""
    return [p for p in problems if p.status == FAIL]

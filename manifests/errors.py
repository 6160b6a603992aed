"""Errors the renderer and the validator raise: every problem at once, each with its fix.

A render problem is an ``infra.problems.Problem`` with no value: ``RenderProblem(subject, rule,
fix)`` builds one (the subject says where, e.g. "training.extra_env.RDMAV_FORK_SAFE = '1'" or
"stack moe-rl-data").
"""

from __future__ import annotations

from infra.problems import Problem

RenderProblem = Problem  # RenderProblem(subject, rule, fix): the shared type, no value quoted


class RenderError(ValueError):
    """Raised with every problem found while building the render context."""

    def __init__(self, problems: list[Problem], source: str = "render"):
        self.problems = list(problems)
        self.source = source
        lines = [f"{source}: {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))

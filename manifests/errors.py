"""Errors the renderer and the validator raise: every problem at once, each with its fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RenderProblem:
    """One reason the manifests cannot be rendered: what, which rule, and how to fix it."""

    subject: str  # e.g. "training.extra_env.RDMAV_FORK_SAFE = '1'" or "stack moe-rl-data"
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.rule}. Fix: {self.fix}."


class RenderError(ValueError):
    """Raised with every problem found while building the render context."""

    def __init__(self, problems: list[RenderProblem], source: str = "render"):
        self.problems = list(problems)
        self.source = source
        lines = [f"{source}: {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))

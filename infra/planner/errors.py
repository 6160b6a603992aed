"""The planner's one exception type: its message is the whole user-facing explanation."""

from __future__ import annotations


class PlannerError(ValueError):
    """A request the planner cannot answer (unknown model, layout that does not divide, ...)."""

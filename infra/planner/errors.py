"""The planner's one exception type: its message is the whole user-facing explanation.

A message names the request's fields (``nodes``, ``max_nodes``, ...) through ``field``; printed
as is it shows the field names, and a front end shows its own spelling of them instead (the CLI
passes its field -> flag table to ``naming``, so the same error reads ``--nodes``).
"""

from __future__ import annotations

from collections.abc import Mapping

_MARK = "\x1f"  # ASCII unit separator: brackets a field name inside a message, never user text


def field(name: str) -> str:
    """Name request field ``name`` in a ``PlannerError`` message."""
    return f"{_MARK}{name}{_MARK}"


class PlannerError(ValueError):
    """A request the planner cannot answer (unknown model, layout that does not divide, ...)."""

    def __init__(self, message: str):
        self.template = message
        super().__init__(self.naming())

    @property
    def fields(self) -> tuple[str, ...]:
        """The request fields the message names, in order."""
        return tuple(self.template.split(_MARK)[1::2])

    def naming(self, spelling: Mapping[str, str] | None = None) -> str:
        """The message with each named field spelt as ``spelling`` says (default: its name)."""
        parts = self.template.split(_MARK)
        spelling = spelling or {}
        return "".join(spelling.get(p, p) if i % 2 else p for i, p in enumerate(parts))

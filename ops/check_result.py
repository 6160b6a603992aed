"""One preflight check's result, shared by the preflight modules (``ops.preflight`` and
``ops.preflight_services``) without an import between them."""

from __future__ import annotations

from dataclasses import dataclass

from infra.problems import Problem


@dataclass(frozen=True, init=False)
class Check(Problem):
    """One preflight check: its name, what it looked at (``subject``), how it came out, what it
    found and the fix. A ``Problem`` (``name`` is its ``check``, ``detail`` its ``rule``), whose
    JSON view keeps the preflight keys."""

    def __init__(self, name: str, subject: str, status: str, detail: str, fix: str = "") -> None:
        super().__init__(subject=subject, rule=detail, fix=fix, status=status, check=name)

    @property
    def name(self) -> str:
        return self.check

    @property
    def detail(self) -> str:
        return self.rule

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "subject": self.subject, "status": self.status,
                "detail": self.detail, "fix": self.fix}

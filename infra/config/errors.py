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


def close_match(word: str, known) -> str | None:  # noqa: ANN001 - any iterable of str
    """The entry of ``known`` closest to ``word``, for a did-you-mean (None when nothing is
    close): the one measure every config suggestion uses."""
    import difflib

    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def _did_you_mean(loc: tuple) -> str | None:
    """The known field closest to the unknown key at ``loc`` (None when nothing is close)."""
    import types
    import typing

    from pydantic import BaseModel

    from infra.config.model import KitConfig

    def is_model(t: Any) -> bool:
        return isinstance(t, type) and issubclass(t, BaseModel)

    def unwrap(t: Any) -> Any:  # Optional[X] / X | None -> X
        args = [a for a in typing.get_args(t) if a is not type(None)]
        union = typing.get_origin(t) in (typing.Union, types.UnionType)
        return args[0] if union and len(args) == 1 else t

    model: Any = KitConfig
    for part in loc[:-1]:
        model = unwrap(model)
        if is_model(model):
            field = model.model_fields.get(str(part))
            model = field.annotation if field is not None else None
        elif typing.get_origin(model) in (dict, list, tuple):
            model = typing.get_args(model)[-1] if typing.get_args(model) else None
        else:
            return None
    model = unwrap(model)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    return close_match(str(loc[-1]), model.model_fields)


def _problems_from_pydantic(error: ValidationError) -> list[Problem]:
    problems = []
    for e in error.errors():
        path = ".".join(str(p) for p in e["loc"]) or "<root>"
        kind = e["type"]
        if kind == "missing":
            problems.append(problem(path, _MISSING, "this field is required", "add it"))
        elif kind == "extra_forbidden":
            close = _did_you_mean(e["loc"])
            problems.append(problem(
                path, e["input"], "unknown field",
                f"did you mean {close!r}? Rename it, or remove it (see docs/config-reference.md)"
                if close else "remove it or correct its spelling (see docs/config-reference.md)",
            ))
        else:
            problems.append(problem(
                path, e.get("input"), e["msg"].rstrip("."),
                "give a value of the documented type (see docs/config-reference.md)",
            ))
    return problems


"""Reading one mapping of the run config after another while collecting every problem."""

from __future__ import annotations

import math
from typing import Any

from .problems import MISSING, Problem, close_match


class Reader:
    """Collects problems while reading one mapping after another."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, value: Any, rule: str, fix: str) -> None:
        self.problems.append(Problem(path, value, rule, fix))

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: bool = True) -> dict | None:
        if value is MISSING:
            if required:
                self.add(path, MISSING, "this section is required", f"add a `{path}:` mapping with keys {', '.join(allowed)}")
            return None
        if not isinstance(value, dict):
            self.add(path, value, "must be a mapping", f"write `{path}:` as a mapping with keys {', '.join(allowed)}")
            return None
        for key in value:
            if key not in allowed:
                close = close_match(str(key), allowed)
                hint = f"remove it or rename it to `{close}`" if close else "remove it"
                child = f"{path}.{key}" if path else str(key)
                self.add(child, value[key], f"unknown key (allowed here: {', '.join(allowed)})", hint)
        return value

    @staticmethod
    def _child(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def integer(self, data: dict, key: str, path: str, *, default: Any = MISSING, minimum: int = 1) -> int | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: <integer >= {minimum}>` under `{path}`" if path else f"add `{key}`")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(p, value, "must be an integer", f"write a whole number >= {minimum}, e.g. `{key}: {max(minimum, 1)}`")
            return None
        if value < minimum:
            self.add(p, value, f"must be >= {minimum}", f"use a value of at least {minimum}")
            return None
        return value

    def number(
        self,
        data: dict,
        key: str,
        path: str,
        *,
        default: Any = MISSING,
        minimum: float | None = None,
        exclusive_minimum: float | None = None,
        exclusive_maximum: float | None = None,
    ) -> float | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: <number>` under `{path}`")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.add(p, value, "must be a finite number", f"write a number, e.g. `{key}: {default if default is not MISSING else 1.0}`")
            return None
        value = float(value)
        if minimum is not None and value < minimum:
            self.add(p, value, f"must be >= {minimum:g}", f"use a value of at least {minimum:g}")
            return None
        if exclusive_minimum is not None and value <= exclusive_minimum:
            self.add(p, value, f"must be > {exclusive_minimum:g}", f"use a value above {exclusive_minimum:g}")
            return None
        if exclusive_maximum is not None and value >= exclusive_maximum:
            self.add(p, value, f"must be < {exclusive_maximum:g}", f"use a value below {exclusive_maximum:g}")
            return None
        return value

    def boolean(self, data: dict, key: str, path: str, *, default: bool = False) -> bool | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            return default
        if not isinstance(value, bool):
            self.add(p, value, "must be true or false", f"write `{key}: true` or `{key}: false`")
            return None
        return value

    def string(self, data: dict, key: str, path: str, *, default: Any = MISSING, example: str = "...") -> str | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: {example}` under `{path}`" if path else f"add `{key}: {example}` at the top level")
                return None
            return default
        if not isinstance(value, str) or not value.strip():
            self.add(p, value, "must be a non-empty string", f"write it as text, e.g. `{key}: {example}`")
            return None
        return value

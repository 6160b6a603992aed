#!/usr/bin/env python3
"""Write config.schema.json and docs/config-reference.md from the config model.

    .venv/bin/python scripts/gen_config_reference.py          # rewrite both files
    .venv/bin/python scripts/gen_config_reference.py --check  # exit 1 if either is out of date

tests/infra/test_config.py runs the check, so the reference never drifts from the model.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.config import KitConfig, json_schema  # noqa: E402

SCHEMA_PATH = ROOT / "config.schema.json"
REFERENCE_PATH = ROOT / "docs" / "config-reference.md"


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # Number | None: the Annotated float inside the union
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _model_of(annotation):
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _rows(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if field.default is not PydanticUndefined:
            default = field.default
        elif field.default_factory is not None:
            default = field.default_factory()
        else:
            default = "(required)"
        is_mapping = typing.get_origin(field.annotation) is dict
        sub = None if is_mapping else _model_of(field.annotation)
        if isinstance(default, BaseModel):
            default = "(see below)"
        elif isinstance(default, dict) and default and all(
                isinstance(v, BaseModel) for v in default.values()):
            default = {k: v.model_dump(exclude_defaults=True) for k, v in default.items()}
        yield path, _type_name(field.annotation), default, field.description or ""
        if sub is not None:
            yield from _rows(sub, path + ".")
        elif is_mapping:
            value_model = _model_of(typing.get_args(field.annotation)[1])
            if value_model is not None:
                yield from _rows(value_model, path + ".<name>.")


def reference_markdown() -> str:
    lines = [
        "# Config reference",
        "",
        "Generated from `infra/config/` by `.venv/bin/python scripts/gen_config_reference.py`; do not edit.",
        "Editors can autocomplete config files with `config.schema.json` (for VS Code YAML: add",
        "`# yaml-language-server: $schema=config.schema.json` at the top of a config at the",
        "repository root, as the README's `my-env.yaml`; the path is relative to the config file,",
        "so `../config.schema.json` from `examples/`).",
        "",
        "| field | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for path, type_name, default, description in _rows(KitConfig):
        default_text = json.dumps(default) if default != "(see below)" and default != "(required)" else default
        cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
        lines.append(f"| `{path}` | {cell(type_name)} | {cell(default_text)} | {cell(description)} |")
    return "\n".join(lines) + "\n"


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    wanted = {SCHEMA_PATH: schema_text(), REFERENCE_PATH: reference_markdown()}
    if "--check" in sys.argv:
        stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run .venv/bin/python scripts/gen_config_reference.py")
        return 1 if stale else 0
    for p, text in wanted.items():
        p.write_text(text)
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

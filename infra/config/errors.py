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
    close): the one measure every suggestion of the kit uses (config keys and values, app.py's
    context keys, rlkit's commands, flags and choices in ops/usage.py)."""
    import difflib

    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def _unwrap(t: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    import types
    import typing

    args = [a for a in typing.get_args(t) if a is not type(None)]
    union = typing.get_origin(t) in (typing.Union, types.UnionType)
    return args[0] if union and len(args) == 1 else t


def _is_model(t: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(t, type) and issubclass(t, BaseModel)


def _annotation_at(loc: tuple) -> tuple[Any, Any]:
    """The declared type at config path ``loc`` and its pydantic FieldInfo (None for a list
    item or mapping value); (None, None) where the path leaves the model."""
    import typing

    from infra.config.model import KitConfig

    annotation: Any = KitConfig
    info = None
    for part in loc:
        annotation = _unwrap(annotation)
        if _is_model(annotation):
            info = annotation.model_fields.get(str(part))
            if info is None:
                return None, None
            annotation = info.annotation
        elif typing.get_origin(annotation) in (dict, list) and typing.get_args(annotation):
            annotation, info = typing.get_args(annotation)[-1], None
        else:
            return None, None
    return annotation, info


def _did_you_mean(loc: tuple) -> str | None:
    """The known field closest to the unknown key at ``loc`` (None when nothing is close)."""
    model, _ = _annotation_at(loc[:-1])
    model = _unwrap(model)
    if not _is_model(model):
        return None
    return close_match(str(loc[-1]), model.model_fields)


# --- a value of the wrong type: the shape expected, with an example ------------------------------

# Examples for the mappings and lists whose empty default shows nothing to copy.
_EXAMPLES = {
    "tags": "{team: rl}",
    "labels": "{team: rl}",
    "extra_env": "{NCCL_DEBUG: INFO}",
    "private_subnet_ids": "{us-east-1a: subnet-0123456789abcdef0}",
    "public_subnet_ids": "{us-east-1a: subnet-0123456789abcdef1}",
    "gpu_node_groups": "{p5: {instance_type: p5.48xlarge, availability_zone: us-east-1a}}",
    "admin_role_arns": "[arn:aws:iam::123456789012:role/NAME]",
    "public_cidrs": "[203.0.113.0/24]",
    "local_zones": "[us-east-1-dfw-2a]",
    "taints": "[{key: dedicated, value: rl}]",
}
# The rule a text field breaks when YAML read a number: the loader explains the quoting trap.
TEXT_EXPECTED = "expected text"


def _yaml(value: Any) -> str:
    """``value`` as it would be written in the config file (flow style)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip() \
        .removesuffix("\n...").removesuffix("...").strip()


def _shape(annotation: Any, info: Any, key: str) -> tuple[str, str]:
    """(what the field takes, in words; an example value written as YAML)."""
    import typing

    from pydantic_core import PydanticUndefined

    t = _unwrap(annotation)
    default = info.get_default(call_default_factory=True) if info is not None else None
    if default is PydanticUndefined:
        default = None
    nullable = t is not annotation
    if _is_model(type(default)):
        default = None
    if key in _EXAMPLES:
        example = _EXAMPLES[key]
    elif default not in (None, [], {}) and not isinstance(default, (list, dict)):
        example = _yaml(default)
    else:
        example = None
    origin = typing.get_origin(t)
    if t is bool:
        shape, example = "true or false", example or "true"
    elif t is int:
        shape, example = "a whole number", example or "2"
    elif t is float:
        shape, example = "a number", example or "1.0"
    elif t is str:
        shape, example = "text", example or "..."
    elif origin is typing.Literal:
        options = typing.get_args(t)
        shape = "one of " + ", ".join(_yaml(o) for o in options)
        example = example or _yaml(options[0])
    elif origin is list:
        shape = "a list"
        example = example or (_yaml(default) if default else "[...]")
    elif origin is dict:
        shape, example = "a mapping", example or "{name: value}"
    elif _is_model(t):
        first, field = next(iter(t.model_fields.items()))
        _, inner = _shape(field.annotation, field, first)
        shape, example = "a mapping of its settings", example or f"{{{first}: {inner}}}"
    else:
        shape, example = "the documented type", example or "..."
    return (shape + " or null" if nullable and shape != "the documented type" else shape), \
        example


def _given(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, float):
        return "a number with a decimal point"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "null (an empty value)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _yaml_load(text: str) -> Any:
    """What YAML reads from ``text`` written without quotes (None where it cannot)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _parses_as(text: str, shape: str) -> bool:
    """Whether quoted ``text`` would be a value of ``shape`` written without its quotes."""
    value = _yaml_load(text)
    if shape.startswith("true or false"):
        return isinstance(value, bool)
    if shape.startswith("a whole number"):
        return isinstance(value, int) and not isinstance(value, bool)
    if shape.startswith("a number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _type_problem(path: str, loc: tuple, value: Any, msg: str) -> Problem:
    annotation, info = _annotation_at(loc)
    key = next((str(p) for p in reversed(loc) if isinstance(p, str)), path)
    if annotation is None:  # a path the model does not declare: pydantic's words
        return problem(path, value, msg.rstrip("."), "see docs/config-reference.md")
    shape, example = _shape(annotation, info, key)
    given = _given(value)
    if isinstance(loc[-1], int):  # a list item: the example is the whole list
        list_annotation, list_info = _annotation_at(loc[:-1])
        example = _shape(list_annotation, list_info, key)[1]
    if shape.startswith("text") and isinstance(value, (bool, int, float)):
        fix = f'quote it: {key}: "{_yaml(value)}"' if not isinstance(loc[-1], int) else \
            f"quote each item, e.g. {key}: {example}"
        if isinstance(value, bool) and not isinstance(loc[-1], int):
            # the text written is unknown here (yes, on and True all read as true): name none
            # (load_config quotes the source text)
            word = "yes" if value else "no"
            fix = (f'quote it as written, e.g. {key}: "{word}" for {word} (unquoted, YAML reads '
                   "yes, no, on, off, true and false as true or false)")
    elif isinstance(loc[-1], int):
        fix = f"write each item as {shape}, e.g. {key}: {example}"
    elif shape.startswith("a whole number") and isinstance(value, float) and value.is_integer():
        fix = f"write it without the decimal point: {key}: {int(value)}"
    elif isinstance(value, str) and _parses_as(value, shape):
        fix = f"write it without quotes: {key}: {_yaml(_yaml_load(value))}"
    elif value is None and shape == "a mapping of its settings":
        fix = f"write its settings, e.g. {key}: {example}, or remove the line for the defaults"
    else:
        fix = f"write {shape.removesuffix(' or null')}, e.g. {key}: {example}"
    if shape.startswith("text"):
        rule = f"{TEXT_EXPECTED}{shape.removeprefix('text')}, not {given}"
    elif shape.startswith("one of") and isinstance(value, str):  # the value says it is text
        rule = f"expected {shape}"
    else:
        rule = f"expected {shape}, not {given}"
    return problem(path, value, rule, fix + " (see docs/config-reference.md)")


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
            problems.append(_type_problem(path, tuple(e["loc"]), e.get("input"), e["msg"]))
    return problems

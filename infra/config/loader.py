"""Reading a config: the strict YAML loader, ``parse_config`` / ``load_config`` (types, then the
semantic rules, every problem at once) and the JSON schema for editors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from infra.config.errors import TEXT_EXPECTED, ConfigError, _problems_from_pydantic, problem
from infra.config.model import KitConfig
from infra.config.rules import validate
from infra.problems import Problem, shorten

# --- reading the file ----------------------------------------------------------------------------

# Limits on the file itself: a kit config is a few kilobytes and a few levels deep. Anything far
# beyond that is a mistake or an attack (a YAML alias bomb expands 300 bytes into gigabytes).
MAX_CONFIG_BYTES = 256 * 1024
MAX_NESTING = 16
MAX_INT_DIGITS = 18  # every integer the config holds fits in far fewer; int() of 5000 digits raises


class _LoadProblem(Exception):
    def __init__(self, rule: str, fix: str, mark: Any = None):
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        super().__init__(rule + where)
        self.rule = rule + where
        self.fix = fix


class _StrictConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor that refuses duplicate keys, huge integers, inf and NaN, and the tags a
    config never needs."""

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if duplicate:
                raise _LoadProblem(f"duplicate key {shorten(key)}",
                                   "keep one entry per key (YAML would silently use the last)",
                                   key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # noqa: ANN001
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _LoadProblem(f"integer with {digits} digits is out of range",
                               "use a realistic number", node.start_mark)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):  # noqa: ANN001
        value = super().construct_yaml_float(node)
        if value != value or value in (float("inf"), float("-inf")):
            raise _LoadProblem(f"{shorten(node.value)} is not a finite number",
                               "use an ordinary number", node.start_mark)
        return value


_StrictConstructor.add_constructor("tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int)
_StrictConstructor.add_constructor("tag:yaml.org,2002:float",
                                   _StrictConstructor.construct_yaml_float)
_StrictConstructor.add_constructor("tag:yaml.org,2002:map", _StrictConstructor.construct_yaml_map)


def _refuse_tag(loader: _StrictConstructor, node: yaml.Node) -> Any:
    raise _LoadProblem(f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not "
                       "allowed in a config", "write a plain string, number, list or mapping",
                       node.start_mark)


# Binary, sets and ordered pairs have no place in a config (pydantic would quietly turn bytes into
# a string); SafeLoader already refuses python/* tags.
for _tag in ("binary", "set", "omap", "pairs"):
    _StrictConstructor.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


class _StrictLoader(_StrictConstructor, yaml.SafeLoader):
    """SafeLoader that refuses what a config never needs and an attacker or a typo produces:
    anchors and aliases, duplicate keys, deep nesting, huge integers, inf and NaN. Its errors,
    with their line and column, are the ones a user sees."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _LoadProblem("YAML anchors and aliases (&name, *name) are not allowed in a "
                               "config", "write each value out in full", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise _LoadProblem(f"nested deeper than {MAX_NESTING} levels",
                                   "a kit config is a few levels deep; see "
                                   "docs/config-reference.md", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# libyaml's parser, where PyYAML has it, for a config with nothing the strict loader refuses: the
# same objects about six times faster (a config load is 4 ms in pure Python, and every command and
# many tests load one). Anything it would refuse, or libyaml cannot read, goes to the pure-Python
# strict loader above, which says what is wrong.
_LIBYAML_LOADER = (type("_LibyamlStrictLoader", (_StrictConstructor, yaml.CSafeLoader), {})
                   if getattr(yaml, "CSafeLoader", None) else None)


def _libyaml_load(text: str) -> tuple[bool, Any]:
    """(True, data) when libyaml reads ``text`` and the strict loader would accept it as is;
    (False, None) otherwise. Anchors, aliases and nesting are judged on the events, before
    anything is built (an alias bomb is never expanded)."""
    if _LIBYAML_LOADER is None:
        return False, None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_LIBYAML_LOADER):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                return False, None
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth >= MAX_NESTING:  # its scalars would be one level deeper still
                    return False, None
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return True, yaml.load(text, Loader=_LIBYAML_LOADER)  # noqa: S506 - a safe loader
    except Exception:  # noqa: BLE001 - any refusal is told by the pure-Python loader
        return False, None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read and parse a config file, refusing anything but a small, plain UTF-8 YAML mapping.

    Raises ConfigError (one problem at ``<file>``) for a missing, unreadable, empty, oversized,
    non-UTF-8 or malformed file, duplicate keys, anchors/aliases, deep nesting, huge integers and
    non-finite numbers."""
    path = Path(path)
    source = str(path)

    def fail(rule: str, fix: str) -> ConfigError:
        return ConfigError([problem("<file>", source, rule, fix)], source)

    if not path.is_file():
        raise fail("no such config file",
                   "check the path, or start from an example such as examples/p5-2node.yaml")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror})", "check the path and its permissions") \
            from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise fail(f"is {len(raw)} bytes; a config is at most {MAX_CONFIG_BYTES} bytes",
                   "pass the kit config, not another file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})",
                   "save the file as UTF-8") from None
    return parse_config_text(text, source)


def parse_config_text(text: str, source: str = "config") -> dict[str, Any]:
    """Parse config YAML text with the strict loader (see ``read_config_file``); raise
    ConfigError with one problem at ``<file>``."""

    def fail(rule: str, fix: str) -> ConfigError:
        return ConfigError([problem("<file>", source, rule, fix)], source)

    try:
        done, data = _libyaml_load(text)
        if not done:
            loader = _StrictLoader(text)
            try:
                data = loader.get_single_data()
            finally:
                loader.dispose()
    except _LoadProblem as err:
        raise fail(err.rule, err.fix) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"
        what = "; ".join(x for x in (err.context, err.problem) if x)
        raise fail(f"not valid YAML at {where}: {what}",
                   f"fix the YAML at {source}:{where.replace('line ', '').replace(', column ', ':')}"
                   ) from None
    except yaml.YAMLError as err:
        raise fail(f"not valid YAML ({shorten(str(err), 300)})",
                   "fix the YAML syntax at the position shown") from None
    except (RecursionError, ValueError) as err:
        raise fail(f"cannot be parsed ({shorten(str(err))})", "fix the YAML") from None
    if data is None:
        raise fail("the file is empty (no keys): an empty file would silently deploy the "
                   "built-in default", "write at least `name:`, `region:` and (outside us-east-1) "
                   "`availability_zones:`, or omit the config to use the built-in default on "
                   "purpose")
    if not isinstance(data, dict):
        raise ConfigError([problem("<root>", data, "a config file must be a YAML mapping",
                                   "start the file with keys such as 'name:' and 'region:'")],
                          source)
    return data


# Sections whose values other rules read: when one of these had a type error (and fell back to its
# default for the semantic pass), the rules under its dependents would judge a value the user never
# wrote, so their problems are not reported until the type error is fixed.
_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "region": ("availability_zones", "gpu_node_groups", "vpc"),
    "availability_zones": ("vpc", "gpu_node_groups"),
    "gpu_node_groups": ("training", "cost_guard"),
    "ephemeral": ("cost_guard",),
}


def _path_text(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _prune(data: Any, loc: tuple[Any, ...]) -> None:
    """Delete ``loc`` from nested dicts, stopping at the first list or missing key."""
    node = data
    for part in loc[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(loc[-1], None)


def _pruned_loc(error: dict[str, Any]) -> tuple[Any, ...]:
    """The part of the input to drop so that the rest can be type-checked."""
    loc: list[Any] = []
    for part in error["loc"]:
        if isinstance(part, int):  # inside a list: drop the whole list
            break
        loc.append(part)
    if error["type"] == "missing" and len(loc) == len(error["loc"]):
        loc = loc[:-1]  # the object lacking a required field
    return tuple(loc)


def _semantic_after_type_errors(data: dict[str, Any], error: ValidationError) -> list[Problem]:
    """Semantic problems of the parts of ``data`` that type-check, so that one pass reports
    everything: fields with type errors are dropped (their defaults apply) and problems that
    could depend on them are left out."""
    pruned_data = copy.deepcopy(data)
    suspects: list[str] = []
    for _ in range(5):
        for e in error.errors():
            loc = _pruned_loc(e)
            if not loc:
                return []
            _prune(pruned_data, loc)
            if e["type"] != "extra_forbidden":  # an unknown key changes no other value
                parent = loc[:-1] or loc
                suspects.append(_path_text(parent))
                suspects += _DEPENDENTS.get(str(loc[0]), ())
        try:
            cfg = KitConfig.model_validate(pruned_data)
            break
        except ValidationError as err:
            error = err
    else:
        return []

    def related(path: str) -> bool:
        return any(path == s or path.startswith((s + ".", s + "[")) or s.startswith(path + ".")
                   for s in suspects)

    return [p for p in validate(cfg) if not related(p.path)]


def parse_config(data: dict[str, Any] | None, source: str = "config") -> KitConfig:
    """Build and validate a config from parsed YAML; raise ConfigError with every problem.

    Schema (type) problems and semantic problems are reported together: a misspelt key does not
    hide the other problems."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([problem("<root>", data, "a config file must be a YAML mapping",
                                   "start the file with keys such as 'name:' and 'region:'")],
                          source)
    try:
        cfg = KitConfig.model_validate(data)
    except ValidationError as err:
        problems = _problems_from_pydantic(err)
        problems += _semantic_after_type_errors(data, err)
        raise ConfigError(problems, source) from None
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def load_config(path: str | Path | None = None) -> KitConfig:
    """Load and validate a config file; ``None`` returns the validated built-in default.

    A problem whose value YAML read as a number, a boolean or null where text was meant
    (``kubernetes_version: 1.30`` is the number 1.3, ``backup: yes`` is true) is told as that
    trap, with the line and the text as written."""
    if path is None:
        return parse_config({}, "built-in default config")
    data = read_config_file(path)
    try:
        return parse_config(data, str(path))
    except ConfigError as err:
        text = Path(path).read_text(encoding="utf-8")
        raise ConfigError([_explain_scalar_trap(p, text) for p in err.problems], str(path)) \
            from None


def _scalar_node(text: str, dotted: str) -> yaml.ScalarNode | None:
    """The YAML scalar node at a dotted config path (mapping keys only), or None."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    for part in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
    return node if isinstance(node, yaml.ScalarNode) else None


def _explain_scalar_trap(p: Problem, text: str) -> Problem:
    """``p`` told as the unquoted-scalar trap where YAML read text as a number, a boolean or null
    (``1.30``, ``yes``, ``~``), with the line and a fix that quotes the source text: quoting the
    value read instead (``"true"`` for ``yes``) would change what the user wrote."""
    value = p.value
    if not (value is None or isinstance(value, (bool, int, float))) or \
            not p.rule.startswith(TEXT_EXPECTED):
        return p
    node = _scalar_node(text, p.subject)
    if node is None or node.style is not None or not node.value:  # quoted, or nothing written
        return p
    written = node.value
    key = p.subject.rsplit(".", 1)[-1]
    where = f"line {node.start_mark.line + 1}: YAML reads the unquoted {written} as"
    if value is None:
        return problem(p.subject, value, f"{where} null (no value), not the text {written!r}",
                       f'quote it if that text is meant: {key}: "{written}"')
    if isinstance(value, bool):
        read, trap = str(value).lower(), "unquoted-boolean"
    else:
        read, trap = f"the number {value!r}", "quoted-number"
    return problem(p.subject, value,
                   f"{where} {read}, not the text {written!r} (the {trap} trap)",
                   f'quote it: {key}: "{written}"')


def json_schema() -> dict[str, Any]:
    """JSON Schema of the config file, for editor autocompletion."""
    schema = KitConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "MoE RL on EKS kit config"
    return schema

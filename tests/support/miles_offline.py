"""Miles v0.1.0's own argument parser, built offline from the pinned upstream sources.

Run as a program in a child process (so no stub leaks into the test process):

    python tests/support/miles_offline.py <upstream dir> < cases.json > results.json

or with ``--serve`` after the upstream dir: one JSON list of cases per input line, one report per
output line, so that one process (tests/support/miles_parser.py keeps one per test worker) serves
every test that parses (building the parser imports the pinned sources: seconds each time).

``cases.json`` is a list of ``{"name", "train_args", "model_script"}``: the arguments the
launcher puts after ``train.py`` and the Miles model script it took the model flags from.
For each case the child builds the parser exactly as Miles' train.py does (rltrainer's
``miles_argument_parser``: Megatron-LM 37f9161 ``add_megatron_arguments`` + Miles v0.1.0
``get_miles_extra_args_provider``, which adds SGLang 0.5.16's ``ServerArgs`` with the
``--sglang-`` prefix), parses the arguments with it, runs the real ``model_args()`` through
Miles' own loader, and reports what disagrees. A case with ``"megatron_validation": true`` also
runs Megatron's own ``validate_args`` and ``TransformerConfig`` on the parsed arguments
(``megatron_validation``; its stand-ins are listed there).

What is real and what is not:

- Real: every ``add_argument`` call and every config dataclass (TransformerConfig,
  TrainingConfig, ...) Megatron derives flags from, Miles' whole argument module, SGLang's
  ``ServerArgs`` dataclass and its ``add_cli_args``, Miles' model scripts and their loader.
- Stubbed: modules those files import that the pinned sources do not include (torch
  kernels, ray, transformers, parts of megatron.core and sglang). A stub only stands in
  for a value; a choice list or type computed from a stub is not enforced (reported as
  ``unenforced``).
- Ours: SGLang's ``arg_groups/arg_utils.py`` (dataclass field -> ``--field-name`` plus
  ``aliases``, ``choices`` or a ``Literal``, ``bool`` -> ``store_true``, ``no_cli`` skipped)
  and ``argparse_actions.py`` (its deprecated-flag actions, which here refuse the flag)
  are not among the pinned files, so a small reading of them is below. Flag names and
  choices still come from the real ``ServerArgs``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import sys
import types
import typing
from pathlib import Path

MILES = "miles-v0.1.0"
MEGATRON = "megatron-lm-37f9161"
SGLANG = "sglang-0.5.16"

STUBBED: list[str] = []


# --- stand-ins for modules the pinned sources do not include ------------------------------------


class _StubMeta(type):
    """A stub class: any attribute, call, index or iteration gives another harmless stub."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__name__}.{name}")

    def __getitem__(cls, item):
        return cls

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]  # used as a decorator: leave the function alone
        return super().__call__()

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def _stub(name: str) -> type:
    return _StubMeta(name, (), {
        "__getattr__": lambda self, attr: _stub(attr),
        "__iter__": lambda self: iter(()),
        "__call__": lambda self, *a, **k: self,
        "__getitem__": lambda self, key: self,
        "__bool__": lambda self: False,
    })


def is_stub(value) -> bool:
    return isinstance(value, _StubMeta) or isinstance(type(value), _StubMeta)


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        STUBBED.append(module.__name__)


class _StubFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: stubs a module only when pinned upstream code imports it and
    nothing else can; imports from the standard library or installed packages fail as usual."""

    def __init__(self, upstream: Path):
        self.upstream = str(upstream)

    def find_spec(self, name, path, target=None):
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen")
                                     or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        if frame is None or not frame.f_code.co_filename.startswith(self.upstream):
            return None
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def _namespace_getattr(package: str, directory: Path):
    """For a pinned package directory without its __init__.py: find a name in its modules."""

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        pattern = re.compile(rf"^(class|def)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", re.M)
        for source in sorted(directory.glob("*.py")):
            if pattern.search(source.read_text(encoding="utf-8", errors="replace")):
                return getattr(importlib.import_module(f"{package}.{source.stem}"), name)
        return _stub(f"{package}.{name}")

    return __getattr__


# --- our reading of SGLang's arg_groups (not among the pinned files) ----------------------------


class Arg:
    def __init__(self, help=None, **kwargs):
        self.help = help
        self.kwargs = kwargs


def add_cli_args_from_dataclass(parser, cls):
    for flags, kwargs in _cli_args(cls):
        parser.add_argument(*flags, **{k: list(v) if k == "choices" else v for k, v in kwargs.items()})


@functools.cache
def _cli_args(cls) -> tuple[tuple[list[str], dict], ...]:
    """(flags, add_argument keywords) of each of ``cls``'s fields, read once per class: its
    annotations are strings evaluated in the module, most of a parser build's time."""
    found = []
    module_globals = vars(sys.modules[cls.__module__])
    for field in dataclasses.fields(cls):
        try:
            hint = eval(field.type, module_globals) if isinstance(field.type, str) else field.type
        except Exception:
            # The annotation names a type from an SGLang module we do not have: the flag name
            # still comes from the field; aliases and no_cli from the annotation's text.
            text = str(field.type)
            if "no_cli=True" in text:
                continue
            found_aliases = re.search(r"aliases=(\[[^\]]*\])", text)
            aliases = ast.literal_eval(found_aliases.group(1)) if found_aliases else []
            found.append((["--" + field.name.replace("_", "-"), *aliases],
                          {"dest": field.name, "nargs": "?"}))
            continue
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        base, *meta = typing.get_args(hint)
        arg = next((m for m in meta if isinstance(m, Arg)), Arg())
        if arg.kwargs.get("no_cli"):
            continue
        flags = ["--" + field.name.replace("_", "-"), *arg.kwargs.get("aliases", [])]
        kwargs = {"dest": field.name}
        inner = ([a for a in typing.get_args(base) if a is not type(None)]
                 if typing.get_origin(base) is typing.Union else [base])
        core = inner[0] if len(inner) == 1 else None
        choices = arg.kwargs.get("choices")
        if choices is None and typing.get_origin(core) is typing.Literal:
            choices = list(typing.get_args(core))
        if core is bool and "action" not in arg.kwargs:
            kwargs["action"] = "store_true"
        else:
            if typing.get_origin(core) in (list, typing.List):
                kwargs["nargs"] = arg.kwargs.get("nargs", "*")
            elif "nargs" in arg.kwargs:
                kwargs["nargs"] = arg.kwargs["nargs"]
            for key in ("action", "const"):
                if key in arg.kwargs:
                    kwargs[key] = arg.kwargs[key]
            if is_stub(kwargs.get("action")):
                del kwargs["action"]  # a custom action from a module we lack: keep its arity
                kwargs["nargs"] = arg.kwargs.get("action_kwargs", {}).get("nargs", "?")
            if choices is not None:
                kwargs["choices"] = list(choices)
        found.append((flags, kwargs))
    return tuple(found)


class _Deprecated(argparse.Action):
    """SGLang's deprecated flags: in the parser, refused when used (the launcher must not)."""

    arity = 0

    def __init__(self, option_strings, dest, nargs=None, new_flag=None, **kwargs):
        kept = {k: v for k, v in kwargs.items() if k in ("default", "required", "help", "metavar")}
        super().__init__(option_strings, dest, nargs=self.arity if nargs is None else nargs, **kept)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is deprecated in SGLang 0.5.16"
                     + (f"; use {self.new_flag}" if self.new_flag else ""))


class _DeprecatedStore(_Deprecated):
    arity = None


class _SglangArgGroups(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__.endswith("arg_utils"):
            module.A = typing.Annotated
            module.Arg = Arg
            module.add_cli_args_from_dataclass = add_cli_args_from_dataclass
        else:
            module.DeprecatedAction = _Deprecated
            module.DeprecatedStoreTrueAction = _Deprecated
            module.DeprecatedStoreConstAction = _Deprecated
            module.DeprecatedAliasStoreAction = _DeprecatedStore
            module.LoRAPathAction = argparse._StoreAction


class _SglangFinder(importlib.abc.MetaPathFinder):
    def __init__(self, upstream: Path):
        self.server_args = upstream / SGLANG / "server_args.py"

    def find_spec(self, name, path, target=None):
        if name == "sglang.srt.server_args":
            return importlib.util.spec_from_file_location(name, self.server_args)
        if name in ("sglang.srt.arg_groups.arg_utils", "sglang.srt.arg_groups.argparse_actions"):
            return importlib.machinery.ModuleSpec(name, _SglangArgGroups())
        return None


def install(upstream: Path) -> None:
    """Make ``megatron``, ``miles`` and ``sglang.srt.server_args`` importable from ``upstream``."""
    sys.path[:0] = [str(upstream / MEGATRON), str(upstream / MILES)]
    sys.meta_path.append(_SglangFinder(upstream))
    sys.meta_path.append(_StubFinder(upstream))
    for root, top in ((upstream / MEGATRON, "megatron"), (upstream / MILES, "miles")):
        for directory in sorted((root / top).rglob("*")):
            if directory.is_dir() and directory.name != "__pycache__" and not (directory / "__init__.py").exists():
                name = ".".join(directory.relative_to(root).parts)
                importlib.import_module(name).__getattr__ = _namespace_getattr(name, directory)
    # Megatron reads each config class's source again (inspect + ast) for its fields' help text
    # on every parser build, about two thirds of a case's time; the text depends on the class
    # alone, so one reading per class serves every case (each build still gets its own dict).
    factory = importlib.import_module("megatron.training.argument_utils").ArgumentGroupFactory
    read, docstrings = factory._get_field_docstrings, {}

    def read_once(self, cls):
        if cls not in docstrings:
            docstrings[cls] = read(self, cls)
        return dict(docstrings[cls])

    factory._get_field_docstrings = read_once


# --- the checks -----------------------------------------------------------------------------------


def _unenforced(parser) -> list[str]:
    """Flags whose values cannot be checked here: choice lists computed from stubs (dropped,
    they would refuse everything) and types that are stubs (they accept anything)."""
    names = []
    for action in parser._actions:
        choices = action.choices
        if choices is not None and (is_stub(choices) or not list(choices) or any(is_stub(c) for c in choices)):
            action.choices = None
            names.append(action.option_strings[0])
        elif is_stub(action.type):
            names.append(action.option_strings[0])
    return sorted(names)


# --- Megatron's own validation of a parsed command ----------------------------------------------
#
# Miles' parse_args (miles/utils/arguments.py:2686-2711) sets rank 0 and the world size, applies
# set_default_megatron_args and runs Megatron's validate_args; the model is then built from
# core_transformer_config_from_args (miles/backends/megatron_utils/model_provider.py:221, the raw
# path; in bridge mode Miles copies the pipeline-split fields onto Megatron-Bridge's provider,
# model_provider.py:84-87, which is not among the pinned sources). Megatron checks the split of the
# layers over the pipeline stages in both: validate_args (megatron/training/arguments.py:567-636)
# and TransformerConfig.__post_init__ (megatron/core/transformer/transformer_config.py:1397-1537).
# Miles' own validate_args (it reads the Hugging Face config) is not run.
#
# Stand-ins for what the offline tree lacks, each for a value the image has: the GPU (an H100 or
# H200, sm_90: --moe-grouped-gemm asks torch.cuda for it, arguments.py:916-918; the CPU torch here
# has no CUDA), megatron/training/utils.py (not pinned: get_device_arch_version, arguments.py:992,
# and update_use_dist_ckpt, arguments.py:312, which Megatron defines as below), and the launcher's
# environment (rltrainer TRAINER_RUNTIME_ENV sets CUDA_DEVICE_MAX_CONNECTIONS=1, which
# arguments.py:1015 wants with tp > 1).


def _update_use_dist_ckpt(args) -> None:
    args.use_dist_ckpt = args.ckpt_format != "torch"


def megatron_validation(parser, args: list[str]) -> str | None:
    """Megatron's validate_args and TransformerConfig on the parsed ``args``: None when both
    accept them, else the exception they raise, as ``Type: message``."""
    import contextlib
    import io
    import os

    import torch

    margs = importlib.import_module("megatron.training.arguments")
    defaults = importlib.import_module("miles.backends.megatron_utils.arguments").set_default_megatron_args
    from rltrainer.contract import TRAINER_RUNTIME_ENV

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    margs.get_device_arch_version = lambda: 9
    margs.update_use_dist_ckpt = _update_use_dist_ckpt
    saved_env = {k: os.environ.get(k) for k in TRAINER_RUNTIME_ENV}
    os.environ.update(TRAINER_RUNTIME_ENV)
    ns = parser.parse_args(args)
    ns.rank = 0
    ns.world_size = ns.actor_num_nodes * ns.actor_num_gpus_per_node
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Megatron prints; stdout carries the reports
            ns = defaults(ns)
            margs.validate_args(ns)
            margs.core_transformer_config_from_args(ns)
    except Exception as exc:  # AssertionError or ValueError: Megatron's own words
        return f"{type(exc).__name__}: {exc}"
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return None


def launch(case: dict) -> dict:
    """``rltrainer launch`` itself (the image build's --check-args step), in this environment."""
    import io

    from rltrainer.launch import main as launch_main

    out, err = io.StringIO(), io.StringIO()
    code = launch_main(case["launch"], out=out, err=err, image_backend=case.get("image_backend"))
    return {"name": case["name"], "exit": code, "stderr": err.getvalue()}


def check(case: dict, upstream: Path) -> dict:
    from miles.utils.external_utils.model_args_utils import load_model_args

    if "launch" in case:
        return launch(case)
    from rltrainer.miles import argument_errors, miles_argument_parser

    args = case["train_args"]
    parser = miles_argument_parser(args)
    unenforced = _unenforced(parser)
    result = {"name": case["name"], "train_args": args, "error": argument_errors(parser, args),
              "unenforced": unenforced, "flags": len(parser._option_string_actions)}
    if case.get("megatron_validation") and result["error"] is None:
        result["megatron_validation"] = megatron_validation(parser, args)
    script = case.get("model_script")
    if script:
        expected = load_model_args(script, model_script_dir=upstream / MILES / "scripts" / "models").split()
        result["model_args"] = expected
        n = len(expected)
        result["model_args_in_argv"] = any(args[i:i + n] == expected for i in range(len(args) - n + 1))
        # Every dest the model flags set must end up with the model's value, except those
        # the run config's expert-parallel backend owns (the dispatcher type, by design).
        if result["error"] is None:
            full = parser.parse_args(args)
            required = [a for a in parser._actions if a.required]
            for action in required:  # the model flags alone lack e.g. --rollout-batch-size
                action.required = False
            alone = parser.parse_args(expected)
            for action in required:
                action.required = True
            changed = []
            for token in expected:
                action = parser._option_string_actions.get(token)
                if action is not None and action.dest not in case.get("owned_dests", []) \
                        and getattr(full, action.dest) != getattr(alone, action.dest):
                    changed.append(f"{token}: model_args() {getattr(alone, action.dest)!r}, "
                                   f"argv {getattr(full, action.dest)!r}")
            result["model_flags_changed"] = changed
    return result


def main() -> int:
    upstream = Path(sys.argv[1])
    install(upstream)
    if sys.argv[2:] == ["--serve"]:  # one JSON list of cases per line in, one report per line out
        for line in sys.stdin:
            report(json.loads(line), upstream)
            sys.stdout.write("\n")
            sys.stdout.flush()
        return 0
    report(json.load(sys.stdin), upstream)
    return 0


def report(cases: list[dict], upstream: Path) -> None:
    results = [check(case, upstream) for case in cases]
    json.dump({"results": results, "stubbed": sorted(set(STUBBED))}, sys.stdout)


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    sys.exit(main())

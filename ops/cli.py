"""`rlkit`: one command-line tool for the kit's day-to-day steps.

Each subcommand lives in its own command module, ``ops/<name>_cmd.py``, which exposes
``register(subparsers)``: it adds its parser (the shared options come from ``ops.options``) and
sets ``func`` to a callable taking the parsed args and returning an exit code. A command module
only parses, calls the operations layer (the other modules of ``ops/``: ``gate``, ``rendering``,
``validation``, ``preflight``, ``teardown``, ``image_build``, ``kube``, ``aws``, ...), prints and
returns; it never imports another command module. Modules are listed here in the order a newcomer
uses them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ops import config_source

# Subcommand modules, in quickstart order.
COMMAND_MODULES = [
    "ops.plan_cmd",
    "ops.check_cmd",
    "ops.image_cmd",
    "ops.render_cmd",
    "ops.validate_cmd",
    "ops.preflight_cmd",
    "ops.gate_cmd",
    "ops.launch_cmd",
    "ops.teardown_cmd",
    "ops.completion_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlkit",
        description="Plan, check, render, gate, launch and tear down MoE RL runs on EKS over EFA.",
        epilog="Each command's config is --config FILE, else $RLKIT_CONFIG, else the built-in "
        "default. Tables: -o json for machines. Tab completion: source <(rlkit completion bash).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    config_source.document_default(parser)
    return parser


DEBUG_ENV = "RLKIT_DEBUG"  # set: unexpected errors show their traceback


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    args = build_parser().parse_args(argv)
    # Like KUBECONFIG for kubectl; read here, in the entry layer, and nowhere below it.
    config_source.resolve(args, os.environ.get(config_source.CONFIG_ENV))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - one line, exit 2, never a traceback by default
        if os.environ.get(DEBUG_ENV):
            raise
        text = str(err)
        text = text if len(text) <= 500 else f"{text[:500]}... ({len(text)} characters)"
        print(f"error: rlkit {args.command} failed: {type(err).__name__}: {text}\nThis is a bug "
              f"in rlkit, not in your input: please report it (set {DEBUG_ENV}=1 to see the "
              "traceback).", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

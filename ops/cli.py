"""`rlkit`: one command-line tool for the kit's day-to-day steps.

Each subcommand lives in its own command module, ``ops/<name>_cmd.py``, which exposes
``register(subparsers)``: it adds its parser (the shared options come from ``ops.options``) and
sets ``func`` to a callable taking the parsed args and returning an exit code. ``COMMANDS`` maps
each command to its module, in the order a newcomer uses them. A command module only parses,
calls the operations layer (the other modules of ``ops/``: ``gate``, ``rendering``,
``validation``, ``preflight``, ``teardown``, ``image_build``, ``kube``, ``aws``, ...), prints and
returns; it never imports another command module.

The conventions every command shares live here: `rlkit`, `rlkit help [COMMAND]` and `--help`
print help; `--version` prints the kit's version and its key pins; a usage error prints the
message first, a short usage line and a "did you mean" (ops/usage.py); a closed stdout ends the
command quietly with status 141 (ops/output.py). Exit codes: docs/cli.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ops import __version__, config_source, usage
from ops.output import EXIT_BROKEN_PIPE, StdoutGuard

# Each command and the module that registers it, in quickstart order (tests/ops/test_ops_cli.py
# holds this equal to what the modules register). A run that names a command builds that module's
# parser alone: importing every command module and building every parser cost about 0.3 s of each
# run, for commands it never uses.
COMMANDS = {
    "plan": "ops.plan_cmd",
    "check": "ops.check_cmd",
    "image": "ops.image_cmd",
    "render": "ops.render_cmd",
    "validate": "ops.validate_cmd",
    "preflight": "ops.preflight_cmd",
    "gate": "ops.gate_cmd",
    "launch": "ops.launch_cmd",
    "status": "ops.launch_cmd",
    "logs": "ops.logs_cmd",
    "teardown": "ops.teardown_cmd",
    "completion": "ops.completion_cmd",
}
COMMAND_MODULES = list(dict.fromkeys(COMMANDS.values()))


def version_text() -> str:
    """The kit's version and the pins that decide what runs on the cluster."""
    from infra.addons import ADDONS
    from infra.versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS

    lines = [f"rlkit {__version__} (moe-rl-eks-kit)",
             f"  kubernetes: {DEFAULT_KUBERNETES_VERSION} by default "
             f"(supported: {', '.join(KUBERNETES_VERSIONS)})"]
    lines += [f"  {a.chart}: chart {a.version}" for a in ADDONS]
    lines.append(f"  python: {sys.version.split()[0]}")
    return "\n".join(lines)


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):  # noqa: A002 - argparse's signature
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        print(version_text())
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with ``command`` (a key of COMMANDS), only the module that registers it,
    which gives that command the same parser without importing the others."""
    parser = usage.Parser(
        prog="rlkit",
        description="Plan, check, render, gate, launch and tear down MoE RL runs on EKS over EFA.",
        epilog="Each command's config is --config FILE, else $RLKIT_CONFIG, else the built-in "
        "default. Results: -o json or -o yaml. Exit codes, output shapes and where state lives: "
        "docs/cli.md. Tab completion: source <(rlkit completion bash).",
    )
    parser.add_argument("--version", action=_Version,
                        help="print the kit's version and its key pins, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES if command is None else [COMMANDS[command]]:
        importlib.import_module(module_name).register(sub)
    h = sub.add_parser("help", help="print the help of rlkit or of one command")
    h.add_argument("topic", nargs="?", metavar="COMMAND", help="the command to explain")
    config_source.document_default(parser)
    return parser


DEBUG_ENV = "RLKIT_DEBUG"  # set: unexpected errors show their traceback


def _help(parser: argparse.ArgumentParser, topic: str | None) -> int:
    if topic is None:
        parser.print_help()
        return 0
    subs = usage.subcommands(parser)
    if topic not in subs:
        parser.error(f"argument COMMAND: invalid choice: {topic!r} (choose from "
                     f"{', '.join(repr(c) for c in subs)})")
    subs[topic].print_help()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one rlkit command; returns its exit code (docs/cli.md lists them)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    guard = StdoutGuard(sys.stdout)
    sys.stdout = guard
    try:
        code = _main(sys.argv[1:] if argv is None else argv)
        try:
            sys.stdout.flush()
        except ValueError:  # a closed test stream
            pass
        return EXIT_BROKEN_PIPE if guard.closed_early else code
    except SystemExit as done:  # argparse: --help, --version, usage errors
        if guard.closed_early:
            return EXIT_BROKEN_PIPE
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    finally:
        if sys.stdout is guard:
            sys.stdout = guard.stream


def _main(argv: list[str]) -> int:
    # Only a command in first place is parsed by its parser alone: anything before it (--help,
    # --version) or any other first word (help, a misspelt command) needs the whole CLI.
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = usage.parse(parser, argv)
    if args.command in (None, "help"):
        return _help(parser, getattr(args, "topic", None))
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

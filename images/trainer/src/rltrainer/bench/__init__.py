"""Fabric benchmarks: ``rltrainer bench allreduce`` and ``rltrainer bench ep``.

Run one process per GPU under torchrun; rank 0 prints JSON lines (see README.md,
"JSON output") that the kit's fabric gate parses.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from . import allreduce, ep

COMMANDS = {"allreduce": allreduce, "ep": ep}


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.main.__doc__, description=module.main.__doc__)
        module.add_arguments(p)
        p.set_defaults(_bench=module)


def build_parser(prog: str = "rltrainer bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Fabric benchmarks (run under torchrun).")
    sub = p.add_subparsers(dest="bench", required=True, metavar="{allreduce,ep}")
    add_subcommands(sub)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``python -m rltrainer.bench {allreduce,ep} ...``"""
    args = build_parser().parse_args(argv)
    return args._bench.run_main(args, out or sys.stdout, err or sys.stderr)

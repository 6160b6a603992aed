"""The ``rltrainer`` console script: one entry point, one module per command.

Each command owns its argument parser (so ``python -m rltrainer.launch`` and
``rltrainer launch`` are the same program); this module only routes.
"""

from __future__ import annotations

import sys
from typing import Sequence

from . import __version__

USAGE = f"""\
usage: rltrainer <command> [options]

rltrainer {__version__}: launcher and fabric tooling of the MoE RL trainer image.

commands:
  launch       validate the run config, restore the newest complete S3 checkpoint, run Miles, upload checkpoints
               rltrainer launch --config /etc/rltrainer/run.yaml [--dry-run] [--check-args]
  bench        fabric benchmarks, under torchrun:
               rltrainer bench allreduce [--min-bytes 8M --max-bytes 2G --iters 20 --warmup 5 --device cuda|cpu]
               rltrainer bench ep [--tokens-per-rank 4096 --hidden 2048 --topk 8 --experts 128 --backend nccl|deepep]
  nodecheck    check GPUs, EFA devices, GDRCopy, huge pages, memlock, /dev/shm and the NCCL OFI plugin
               rltrainer nodecheck --expect-gpus 8 --expect-efa 32
  checkpoint   list, upload or restore S3 checkpoints by hand
               rltrainer checkpoint {{list,upload,restore}} --s3-uri s3://bucket/prefix/ [--local-dir /checkpoints]
               (upload and restore: --no-data-cursor for a run with --disable-rollout-global-dataset)

Run `rltrainer <command> --help` for the options of one command.
"""


def _launch(argv: Sequence[str]) -> int:
    from .launch import main

    return main(argv)


def _bench(argv: Sequence[str]) -> int:
    from .bench import main

    return main(argv)


def _nodecheck(argv: Sequence[str]) -> int:
    from .nodecheck import main

    return main(argv)


def _checkpoint(argv: Sequence[str]) -> int:
    from .checkpoint_cli import main

    return main(argv)


COMMANDS = {"launch": _launch, "bench": _bench, "nodecheck": _nodecheck, "checkpoint": _checkpoint}


def main(argv: Sequence[str] | None = None) -> int:
    """Route ``rltrainer <command> ...`` to the command's own parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"rltrainer {__version__}")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"rltrainer: unknown command {argv[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())

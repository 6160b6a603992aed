"""Run Miles' ``train.py`` so that a resumed run starts at the saved rollout.

Miles v0.1.0 (radixark/miles 78527b9) loses the start of a resumed run in bridge mode:
``miles/utils/arguments.py`` ``miles_validate_args`` sets ``args.start_rollout_id = 0``
whenever ``--megatron-to-hf-mode bridge`` is on, even when ``--load`` holds a checkpoint
and even when ``--start-rollout-id`` was given. ``miles/ray/placement_group.py`` then
keeps that 0 (it derives the start from the loaded checkpoint only when it is None), so the
run retrains from rollout 0 on the loaded weights and reloads the data cursor of rollout -1
(none). Upstream fixed it after the tag (commit 49cac7b52, "resume from the checkpoint step
in bridge mode", #2682): the reset happens only when there is no checkpoint to load.

The launcher passes ``--start-rollout-id <saved + 1>`` on a resume and runs ``train.py``
through this module, which applies exactly that upstream fix: when the run loads a Megatron
checkpoint (the tracker file exists under ``--load``), the start the command line gave is
kept. Fresh runs, and Miles versions that already have the fix, are unaffected.

Usage (what the launcher runs): ``python3 -m rltrainer.miles_resume /root/miles/train.py <miles args>``.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Sequence

TRACKER_FILE = "latest_checkpointed_iteration.txt"


def keep_explicit_start(validate):
    """Wrap Miles' ``miles_validate_args`` so that a resume keeps the given ``--start-rollout-id``."""

    def miles_validate_args(args):
        wanted = getattr(args, "start_rollout_id", None)
        result = validate(args)
        load = getattr(args, "load", None)
        resuming = bool(load) and os.path.isfile(os.path.join(load, TRACKER_FILE))
        if (wanted is not None and resuming and getattr(args, "megatron_to_hf_mode", None) == "bridge"
                and args.start_rollout_id != wanted):
            print(f"rltrainer: Miles reset start_rollout_id to {args.start_rollout_id} in bridge mode; "
                  f"resuming at rollout {wanted} from {load} (upstream fix 49cac7b52)", file=sys.stderr, flush=True)
            args.start_rollout_id = wanted
        return result

    miles_validate_args.__wrapped__ = validate
    return miles_validate_args


def main(argv: Sequence[str] | None = None) -> None:
    """Patch Miles' argument validation, then run ``train.py`` as ``__main__`` with the remaining arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or not argv[0].endswith(".py"):
        sys.exit("usage: python3 -m rltrainer.miles_resume /root/miles/train.py <miles arguments>")
    train_py = os.path.abspath(argv[0])
    # what `python3 train.py` would have: the script's directory first on sys.path, its argv
    sys.path.insert(0, os.path.dirname(train_py))
    sys.argv = [train_py, *argv[1:]]
    try:
        import miles.utils.arguments as miles_arguments
    except ImportError as exc:  # not Miles' train.py: run it untouched and let it speak for itself
        print(f"rltrainer: cannot import miles.utils.arguments ({exc}); running {train_py} without the "
              "resume fix", file=sys.stderr, flush=True)
    else:
        miles_arguments.miles_validate_args = keep_explicit_start(miles_arguments.miles_validate_args)
    runpy.run_path(train_py, run_name="__main__")


if __name__ == "__main__":
    main()

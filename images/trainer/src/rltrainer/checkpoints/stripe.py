"""Striping the checkpoint directory across every Lustre storage target.

A Lustre file is stored on one object storage target (OST) unless its directory says
otherwise, so a multi-hundred-GiB save made of few large shards can fill single OSTs while
the file system as a whole shows free space: an FSx for Lustre user hit ENOSPC with 459 GB
free that way (awslabs/awsome-distributed-ai #1225, review). ``lfs setstripe -c -1`` on the
checkpoint directory makes every file created below it (subdirectories inherit the layout)
spread over all OSTs. Without the ``lfs`` tool (not Lustre, or no Lustre client utilities in
the image) the launcher says so and goes on: striping is a capacity safeguard, not a
correctness one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, TextIO


def stripe_across_targets(directory: str | Path, log: TextIO | None = None, *,
                          which: Callable[[str], str | None] = shutil.which,
                          run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> bool:
    """Run ``lfs setstripe -c -1 <directory>``; True when it did, False (with a log line) when it could not."""
    out = log or sys.stderr
    lfs = which("lfs")
    if lfs is None:
        print(f"rltrainer: no lfs command here; not striping {directory} across storage targets "
              "(only Lustre needs it: single-target ENOSPC, awsome-distributed-ai #1225)", file=out, flush=True)
        return False
    Path(directory).mkdir(parents=True, exist_ok=True)
    try:
        proc = run([lfs, "setstripe", "-c", "-1", str(directory)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"rltrainer: lfs setstripe on {directory} failed ({exc}); saves stay on Lustre's default layout",
              file=out, flush=True)
        return False
    if proc.returncode != 0:
        print(f"rltrainer: lfs setstripe on {directory} failed (exit {proc.returncode}: "
              f"{(proc.stderr or '').strip()[:300]}); saves stay on Lustre's default layout (not Lustre?)",
              file=out, flush=True)
        return False
    print(f"rltrainer: striped {directory} across all storage targets (lfs setstripe -c -1)", file=out, flush=True)
    return True

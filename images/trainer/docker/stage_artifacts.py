#!/usr/bin/env python3
"""Copy what a build stage built into one tree, so the final image takes it without the tools.

The trainer image is a multi-stage build: the build stages add compilers, CMake and headers and
build GDRCopy, NVSHMEM, NCCL and DeepEP; the variant stages start again from the runtime base and
``COPY --from=<build stage> /opt/stage/ /``. This script fills /opt/stage with:

- every path given with ``--path`` (a directory or a file, copied to the same absolute place; a
  missing one fails the build, unless given with ``--optional-path``);
- every file of each installed Python distribution given with ``--dist`` (its RECORD, read with
  ``importlib.metadata``), at its absolute place, so ``deep_ep`` lands in the same site-packages.

Usage: stage_artifacts.py --dest /opt/stage [--path P]... [--optional-path P]... [--dist NAME]...
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sys
from pathlib import Path


class StageError(RuntimeError):
    """Something the variant stage needs was not built."""


def _copy(src: Path, dest_root: Path) -> int:
    if not src.is_absolute():
        raise StageError(f"{src}: give absolute paths")
    target = dest_root / src.relative_to("/")
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        return sum(1 for p in target.rglob("*") if not p.is_dir())
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, target, follow_symlinks=False)
    return 1


def dist_files(name: str, path: list[str] | None = None) -> list[Path]:
    """Absolute paths of every file an installed distribution recorded (RECORD)."""
    try:
        dist = next(iter(importlib.metadata.distributions(name=name, path=path or sys.path)))
    except StopIteration:
        raise StageError(f"Python distribution {name!r} is not installed: its build step did not install it") from None
    files = dist.files
    if not files:
        raise StageError(f"Python distribution {name!r} has no RECORD of its files: cannot move it to the final image")
    return [Path(os.path.normpath(Path(dist.locate_file(f)).absolute())) for f in files]


def stage(dest: Path, paths: list[str], optional: list[str], dists: list[str],
          search_path: list[str] | None = None) -> dict[str, int]:
    """Copy into ``dest``; returns how many files each item contributed."""
    counts: dict[str, int] = {}
    for p in paths + optional:
        src = Path(p)
        if not src.exists() and not src.is_symlink():
            if p in optional:
                counts[p] = 0
                continue
            raise StageError(f"{p} does not exist: the build step that makes it did not run or failed")
        counts[p] = _copy(src, dest)
    for name in dists:
        files = [f for f in dist_files(name, search_path) if f.exists() or f.is_symlink()]
        for f in files:
            _copy(f, dest)
        counts[f"dist:{name}"] = len(files)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dest", required=True)
    p.add_argument("--path", action="append", default=[])
    p.add_argument("--optional-path", action="append", default=[])
    p.add_argument("--dist", action="append", default=[])
    args = p.parse_args(argv)
    try:
        counts = stage(Path(args.dest), args.path, args.optional_path, args.dist)
    except StageError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    for item, n in counts.items():
        print(f"staged {item}: {n} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

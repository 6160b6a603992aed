"""Room on the checkpoint file system for this run's next saves, checked once before training.

The kit sizes the shared file system for one run: the reference weights plus ``keep_local + 1``
saves. Retention (``retention``) keeps this run inside that, but another run's directory beside
this one (``/fsx/checkpoints/<other run>/``, its newest ``keep_local`` saves left after it
finished) is not this run's to delete. Without a check, a second run fits its first save and
fails with ENOSPC at the next one; KubeRay's retry resumes from the first save and fails at the
same point, every time, on a whole GPU cluster.

So before training the launcher asks ``room_for_saves``: this run will write saves until it holds
``keep_local`` finished ones plus the one being written, that is
``keep_local + 1 - min(finished, keep_local)`` saves more, each of size S: the size of this run's
newest finished local save when there is one (measured), else the kit's catalog estimate in
``RLTRAINER_SAVE_GIB`` on the Ray head (an environment variable, not a run.yaml key: a trainer
image built before the check still reads the kit's run.yaml). With neither there is nothing to
check against; a value that is not a positive number is logged and treated as absent.

When the free space is short and other runs' directories are beside this one,
``shortage_message`` says how short, lists them with their sizes, and names the fixes, and the
launcher does not start. When it is short with no other directory there, it only warns and the
run starts: config validation sizes the file system for the weights plus ``keep_local + 1``
saves with little to spare (deepseek-v3: about 148 GiB of 19200), so file-system overhead,
staged inputs or logs can make a valid config look short on a fresh file system, and there is
nothing for the user to delete. A save that does not fit then fails with ENOSPC, as it did
before this check. Nothing here deletes anything.

The check runs after staging, so this run's staged inputs (``<local_dir>/_inputs``: the
reference weights the file system is sized for) are already out of the free space, and only
those of the current sources: staging deletes copies of earlier ``hf_checkpoint`` or
``prompt_data`` values first (``rltrainer.staging``). They are neither a save nor another run's
directory; a short message gives their size, so the numbers add up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, TextIO

from ..contract import SAVE_SIZE_ESTIMATE_ENV
from . import retention
from .layout import INPUTS_DIR, iter_dirname
from .local import finished_iterations

GIB = 1 << 30


@dataclass(frozen=True)
class Room:
    """What this run's next saves need on the file system of ``local_dir``, and what it has."""

    local_dir: Path
    free_bytes: int
    save_bytes: int  # S: the size of one save
    save_source: str  # where S comes from, in words
    finished: int  # this run's finished local saves counted (at most keep_local)
    keep_local: int

    @property
    def saves_to_write(self) -> int:
        """Saves written before retention keeps the run level: up to keep_local, plus one in progress."""
        return saves_to_write(self.keep_local, self.finished)

    @property
    def need_bytes(self) -> int:
        return self.saves_to_write * self.save_bytes

    @property
    def enough(self) -> bool:
        return self.free_bytes >= self.need_bytes


def saves_to_write(keep_local: int, finished: int) -> int:
    """How many more saves the file system must take: ``keep_local + 1 - min(finished, keep_local)``."""
    return keep_local + 1 - min(max(finished, 0), keep_local)


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (where the save directory would be created)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def room_for_saves(local_dir: str | Path, keep_local: int, save_gib: float | None, *,
                   free_bytes: Callable[[Path], int] | None = None) -> Room | None:
    """The room check for a run saving into ``local_dir``; None when there is no size to check
    against (no finished save of this run there and no ``save_gib``, the kit's estimate).
    ``free_bytes`` defaults to ``retention.disk_free_bytes`` (tests pass their own)."""
    root = Path(local_dir)
    finished = finished_iterations(root)
    if finished:
        size = retention.save_bytes(root, finished[-1])
        source = f"{iter_dirname(finished[-1])}, this run's newest finished save, measured"
    elif save_gib is not None:
        size = math.ceil(save_gib * GIB)
        source = f"{SAVE_SIZE_ESTIMATE_ENV}={save_gib:g} on the Ray head, the kit's catalog estimate"
    else:
        return None
    measure = free_bytes or retention.disk_free_bytes  # looked up now: a test may replace it
    return Room(local_dir=root, free_bytes=measure(_existing(root)), save_bytes=size, save_source=source,
                finished=min(len(finished), keep_local), keep_local=keep_local)


def other_directories(local_dir: str | Path) -> list[tuple[Path, int]]:
    """The directories beside ``local_dir`` (other runs' under the checkpoints root) with their
    bytes, biggest first. Names starting with ``_`` are left out, and so is everything when the
    parent is a file system's root (``/`` for a pod's own ``/checkpoints``: not a checkpoints root)
    or another file system."""
    root = Path(local_dir)
    parent = root.parent
    if parent == root or not parent.is_dir() or os.path.ismount(parent):
        return []
    device = parent.stat().st_dev
    found = []
    for child in parent.iterdir():
        if (child.name == root.name or child.name.startswith("_") or child.is_symlink()
                or not child.is_dir() or child.stat().st_dev != device):
            continue
        found.append((child, retention.tree_bytes(child)))
    return sorted(found, key=lambda item: (-item[1], item[0].name))


def describe(room: Room) -> str:
    """One log line for a run that has the room."""
    return (f"rltrainer: room for the next saves: {_gib(room.free_bytes)} free on the file system of "
            f"{room.local_dir}, {_gib(room.need_bytes)} needed ({room.saves_to_write} save(s) of "
            f"{_gib(room.save_bytes)}, from {room.save_source})")


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def shortage_message(room: Room, s3_uri: str, others: list[tuple[Path, int]], staged_bytes: int = 0) -> str:
    """The launcher's one message for a file system short of room (several lines): the numbers,
    where the save size comes from, this run's staged inputs (``staged_bytes`` in its
    ``_inputs``, when any), the other directories and the fixes. With ``others`` it refuses the
    run; without, it is a warning and the run starts (module docstring)."""
    n, kept = room.saves_to_write, room.keep_local
    held = ("none of this run's saves is here yet" if not room.finished else
            f"{room.finished} finished save(s) of this run already here")
    numbers = (f"{_gib(room.free_bytes)} free, {_gib(room.need_bytes)} needed "
               f"({n} save(s) of {_gib(room.save_bytes)}: checkpoint.keep_local {kept} kept plus the one being "
               f"written, {held}; save size from {room.save_source})")
    if others:
        lines = [f"rltrainer launch: the file system of {room.local_dir} has no room for this run's next saves, "
                 f"nothing was started: {numbers}. Training would stop with ENOSPC at a save, "
                 "and so would every retry."]
    else:
        lines = [f"rltrainer launch: WARNING: the file system of {room.local_dir} may not have room for this "
                 f"run's next saves: {numbers}. No other run's directory is beside it to delete, so training "
                 "starts anyway: if a save does not fit, training stops with ENOSPC at that save, as it did "
                 "before this check, and so would every retry."]
    if staged_bytes:
        lines.append(f"Counted as used: this run's staged inputs, {_gib(staged_bytes)} in "
                     f"{room.local_dir / INPUTS_DIR} (the current model.hf_checkpoint and data.prompt_data only: "
                     "copies staged for earlier ones are deleted before staging).")
    if others:
        lines.append(f"Other directories under {room.local_dir.parent}, biggest first:")
        lines += [f"  {path}  {_gib(size)}" for path, size in others]
    parent = room.local_dir.parent
    grow = "grow the file system (the kit's storage.shared_filesystem.capacity_gib)"
    if kept > 1:
        fewer = saves_to_write(kept - 1, room.finished) * room.save_bytes
        grow += f", or keep fewer saves (checkpoint.keep_local {kept - 1} needs {_gib(fewer)})"
    grow += ". Then launch again."
    if not others:
        lines.append(f"Fix, if it does: {grow}")
        return "\n".join(lines)
    prefix = s3_uri.rstrip("/").rsplit("/", 1)[0]
    lines.append(
        "Fix: delete another run's local directory once its saves are complete in S3 (they stay in "
        f"{prefix}/<run>/ and that run resumes from there; `rltrainer checkpoint list --s3-uri "
        f"{prefix}/<run>/` lists them), e.g. `rm -rf {parent}/<run>` from a pod that mounts {parent}; "
        f"or {grow}")
    return "\n".join(lines)


def save_gib_from_env(env: Mapping[str, str] | None, log: TextIO) -> float | None:
    """The kit's estimate of one save in GiB (``RLTRAINER_SAVE_GIB`` in ``env``, default the
    process environment); None when it is absent, or when it is not a positive finite number,
    which is logged once: a bad estimate must not stop a run."""
    value = (os.environ if env is None else env).get(SAVE_SIZE_ESTIMATE_ENV)
    if value is None:
        return None
    try:
        gib = float(value)
    except ValueError:
        gib = math.nan
    if not (math.isfinite(gib) and gib > 0):
        print(f"rltrainer: {SAVE_SIZE_ESTIMATE_ENV}={value!r} is not a positive number of GiB (the kit's "
              "estimate of one save); checking without it", file=log, flush=True)
        return None
    return gib


def check_room(checkpoint, log: TextIO, *, env: Mapping[str, str] | None = None,
               free_bytes: Callable[[Path], int] | None = None) -> bool:
    """Run the room check for a run's ``checkpoint`` config (``local_dir``, ``keep_local``,
    ``s3_uri``), with the kit's save estimate from ``env`` (default the process environment), and
    log its outcome in one message; False when the file system is short and other runs'
    directories are beside this one (the launcher then exits without training); short without
    them, a warning and True. A check that cannot read the file system says so and lets the run
    start: it must not stop a run on its own failure."""
    try:
        room = room_for_saves(checkpoint.local_dir, checkpoint.keep_local, save_gib_from_env(env, log),
                              free_bytes=free_bytes)
        if room is None:
            print(f"rltrainer: no finished save of this run in {checkpoint.local_dir} and no {SAVE_SIZE_ESTIMATE_ENV} "
                  "from the kit: not checking that the file system has room for its saves", file=log, flush=True)
            return True
        if room.enough:
            print(describe(room), file=log, flush=True)
            return True
        others = other_directories(checkpoint.local_dir)
        staged = retention.tree_bytes(Path(checkpoint.local_dir) / INPUTS_DIR)
        message = shortage_message(room, checkpoint.s3_uri, others, staged)
    except OSError as exc:
        print(f"rltrainer: could not check the room for this run's saves ({exc}); starting anyway",
              file=log, flush=True)
        return True
    print(message, file=log, flush=True)
    return not others  # only other runs' directories are the user's to free

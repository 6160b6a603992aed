"""Keeping the local checkpoint directory inside its file system for a run that saves for days.

Megatron keeps every save it writes, and the launcher moves torn saves to ``_quarantine/`` on
the same file system. The kit sizes that file system for the reference weights plus
``keep_local + 1`` saves (the kept ones and the one being written), so without a policy the
run stops at the first save that does not fit, and every retry hits the same wall.

The policy, applied by the upload watcher after each scan and by the resume before training:

- A local save is deleted only when S3 holds it complete (its manifest is written), it is
  older than the newest ``keep_local`` finished saves (at or below Megatron's tracker), it is
  not the newest save complete in S3, not the one the tracker points at (the one restored or
  resumed from) and not one the caller protects. A save above the tracker is being written and
  is never touched here.
- A local save whose number S3 has quarantined can never be uploaded (the store does not write
  to a quarantined iteration). After a fallback from a bad save N, Megatron saves N again on the
  same grid; that save is deleted on the same terms, once S3 holds a newer save complete.
  Before, it stayed for good, and the next save after it did not fit.
- Deleting is two steps: the save's directory and data cursor are first renamed into
  ``_pruning/`` (one rename each, atomic on one file system), then removed. A pod that dies
  half way through a delete leaves a partial tree only under ``_pruning/``, never a partial
  ``iter_*`` directory that a later resume could mistake for a save; the next prune clears it.
- In S3, with ``keep_s3`` > 0 (0, the default, keeps every save there), complete saves beyond
  the newest ``keep_s3`` are deleted, but never one still on the shared file system (every
  uploader uploads from there, and a local save is deleted only once S3 holds it) and never the
  one resumed from. A delete removes the manifest first, so a save is complete or gone; the
  objects of a delete cut short (no manifest, older than every save kept, not on the file system)
  are deleted when the next pod resumes, and so are quarantined saves older than every save kept
  (removing the marker would not bring one back: keep_s3 would prune it at once). On a versioned bucket every version goes
  (``S3CheckpointStore.delete``): a delete marker alone would keep the bytes stored until the
  bucket's lifecycle expires them. Without ``keep_s3``, quarantined saves are left alone.
- Quarantine is bounded: at most ``keep_quarantined`` batches of torn saves stay (newest
  first), and fewer when the file system's free space is below what the next save needs (the
  size of the newest finished save): a torn save kept for inspection must never be what makes
  the next save fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, TextIO

from .layout import LOCAL_QUARANTINE_DIR, PRUNING_DIR, iter_dirname, rollout_state_relpath
from .local import finished_iterations, local_iterations

if TYPE_CHECKING:
    from .store import S3CheckpointStore


def disk_free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (what an unprivileged writer may use)."""
    return shutil.disk_usage(path).free


def tree_bytes(path: Path) -> int:
    """Bytes in the regular files under ``path`` (0 when it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def save_bytes(local_dir: Path, iteration: int) -> int:
    """Bytes of one local save: its directory and its data cursor."""
    return tree_bytes(local_dir / iter_dirname(iteration)) + tree_bytes(local_dir / rollout_state_relpath(iteration))


@dataclass
class Retention:
    """How many saves and quarantined torn saves stay on the local file system."""

    keep_local: int = 1
    keep_quarantined: int = 1
    free_bytes: Callable[[Path], int] = disk_free_bytes
    keep_s3: int = 0  # complete saves kept in S3; 0 keeps every one

    def __post_init__(self) -> None:
        if self.keep_local < 1:
            # the newest finished save is the resume point that needs no download; never delete it
            raise ValueError(f"keep_local must be >= 1, got {self.keep_local}")
        if self.keep_quarantined < 0:
            raise ValueError(f"keep_quarantined must be >= 0, got {self.keep_quarantined}")
        if self.keep_s3 < 0:
            raise ValueError(f"keep_s3 must be >= 0 (0 keeps every save in S3), got {self.keep_s3}")

    def prunable(self, local_dir: str | Path, complete_in_s3: Iterable[int], protect: Iterable[int] = (),
                 quarantined_in_s3: Iterable[int] = ()) -> list[int]:
        """The local saves this policy would delete now, ascending: complete in S3, or under a
        number S3 has quarantined and older than the newest save complete in S3."""
        finished = finished_iterations(local_dir)
        if not finished:
            return []  # no finished save yet, or a restore is under way: nothing is safe to delete
        complete = set(complete_in_s3)
        newest = max(complete, default=None)
        # the tracker's own save, when on disk, is finished[-1]: keep_local >= 1 keeps it
        keep = set(finished[-self.keep_local:]) | set(protect)
        if newest is not None:
            keep.add(newest)
        superseded = {i for i in quarantined_in_s3 if newest is not None and i < newest}
        return [i for i in finished if (i in complete or i in superseded) and i not in keep]

    def prune(self, local_dir: str | Path, complete_in_s3: Iterable[int], protect: Iterable[int] = (),
              log: TextIO | None = None, quarantined_in_s3: Iterable[int] = ()) -> list[int]:
        """Delete what ``prunable`` names, then bound the quarantine; returns the iterations deleted."""
        root = Path(local_dir)
        out = log or sys.stderr
        _clear_pruning(root)
        complete = set(complete_in_s3)
        doomed = self.prunable(root, complete, protect, quarantined_in_s3)
        for iteration in doomed:
            _delete_save(root, iteration)
        for named, why in (([i for i in doomed if i in complete], "complete in S3"),
                           ([i for i in doomed if i not in complete],
                            "quarantined in S3, so never uploaded; a newer save is complete there")):
            if named:
                print(f"rltrainer: deleted local {', '.join(iter_dirname(i) for i in named)} ({why}; "
                      f"keeping the newest {self.keep_local} finished save(s) on {root})", file=out, flush=True)
        self.bound_quarantine(root, out)
        return doomed

    def s3_prunable(self, complete_in_s3: Iterable[int], on_disk: Iterable[int],
                    protect: Iterable[int] = ()) -> list[int]:
        """The complete S3 saves this policy would delete now, ascending."""
        if self.keep_s3 == 0:
            return []
        complete = sorted(set(complete_in_s3))
        keep = set(complete[-self.keep_s3:]) | set(on_disk) | set(protect)
        return [i for i in complete if i not in keep]

    def prune_s3(self, store: S3CheckpointStore, complete_in_s3: Iterable[int], local_dir: str | Path,
                 protect: Iterable[int] = (), log: TextIO | None = None, orphans: bool = False,
                 quarantined_in_s3: Iterable[int] = (), present_in_s3: Iterable[int] | None = None) -> list[int]:
        """Delete what ``s3_prunable`` names from ``store``; with ``orphans``, also the objects of
        deletes cut short below every save kept, and the quarantined saves below them (one
        would be pruned even with its marker removed: older than every save kept). Returns the
        complete iterations deleted. ``present_in_s3``: the iterations with any object in the
        listing ``complete_in_s3`` and ``quarantined_in_s3`` came from, so the orphans are read
        from it rather than from a second listing of the run (``store.orphans``)."""
        if self.keep_s3 == 0:
            return []
        out = log or sys.stderr
        complete = set(complete_in_s3)
        on_disk = set(local_iterations(Path(local_dir)))
        doomed = self.s3_prunable(complete, on_disk, protect)
        for iteration in doomed:
            store.delete(iteration)
        if doomed:
            print(f"rltrainer: deleted {', '.join(iter_dirname(i) for i in doomed)} from {store.uri} (keeping "
                  f"the newest {self.keep_s3} complete save(s) there)", file=out, flush=True)
        kept = complete - set(doomed)
        if orphans and kept:
            # an upload under way is of a save on the file system, or above every save kept
            found = (store.orphans() if present_in_s3 is None
                     else set(present_in_s3) - complete - set(quarantined_in_s3))
            leftovers = [i for i in sorted(found) if i < min(kept) and i not in on_disk]
            for iteration in leftovers:
                store.delete_objects(iteration)
            if leftovers:
                print(f"rltrainer: deleted what a cut-short delete left of {', '.join(map(iter_dirname, leftovers))} "
                      f"in {store.uri} (no manifest, older than every save kept)", file=out, flush=True)
            spoilt = sorted(i for i in quarantined_in_s3
                            if i < min(kept) and i not in on_disk and i not in set(protect))
            for iteration in spoilt:
                store.delete(iteration)  # its manifest (if any) first, the marker with the rest
            if spoilt:
                print(f"rltrainer: deleted quarantined {', '.join(map(iter_dirname, spoilt))} from {store.uri} "
                      f"(older than every save kept: keep_s3 {self.keep_s3} would delete it even with its "
                      "marker removed)", file=out, flush=True)
        return doomed

    def bound_quarantine(self, local_dir: str | Path, log: TextIO | None = None) -> list[str]:
        """Delete quarantine batches beyond ``keep_quarantined`` and any that crowd out the next save."""
        root = Path(local_dir)
        qroot = root / LOCAL_QUARANTINE_DIR
        if not qroot.is_dir():
            return []
        batches = sorted(p for p in qroot.iterdir() if p.is_dir())  # named by UTC stamp: oldest first
        removed: list[str] = []
        while batches and len(batches) > self.keep_quarantined:
            removed.append(_remove(root, batches.pop(0)))
        if batches:
            finished = finished_iterations(root)
            need = save_bytes(root, finished[-1]) if finished else max(tree_bytes(b) for b in batches)
            while batches and self.free_bytes(root) < need:
                removed.append(_remove(root, batches.pop(0)))
        if removed:
            print(f"rltrainer: deleted quarantined torn saves {', '.join(removed)} (at most "
                  f"{self.keep_quarantined} kept, and never at the cost of the next save's space)",
                  file=log or sys.stderr, flush=True)
        return removed


def _remove(root: Path, path: Path) -> str:
    """Rename ``path`` into ``_pruning/`` and delete it there; returns its name relative to ``root``."""
    rel = path.relative_to(root).as_posix()
    dest = root / PRUNING_DIR / rel.replace("/", "__")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, dest)
    if dest.is_dir():
        shutil.rmtree(dest, ignore_errors=True)
    else:
        dest.unlink(missing_ok=True)
    try:
        dest.parent.rmdir()  # _pruning/ itself, once empty
    except OSError:
        pass
    return rel


def _delete_save(root: Path, iteration: int) -> None:
    # The cursor goes first: a save directory left without its cursor by a crash here fails
    # check_local_save, so no resume falls back to it, and the next prune deletes it.
    for rel in (rollout_state_relpath(iteration), iter_dirname(iteration)):
        if (root / rel).exists():
            _remove(root, root / rel)


def _clear_pruning(root: Path) -> None:
    """Finish deletes a previous process started (it died between the rename and the delete)."""
    leftovers = root / PRUNING_DIR
    if leftovers.exists():
        shutil.rmtree(leftovers, ignore_errors=True)

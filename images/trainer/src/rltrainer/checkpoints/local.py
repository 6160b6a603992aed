"""The local checkpoint directory: Megatron's tracker, which saves are whole, and moving torn
saves out of the way."""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, TextIO

from .layout import ITER_DIR, LOCAL_QUARANTINE_DIR, TRACKER_FILE, iter_dirname, rollout_state_relpath
from .manifest import IncompleteCheckpoint


def _tracker_text(local_dir: str | Path) -> str | None:
    """What the tracker file says, stripped (bytes that are not ASCII read as U+FFFD), or None."""
    try:
        return (Path(local_dir) / TRACKER_FILE).read_bytes().decode("ascii", errors="replace").strip()
    except FileNotFoundError:
        return None


def read_tracker(local_dir: str | Path) -> int | None:
    """The iteration in Megatron's tracker file, or None (missing, empty, unreadable or ``release``)."""
    text = _tracker_text(local_dir)
    return int(text) if text and text.isdigit() else None


def write_tracker(local_dir: str | Path, iteration: int) -> None:
    """Atomically point Megatron's tracker at ``iteration``."""
    local_dir = Path(local_dir)
    tmp = local_dir / f".{TRACKER_FILE}.tmp"
    tmp.write_text(f"{iteration}\n")
    os.replace(tmp, local_dir / TRACKER_FILE)


def finished_iterations(local_dir: str | Path) -> list[int]:
    """Saves Megatron has finished: iteration directories at or below its tracker, ascending
    (none without a tracker; iteration 0 counts, a first save after rollout 0 is one)."""
    tracker = read_tracker(local_dir)
    return [] if tracker is None else [i for i in local_iterations(local_dir) if i <= tracker]


def local_iterations(local_dir: str | Path) -> list[int]:
    """Iterations that have an ``iter_XXXXXXX`` directory, ascending."""
    root = Path(local_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = ITER_DIR.match(child.name)
        if m and child.is_dir():
            found.append(int(m.group(1)))
    return sorted(found)


def local_cursor_iterations(local_dir: str | Path) -> list[int]:
    """Iterations that have a Miles data-cursor file, ascending."""
    rollout = Path(local_dir) / "rollout"
    if not rollout.is_dir():
        return []
    found = []
    for child in rollout.iterdir():
        m = re.fullmatch(r"global_dataset_state_dict_(\d+)\.pt", child.name)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


def checkpoint_files(local_dir: str | Path, iteration: int) -> list[str]:
    """Relative paths of every regular file that belongs to one save."""
    root = Path(local_dir)
    it_dir = root / iter_dirname(iteration)
    if not it_dir.is_dir():
        raise FileNotFoundError(f"no checkpoint directory {it_dir}")
    rels = []
    for dirpath, _dirs, files in os.walk(it_dir):
        for name in files:
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                rels.append(full.relative_to(root).as_posix())
    extra = root / rollout_state_relpath(iteration)
    if extra.is_file():
        rels.append(rollout_state_relpath(iteration))
    return sorted(rels)


def save_bytes(local_dir: str | Path, iteration: int) -> int:
    """The bytes of one save's files (what its upload sends, at most)."""
    root = Path(local_dir)
    return sum((root / rel).stat().st_size for rel in checkpoint_files(root, iteration))


def _is_torch_dist(iter_dir: Path) -> bool:
    """Megatron writes metadata.json with the sharded backend; .distcp shards are torch_dist's own."""
    try:
        meta = json.loads((iter_dir / "metadata.json").read_text())
        if isinstance(meta, dict) and meta.get("sharded_backend") == "torch_dist":
            return True
    except (OSError, ValueError):
        pass
    return any(iter_dir.glob("*.distcp"))


def missing_shards(iter_dir: str | Path) -> list[str] | None:
    """Shard files a torch_dist save's ``.metadata`` references but this node cannot see.

    Megatron's torch_dist format (torch.distributed.checkpoint) writes one
    ``__<rank>_<n>.distcp`` per writer and a ``.metadata`` file that lists every one.
    On a multi-node run the launcher (on the Ray head) only sees other nodes' shards if
    ``--save`` is on shared storage; uploading without them would publish a torn
    checkpoint. Returns None when there is no ``.metadata`` or no torch to read it with;
    raises ``IncompleteCheckpoint`` when ``.metadata`` is there but unreadable (torn).
    """
    iter_dir = Path(iter_dir)
    if not (iter_dir / ".metadata").is_file():
        return None
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:  # pragma: no cover - the image and the tests have torch
        return None
    try:
        metadata = dcp.FileSystemReader(str(iter_dir)).read_metadata()
        referenced = {info.relative_path for info in metadata.storage_data.values()}
    except Exception as exc:  # noqa: BLE001 - any failure to read it means we cannot trust the save
        raise IncompleteCheckpoint(f"{iter_dir / '.metadata'} is unreadable ({type(exc).__name__}: {exc}); "
                                   "a torn save is never uploaded") from None
    return sorted(rel for rel in referenced if not (iter_dir / rel).is_file())


def check_local_save(local_dir: str | Path, iteration: int, *, require_data_cursor: bool = True) -> list[str]:
    """The relative files of a whole local save, or ``IncompleteCheckpoint`` saying what is missing."""
    root = Path(local_dir)
    it_dir = root / iter_dirname(iteration)
    if not it_dir.is_dir():
        raise IncompleteCheckpoint(f"no checkpoint directory {it_dir}")
    if _is_torch_dist(it_dir) and not (it_dir / ".metadata").is_file():
        raise IncompleteCheckpoint(
            f"{it_dir} is a torch_dist save without .metadata (torch.distributed.checkpoint writes it last, "
            "after every shard), so it is not finished or was torn; it is not uploaded")
    missing = missing_shards(it_dir)
    if missing:
        raise IncompleteCheckpoint(
            f"{it_dir} lacks {len(missing)} shard(s) its .metadata lists "
            f"(e.g. {missing[0]}); on a multi-node run checkpoint.local_dir must be storage every node "
            "writes to (e.g. FSx for Lustre), or the saves of the other nodes never reach S3"
        )
    rels = checkpoint_files(root, iteration)
    if not any(r.startswith(iter_dirname(iteration) + "/") for r in rels):
        raise IncompleteCheckpoint(f"{it_dir} holds no files; an empty checkpoint is never published")
    if require_data_cursor:
        cursor = root / rollout_state_relpath(iteration)
        if not cursor.is_file():
            raise IncompleteCheckpoint(
                f"{cursor} does not exist yet: Miles writes the data cursor after the model save, and a "
                "checkpoint without it would restart the prompt data on resume")
        if not zipfile.is_zipfile(cursor):  # torch.save writes a zip archive; a torn one has no central directory
            raise IncompleteCheckpoint(f"{cursor} is not a whole torch.save file yet (no zip central directory)")
    return rels


def rebuild_tracker(local_dir: str | Path, *, require_data_cursor: bool = True,
                    log: TextIO | None = None) -> int | None:
    """Point a missing, empty or unreadable tracker at the newest local save that is provably
    finished; returns that iteration, or None (the tracker is readable, or no save qualifies).

    Megatron writes the tracker in place with a plain open and write, no temporary file and no
    fsync (megatron/training/checkpointing.py ``save_checkpoint``), so a node lost right after a
    save can leave it empty on Lustre. Taking that for "nothing finished" would move every save
    aside as torn. Instead a save stands in for the tracker only if it passes
    ``check_local_save`` (the data cursor, which Miles writes after the tracker, when it is
    required) and, for torch_dist, has Megatron's ``metadata.json``, which Megatron core writes
    after every shard (dist_checkpointing/serialization.py ``save``: ``metadata_finalize_fn``).
    A tracker that says ``release`` is Megatron's own and is left alone.
    """
    root = Path(local_dir)
    text = _tracker_text(root)
    if text is not None and (text.isdigit() or text == "release"):
        return None
    for iteration in reversed(local_iterations(root)):
        it_dir = root / iter_dirname(iteration)
        try:
            check_local_save(root, iteration, require_data_cursor=require_data_cursor)
        except IncompleteCheckpoint:
            continue
        if _is_torch_dist(it_dir) and not (it_dir / "metadata.json").is_file():
            continue
        what = "missing" if text is None else "empty" if not text else "unreadable"
        print(f"rltrainer: Megatron's tracker {root / TRACKER_FILE} is {what}; pointing it at "
              f"{iter_dirname(iteration)}, the newest whole local save", file=log or sys.stderr, flush=True)
        write_tracker(root, iteration)
        return iteration
    return None


def stamp() -> str:
    """The UTC time in quarantine names and markers, e.g. 20260101T120000Z."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def quarantine_local(local_dir: str | Path, iterations: Iterable[int], reason: str,
                     log: TextIO | None = None) -> list[str]:
    """Move the given iterations' directories and cursors to ``<local_dir>/_quarantine/<stamp>/``."""
    root = Path(local_dir)
    moved: list[str] = []
    dest_root = root / LOCAL_QUARANTINE_DIR / stamp()
    for iteration in sorted(set(iterations)):
        for rel in (iter_dirname(iteration), rollout_state_relpath(iteration)):
            src = root / rel
            if not src.exists():
                continue
            dest = dest_root / rel
            n = 1
            while dest.exists():
                dest = dest_root / f"{rel}.{n}"
                n += 1
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
            moved.append(rel)
    if moved:
        print(f"rltrainer: moved {', '.join(moved)} to {dest_root} ({reason})", file=log or sys.stderr, flush=True)
    return moved


def quarantine_above_tracker(local_dir: str | Path, log: TextIO | None = None) -> list[str]:
    """Move aside saves above the tracker: they were being written when the run stopped."""
    tracker = read_tracker(local_dir)
    above = [i for i in set(local_iterations(local_dir)) | set(local_cursor_iterations(local_dir))
             if tracker is None or i > tracker]
    what = "above the tracker" if tracker is not None else "with no tracker"
    return quarantine_local(local_dir, above, f"saves {what} are torn and must never be uploaded", log)

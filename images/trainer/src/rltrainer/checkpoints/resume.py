"""Resuming a run from the newest whole checkpoint, and uploading new saves as they appear."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .layout import STAGING_DIR, TRACKER_FILE, iter_dirname
from .local import (
    check_local_save,
    finished_iterations,
    local_iterations,
    quarantine_above_tracker,
    quarantine_local,
    read_tracker,
    rebuild_tracker,
    save_bytes,
    write_tracker,
)
from .manifest import CorruptCheckpoint, IncompleteCheckpoint, ManifestError, NewerManifestFormat
from .retention import Retention
from .store import S3CheckpointStore


@dataclass
class ResumeResult:
    iteration: int | None
    source: str  # "s3", "local", or "fresh"
    uploaded: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # S3 checkpoints found bad and quarantined

    @property
    def start_rollout_id(self) -> int | None:
        """The rollout Miles must start at: one past the saved one (Miles saves iteration == rollout id)."""
        return None if self.iteration is None else self.iteration + 1


def _newest_whole_local(root: Path, *, below: int, require_data_cursor: bool) -> int | None:
    for iteration in reversed(local_iterations(root)):
        if iteration < below:
            try:
                check_local_save(root, iteration, require_data_cursor=require_data_cursor)
                return iteration
            except IncompleteCheckpoint:
                continue
    return None


def prepare_resume(store: S3CheckpointStore, local_dir: str | Path, log: TextIO | None = None,
                   retention: Retention | None = None) -> ResumeResult:
    """Make ``local_dir`` hold the newest complete checkpoint before training starts.

    0. A missing, empty or unreadable tracker is pointed at the newest whole local save
       (``rebuild_tracker``); then saves above the tracker (torn by the stop) are moved to
       ``_quarantine/``.
    1. A local save the tracker points at is complete if it passes ``check_local_save``
       (an unfinished one -- e.g. the cursor not written yet -- is moved aside too); if S3
       lacks it (the previous pod died mid-upload), upload it now.
    2. If S3 has a newer complete checkpoint than the local tracker, download it and point the
       tracker at it; a bad one is quarantined and the next-newest is tried.
    3. Otherwise start from what is local, or fresh from the reference weights.
    4. With a ``retention`` policy, torn saves just moved aside are bounded first (so that a
       restore has room), and once the start point is settled, older local saves that S3
       holds are deleted (never the start point itself), and with ``keep_s3`` the saves in S3
       beyond the newest ``keep_s3``, with what a delete cut short left behind.
    """
    out = log or sys.stderr
    root = Path(local_dir)
    root.mkdir(parents=True, exist_ok=True)
    rebuild_tracker(root, require_data_cursor=store.require_data_cursor, log=out)
    quarantine_above_tracker(root, out)
    if retention is not None:
        retention.bound_quarantine(root, out)
    result, (present, manifests, quarantined) = _resume(store, root, out)
    # A restore that failed left its verified files for the next attempt (store.restore); this
    # one settled its start point without them, so they only take space now.
    shutil.rmtree(root / STAGING_DIR, ignore_errors=True)
    if retention is not None:
        # The run's one listing, taken by _resume, answers for the pruning too. It was taken after
        # the only upload of a pod start (the tracker's save, before the listing), and since then
        # this pod changed S3 only by the quarantine markers it wrote (result.skipped, added to the
        # listing by _resume) and restored nothing there; the previous pod is gone (KubeRay starts
        # each attempt on a new Ray cluster) and the upload watcher starts after this returns. A
        # second listing would show the same saves. prune_s3 deletes the saves beyond keep_s3
        # before it reads the orphans from this listing: a deleted save had a manifest in it, so
        # it is no orphan either way.
        start = [] if result.iteration is None else [result.iteration]
        retention.prune(root, manifests - quarantined, quarantined_in_s3=quarantined, protect=start, log=out)
        retention.prune_s3(store, manifests - quarantined, root, protect=start, log=out, orphans=True,
                           quarantined_in_s3=quarantined, present_in_s3=present)
    return result


def _resume(store: S3CheckpointStore, root: Path,
            out: TextIO) -> tuple[ResumeResult, tuple[set[int], set[int], set[int]]]:
    """The start point, and the run's listing as it stands afterwards: (iterations with any
    object, with a manifest, with a quarantine marker; ``store._saves``), taken once."""
    uploaded: list[int] = []
    skipped: list[int] = []
    local = read_tracker(root)
    if local is not None:
        try:
            check_local_save(root, local, require_data_cursor=store.require_data_cursor)
        except IncompleteCheckpoint as exc:
            print(f"rltrainer: the tracker points at {iter_dirname(local)}, which is not whole ({exc}); "
                  "setting it aside", file=out)
            quarantine_local(root, [local], "incomplete save at the tracker", out)
            (root / TRACKER_FILE).unlink(missing_ok=True)
            local = _newest_whole_local(root, below=local, require_data_cursor=store.require_data_cursor)
            if local is not None:
                print(f"rltrainer: falling back to local {iter_dirname(local)}", file=out)
                write_tracker(root, local)
    if local is not None and not store.is_complete(local):
        print(f"rltrainer: local {iter_dirname(local)} is complete but not in S3; uploading it before training", file=out)
        if store.upload(root, local).status == "uploaded":
            uploaded.append(local)
    present, manifests, quarantined = store._saves()  # after the upload above: it shows that save

    def listing() -> tuple[set[int], set[int], set[int]]:
        return present, manifests, quarantined | set(skipped)  # the markers this pod wrote since

    for iteration in reversed(sorted(manifests - quarantined)):
        if local is not None and iteration <= local:
            break
        try:
            manifest = store.read_manifest(iteration)
            print(f"rltrainer: restoring {iter_dirname(iteration)} from {store.uri}", file=out)
            store.restore(manifest, root)
        except NewerManifestFormat:
            raise  # a newer image's save: never quarantined (the launcher stops, naming it)
        except (ManifestError, CorruptCheckpoint) as exc:
            store.quarantine(iteration, f"{type(exc).__name__}: {exc}")
            print(f"rltrainer: {iter_dirname(iteration)} in S3 is bad ({exc}); falling back to the next-newest "
                  "complete checkpoint", file=out)
            skipped.append(iteration)
            continue
        return ResumeResult(iteration, "s3", uploaded, skipped), listing()
    if local is not None:
        print(f"rltrainer: resuming from local {iter_dirname(local)}", file=out)
        return ResumeResult(local, "local", uploaded, skipped), listing()
    print(f"rltrainer: no complete checkpoint in {store.uri}; starting from the reference weights", file=out)
    return ResumeResult(None, "fresh", uploaded, skipped), listing()


class CheckpointWatcher:
    """Uploads every save Megatron finishes, from a background thread.

    A save is ready once the tracker has reached it and ``check_local_save`` passes (its
    data cursor is written). A failed upload is logged and retried on the next scan; it
    never stops training. With a ``retention`` policy, each scan then deletes the local saves
    the policy allows (``checkpoints.retention``): only ones S3 holds complete.

    A failure that repeats every scan (one save failing for days) is kept once (``failures``:
    the last error of each save still pending) and said when it first happens, when its text
    changes, and every ``REMIND_S`` while it lasts, with how many scans it has failed.

    After a stop signal the launcher plans its last uploads itself (``rltrainer.final_upload``):
    ``halt`` lets the scan under way finish the save it is uploading and start no other,
    ``upload_one`` uploads the save the plan picks, and ``rate`` is what this run's uploads took.
    """

    REMIND_S = 1800.0

    def __init__(self, store: S3CheckpointStore, local_dir: str | Path, interval_s: float = 30.0,
                 log: TextIO | None = None, retention: Retention | None = None):
        self.store = store
        self.local_dir = Path(local_dir)
        self.interval_s = interval_s
        self.log = log or sys.stderr
        self.uploaded: list[int] = []
        self.failures: dict[int, str] = {}  # the last error of each finished save not in S3 yet
        self.monotonic = time.monotonic  # the reminders' clock (tests replace it)
        self._said: dict[object, tuple[str, float, int]] = {}  # what: (message, said at, failures since)
        self.retention = retention
        self._known: set[int] | None = None  # complete (or quarantined) in S3: never uploaded again
        self._complete: set[int] = set()  # complete in S3 (manifest, no quarantine marker): may be pruned
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scan_lock = threading.Lock()
        self._halted = False  # set by halt(): a background scan starts no further upload
        self.timings: list[tuple[int, float]] = []  # (bytes, seconds) of each upload of this run

    def _known_now(self) -> set[int]:
        if self._known is None:
            manifests, quarantined = self.store._markers()
            self._known = manifests | quarantined
            self._complete = manifests - quarantined
        return self._known

    def scan_once(self) -> list[int]:
        """Upload finished saves that S3 does not have yet; returns what it uploaded."""
        with self._scan_lock:
            finished = finished_iterations(self.local_dir)  # saves above the tracker are being written
            for gone in [i for i in self.failures if i not in finished]:  # set aside or deleted meanwhile
                self.failures.pop(gone)
                self._said.pop(gone, None)
            if not finished:
                return []
            known = self._known_now()
            done_now = []
            for iteration in finished:
                if self._halted:
                    break  # the launcher's final upload plans the rest (halt)
                if iteration not in known and self._upload_save(iteration, known):
                    done_now.append(iteration)
            if self.retention is not None:
                try:
                    self.retention.prune(self.local_dir, self._complete, log=self.log,
                                         quarantined_in_s3=known - self._complete)
                    self._said.pop("prune", None)
                except OSError as exc:  # a failed delete must not stop uploads; the next scan tries again
                    self._say("prune", f"pruning local saves failed, will retry: {exc}")
                try:
                    self._complete -= set(self.retention.prune_s3(self.store, self._complete, self.local_dir,
                                                                  log=self.log))
                    self._said.pop("prune_s3", None)
                except Exception as exc:  # noqa: BLE001 - as above: training and uploads go on
                    self._say("prune_s3", f"pruning saves in S3 failed, will retry: {exc}")
            return done_now

    def _upload_save(self, iteration: int, known: set[int]) -> bool:
        """Upload one finished save (the scan lock held); True when this call uploaded it."""
        started = self.monotonic()
        try:
            result = self.store.upload(self.local_dir, iteration)
        except IncompleteCheckpoint as exc:
            self.failures[iteration] = str(exc)
            self._say(iteration, f"{iter_dirname(iteration)} is not ready to upload, will look again: {exc}")
            return False
        except Exception as exc:  # noqa: BLE001 - keep training; retry next scan
            self.failures[iteration] = str(exc)
            self._say(iteration, f"upload of {iter_dirname(iteration)} failed, will retry: {exc}")
            return False
        self.failures.pop(iteration, None)
        self._said.pop(iteration, None)
        known.add(iteration)
        if result.status != "quarantined":
            self._complete.add(iteration)
        if result.status != "uploaded":
            return False
        try:
            self.timings.append((save_bytes(self.local_dir, iteration), max(self.monotonic() - started, 1e-3)))
        except OSError:
            pass  # pruned meanwhile: no timing, the upload stands
        self.uploaded.append(iteration)
        print(f"rltrainer: {iter_dirname(iteration)} is complete in {self.store.uri}", file=self.log, flush=True)
        return True

    def rate(self) -> float | None:
        """Bytes per second over this run's uploads (None before the first)."""
        sent = sum(b for b, _ in self.timings)
        seconds = sum(s for _, s in self.timings)
        return sent / seconds if sent and seconds else None

    def halt(self, timeout_s: float) -> bool:
        """Stop the background scans: the one under way finishes the save it is uploading and
        starts no other. True once the thread has ended, waiting at most ``timeout_s``."""
        self._halted = True
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout=max(0.0, timeout_s))
        return not self._thread.is_alive()

    def upload_one(self, iteration: int) -> bool:
        """Upload one finished save now, unless S3 has it; True when S3 holds it afterwards."""
        with self._scan_lock:
            known = self._known_now()
            return iteration in known or self._upload_save(iteration, known)

    def _say(self, what: object, message: str) -> None:
        """Log ``message`` unless it repeats what was said about ``what`` less than ``REMIND_S``
        ago: a failure that lasts is said again as a reminder, counting the scans it failed."""
        now = self.monotonic()
        said, at, since = self._said.get(what, (None, 0.0, 0))
        if said == message and now - at < self.REMIND_S:
            self._said[what] = (said, at, since + 1)
            return
        again = f" (the same failure {since} more time(s) since it was last said)" if said == message else ""
        self._said[what] = (message, now, 0)
        print(f"rltrainer: {message}{again}", file=self.log, flush=True)

    def pending(self) -> list[int]:
        """Finished saves (at or below the tracker) that are not complete in S3 yet."""
        finished = finished_iterations(self.local_dir)
        if not finished:
            return []
        known = self._known_now()
        return [i for i in finished if i not in known]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.scan_once()
                self._said.pop("scan", None)
            except Exception as exc:  # noqa: BLE001 - e.g. listing failed after retries
                self._say("scan", f"checkpoint scan failed, will retry: {exc}")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rltrainer-checkpoint-watcher", daemon=True)
        self._thread.start()

    def stop(self, final_scan: bool = True) -> list[int]:
        """Stop the thread; by default upload whatever finished since the last scan."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.scan_once() if final_scan else []

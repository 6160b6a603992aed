"""The launcher's last uploads after a stop signal, inside ``FINAL_UPLOAD_BUDGET_S``.

The kit's RayJob gives the launcher ``FINAL_UPLOAD_BUDGET_S`` (480 s) from Ray's SIGTERM to its
SIGKILL (``RAY_JOB_STOP_WAIT_TIME_S``; docs/manifests.md, "When the head is stopped"). Within
that time the launcher:

1. stops the trainer: SIGTERM to its process group, then SIGKILL ``STOP_GRACE_S`` later
   (``rltrainer.launch``), so a trainer slow to exit cannot eat the budget;
2. lets the watcher's upload under way finish, starting no other (``CheckpointWatcher.halt``);
3. uploads the saves still missing from S3 newest first, and starts one only if it can finish in
   the time left at this run's measured upload rate (or the kit's estimate,
   ``RLTRAINER_SAVE_GIB`` / ``RLTRAINER_SAVE_UPLOAD_S``): the newest complete save is the one a
   resume needs, and a save cut short publishes nothing (its manifest is written last), so an
   upload that cannot finish would only take the time of one that can;
4. stops waiting ``EXIT_MARGIN_S`` before the budget ends, says what it uploaded and what it
   left on the checkpoint directory for the next attempt (whose resume uploads the newest local
   save before it trains), and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, TextIO

from .contract import FINAL_UPLOAD_BUDGET_S, SAVE_SIZE_ESTIMATE_ENV, SAVE_UPLOAD_ESTIMATE_ENV

# Before Ray's SIGKILL: the last lines, the `ray job stop` wait and the interpreter's exit.
EXIT_MARGIN_S = 15.0

hard_exit = os._exit  # an upload cut short leaves boto3's worker threads, which sys.exit waits for


@dataclass
class StopSignal:
    """When the launcher got its stop signal, on ``monotonic``; the final upload's deadline."""

    monotonic: Callable[[], float] = time.monotonic
    budget_s: float = FINAL_UPLOAD_BUDGET_S
    margin_s: float = EXIT_MARGIN_S
    received_at: float | None = None
    signum: int | None = None

    def receive(self, signum: int) -> None:
        if self.received_at is None:
            self.received_at, self.signum = self.monotonic(), signum

    @property
    def deadline(self) -> float | None:
        return None if self.received_at is None else self.received_at + self.budget_s - self.margin_s

    def left(self) -> float:
        return max(0.0, (self.deadline or 0.0) - self.monotonic())

    def used(self) -> float:
        return self.monotonic() - (self.received_at or 0.0)


@dataclass
class Outcome:
    uploaded: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)  # finished saves not in S3, newest first
    reasons: dict[int, str] = field(default_factory=dict)
    cut_short: int | None = None  # the save whose upload was still running at the deadline


def estimated_rate(env: Mapping[str, str]) -> float | None:
    """The kit's estimate in bytes per second: one save's GiB over its upload's seconds (a
    Capacity Block head carries both), or None."""
    try:
        rate = float(env[SAVE_SIZE_ESTIMATE_ENV]) * 2**30 / float(env[SAVE_UPLOAD_ESTIMATE_ENV])
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    return rate if rate > 0 else None


def _name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def _mb(rate: float) -> str:
    return f"{rate / 1e6:.0f} MB/s"


def upload_within_budget(watcher, stop: StopSignal, log: TextIO, *, kept: bool,
                         env: Mapping[str, str] | None = None) -> Outcome:
    """Steps 2-4 of the module's plan; says each decision and a last line on ``log``."""
    from .checkpoints.local import save_bytes

    def say(text: str) -> None:
        print(f"rltrainer: final upload: {text}", file=log, flush=True)

    out = Outcome()
    if not watcher.halt(stop.left()):
        out.cut_short = -1  # the watcher's own upload, started before the signal
        say(f"the upload under way since before the stop did not finish in the {stop.budget_s:g} s budget; "
            "it is cut short (a save without its manifest is not published)")
    pending = sorted(_pending(watcher, say), reverse=True)
    rate, source = watcher.rate(), "measured from this run's uploads"
    if rate is None:
        rate, source = estimated_rate(os.environ if env is None else env), "the kit's estimate"
    if pending:
        say(f"{len(pending)} finished save(s) not in S3: {', '.join(map(_name, pending))}; "
            f"{stop.left():.0f} s of the {stop.budget_s:g} s budget left; upload rate "
            + (f"{_mb(rate)} ({source})" if rate else "unknown (no upload measured, no estimate): newest first"))
    for iteration in pending:
        if out.cut_short is not None:
            out.left.append(iteration)
            continue
        left = stop.left()
        try:
            size = save_bytes(watcher.local_dir, iteration)
        except OSError as exc:
            out.left.append(iteration)
            out.reasons[iteration] = f"unreadable: {exc}"
            continue
        need = size / rate if rate else None
        if need is not None and need > left:
            out.left.append(iteration)
            out.reasons[iteration] = f"needs ~{need:.0f} s for {size / 2**30:.1f} GiB at {_mb(rate)}, {left:.0f} s were left"
            say(f"not starting {_name(iteration)}: {out.reasons[iteration]}")
            continue
        say(f"uploading {_name(iteration)} ({size / 2**30:.1f} GiB"
            + (f", ~{need:.0f} s" if need is not None else "") + f"; {left:.0f} s left)")
        done: list[bool] = []
        worker = threading.Thread(target=lambda i=iteration: done.append(watcher.upload_one(i)),
                                  name="rltrainer-final-upload", daemon=True)
        worker.start()
        worker.join(timeout=left)
        if worker.is_alive():
            out.cut_short = iteration
            out.left.append(iteration)
            out.reasons[iteration] = "cut short at the budget's end"
            say(f"{_name(iteration)} did not finish in the budget; its upload is cut short "
                "(a save without its manifest is not published)")
        elif done and done[0]:
            out.uploaded.append(iteration)
        else:
            out.left.append(iteration)
            out.reasons[iteration] = "its upload failed (above)"
    where = (f"left on {watcher.local_dir} for the next attempt, whose resume uploads the newest of them "
             "before it trains" if kept else
             f"on this pod's own disk ({watcher.local_dir}), lost with it; the next attempt resumes from S3")
    say(f"{stop.used():.0f} s after the stop signal: uploaded {', '.join(map(_name, out.uploaded)) or 'nothing'}; "
        + (f"{', '.join(_name(i) + (f' ({out.reasons[i]})' if i in out.reasons else '') for i in out.left)} "
           f"{where}" if out.left else "nothing left to upload")
        + f"; exiting {stop.margin_s:g} s or more before Ray's SIGKILL")
    return out


def _pending(watcher, say: Callable[[str], None]) -> list[int]:
    try:
        return watcher.pending()
    except Exception as exc:  # noqa: BLE001 - e.g. S3 listing failed: nothing to plan with
        say(f"could not list what S3 holds ({exc}); uploading nothing")
        return []


def final_scan(watcher, err: TextIO, *, stop: bool) -> list:
    """Upload what finished since the last scan; the saves still missing from S3 (["?"] if unknown)."""
    try:
        if stop:
            watcher.stop(final_scan=True)
        else:
            watcher.scan_once()
        return watcher.pending()
    except Exception as exc:  # noqa: BLE001 - report, but keep the trainer's exit code
        print(f"rltrainer: final checkpoint scan failed: {exc}", file=err, flush=True)
        return ["?"]


def exit_now(code: int, *streams: TextIO) -> None:
    """Exit at once after an upload was cut short: its threads would hold the exit until Ray's SIGKILL."""
    for stream in (*streams, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    hard_exit(code)


def kill_group(proc: subprocess.Popen, log: TextIO | None) -> None:
    """SIGKILL the trainer's process group, which outlived ``STOP_GRACE_S`` after the stop signal:
    the rest of the budget is the final upload's."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    print("rltrainer: the trainer did not exit within STOP_GRACE_S of the stop signal; killed its process "
          "group (SIGKILL) so that the final upload keeps its time", file=log or sys.stderr, flush=True)


def start_stop(stop_argv: Sequence[str], log: TextIO | None) -> subprocess.Popen | None:
    """Start ``stop_argv`` (``ray job stop``: the training is a Ray job that no signal of ours reaches)."""
    try:
        return subprocess.Popen(list(stop_argv), start_new_session=True)
    except OSError as exc:
        print(f"rltrainer: could not run {' '.join(stop_argv)}: {exc}; the Ray job may still be running",
              file=log or sys.stderr, flush=True)
        return None


def finish_stop(stopper: subprocess.Popen | None, stop_argv: Sequence[str], timeout_s: float,
                 log: TextIO | None) -> None:
    """Wait up to ``timeout_s`` for a stop started by ``start_stop``; say so when it failed."""
    if stopper is None:
        return
    try:
        code = stopper.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stopper.kill()
        stopper.wait()
        code = None
    if code != 0:
        print(f"rltrainer: {' '.join(stop_argv)} " + ("did not finish in time" if code is None else f"exited {code}")
              + "; the Ray job may still be running", file=log or sys.stderr, flush=True)

"""Save, upload and stop before the Capacity Block under the run ends.

EKS scales a Capacity Block node group to 0 about 40 minutes before the block ends, and EC2
starts shutting the instances down 30 minutes before it [EKS user guide, "capacity-blocks-mng"].
Whatever is not in S3 by the scale-down is lost, and a retry would wait for capacity that is
gone. So on a Capacity Block the launcher:

1. learns the block's end: the value ``rlkit launch`` rendered into the job
   (``RLTRAINER_RESERVATION_END``), re-read with DescribeCapacityReservations when the pod's
   credentials allow it (the fresher value wins), at the start, every 15 minutes, and before it
   asks for the last save or stops: a block can be extended while it runs (EC2 user guide,
   "Extend Capacity Blocks"), and an end read once would stop the run at the old one;
2. keeps two durations: one rollout, and one save plus its upload. Each starts as the kit's
   estimate (``RLTRAINER_ROLLOUT_S``, ``RLTRAINER_SAVE_UPLOAD_S``) and is replaced by what this
   run measures: the time between two saves per rollout, and the time from a save's directory
   appearing to its upload finishing (the longest seen);
3. at ``end - margin - (rollout + save_upload)``, the latest moment that still leaves one rollout
   and one save plus upload before the scale-down, asks Miles for a save: Miles'
   ``--save-trigger-sentinel`` file, which train.py checks after every rollout and removes once
   it has saved (Miles v0.1.0 train.py; miles/utils/arguments.py);
4. once a save newer than the trigger is complete in S3 (or, failing that, at the scale-down
   itself) stops training and exits ``EXIT_RESERVATION_END`` (5, ``rltrainer.contract``), with
   KubeRay's retries of the RayJob switched off (``rltrainer.no_retry``).

A run does not start (the same exit) when, before staging and again after the restore, one
rollout and one save plus upload no longer fit, counting the part of the start still ahead:
Miles' load of the save and the reference weights (``RLTRAINER_LOAD_S``, the read minutes of the
kit's ``startup_estimate``).

The supervising loop survives the file system it watches: a poll whose listing of the checkpoint
directory or write of the save request fails (EIO, ESTALE, a Lustre eviction, ENOSPC) is said
(once, then every ``REMIND_S``) and the guard steps on the clock with the saves it saw last; the
request is written again at the next poll. The clock alone asks for the save and stops at the
scale-down, so a failure never makes the stop later. A failure that lasts ``BLIND_LIMIT_S`` stops
training sooner ("safely": the group is stopped as at the block's end, before the scale-down):
blind, the guard can neither see a save nor ask for one, and the watcher cannot upload from a
directory that cannot be listed. Before the last save is due that exit lets KubeRay retry (a fresh
pod mounts the file system anew and resumes from S3); once it is due, a retry could not reach a
save either, so it exits as for the block's end.

Everything here takes its clock and its sleep as arguments, so tests run a block's end in
microseconds (images/trainer/tests/test_trainer_reservation.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TextIO

from .contract import (
    EKS_SCALE_DOWN_MARGIN_S,
    LOAD_ESTIMATE_ENV,
    RESERVATION_END_ENV,
    RESERVATION_ID_ENV,
    ROLLOUT_ESTIMATE_ENV,
    SAVE_UPLOAD_ESTIMATE_ENV,
)

# The file Miles' --save-trigger-sentinel watches, in checkpoint.local_dir.
SAVE_TRIGGER_FILE = "_rltrainer_save_now"
# The estimates when the environment has none (or one that is not a positive number). The kit
# renders all three whenever it renders a Capacity Block's ID (manifests/context.py,
# reservation_env), and this guard runs only on a block, so a kit-launched run never uses them:
# they serve a RayJob written without the kit. Each is a prior the guard replaces with what it
# measures from the run's own saves (EndGuard.rollout, EndGuard.save_upload). One rollout of a 30B
# MoE model; one save plus its upload, a guess of 40 minutes: the kit sizes that for its default
# config at 49 minutes (infra.config.derived.save_upload_estimate, from the save's size and the
# file system's throughput, which the trainer does not know), so without the kit set the variable:
# too short an estimate asks for the last save too late for its upload to finish.
DEFAULT_ROLLOUT_S = 600.0
DEFAULT_SAVE_UPLOAD_S = 2400.0
# ... and Miles' load of the save and the reference weights before its first rollout: the kit's
# read estimate for it on the default file system (infra.config.derived.startup_estimate).
DEFAULT_LOAD_S = 28 * 60.0

RUN, SAVE, STOP = "run", "save", "stop"
# How often a running guard re-reads the block's end (and always before it asks for the last save
# or stops): a few calls an hour, against EC2's request limits per account.
REREAD_S = 900.0
# How long the supervising loop trains on while every poll fails to read the checkpoint directory
# or write the save request, before it stops training (module docstring); and how often, meanwhile,
# it says the failure goes on (the first failure and the recovery are always said).
BLIND_LIMIT_S = 1800.0
REMIND_S = 600.0


def save_trigger_path(local_dir: str) -> str:
    return f"{local_dir.rstrip('/')}/{SAVE_TRIGGER_FILE}"


def parse_end(text: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; a naive time is read as UTC)."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Window:
    end: datetime
    source: str
    reservation_id: str | None = None


def learn_window(env: Mapping[str, str], *, ec2: Any = None, log: TextIO | None = None) -> Window | None:
    """The end of the run's Capacity Block, or None when the run is not on one.

    The rendered end comes first; DescribeCapacityReservations on the rendered ID replaces it
    when it answers (``ec2`` given, or a boto3 client from the pod's credentials). A failed
    re-read is logged and the rendered value kept."""
    out = log or sys.stderr
    rid = env.get(RESERVATION_ID_ENV) or None
    rendered = env.get(RESERVATION_END_ENV) or None
    window = None
    if rendered:
        try:
            window = Window(parse_end(rendered), f"{RESERVATION_END_ENV} (rendered by rlkit launch)", rid)
        except ValueError:
            print(f"rltrainer: {RESERVATION_END_ENV}={rendered!r} is not an ISO 8601 time; ignored",
                  file=out, flush=True)
    if rid is None:
        return window
    try:
        end = _describe_end(ec2 or _ec2_client(), rid)
    except Exception as exc:  # noqa: BLE001 - the rendered value stands; say why it was not re-read
        print(f"rltrainer: could not re-read the end of {rid} ({type(exc).__name__}: {exc}); "
              + (f"using {window.source}" if window else "no end is known, so nothing stops this run "
                 "before the block ends"), file=out, flush=True)
        return window
    return window if end is None else Window(end, f"DescribeCapacityReservations {rid}", rid)


def end_reader(reservation_id: str | None, ec2: Any = None) -> Callable[[], Window | None] | None:
    """What EndGuard calls to re-read the block's end while the run trains: the current Window,
    or None when the call fails (the guard keeps what it has; the start already said whether the
    pod may read it). None without a reservation ID."""
    if reservation_id is None:
        return None
    client = [ec2]

    def read() -> Window | None:
        try:
            client[0] = client[0] or _ec2_client()
            end = _describe_end(client[0], reservation_id)
        except Exception:  # noqa: BLE001 - any failure leaves the known end in place
            return None
        return None if end is None else Window(end, f"DescribeCapacityReservations {reservation_id}",
                                               reservation_id)

    return read


def _ec2_client() -> Any:
    import boto3
    from botocore.config import Config

    # One quick try: the known end stands if this fails, and training goes on meanwhile.
    return boto3.client("ec2", config=Config(connect_timeout=5, read_timeout=10,
                                             retries={"max_attempts": 2, "mode": "standard"}))


def _describe_end(ec2: Any, rid: str) -> datetime | None:
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
    end = found[0].get("EndDate") if found else None
    if end is None:
        return None
    end = end if isinstance(end, datetime) else parse_end(str(end))
    return end if end.tzinfo else end.replace(tzinfo=timezone.utc)


def _seconds(env: Mapping[str, str], key: str, default: float, *, zero_ok: bool = False) -> float:
    raw = env.get(key)
    try:
        value = float(default if raw is None or raw == "" else raw)
    except ValueError:
        return default
    return value if value > 0 or (zero_ok and value == 0) else default


def _fmt(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class EndGuard:
    """Decides, from the clock and what it sees of the saves, when to save and when to stop."""

    window: Window
    rollout_s: float = DEFAULT_ROLLOUT_S
    save_upload_s: float = DEFAULT_SAVE_UPLOAD_S
    margin_s: float = EKS_SCALE_DOWN_MARGIN_S
    load_s: float = 0.0  # Miles' load before its first rollout: counted by too_late_to_start only
    log: TextIO = field(default_factory=lambda: sys.stderr)
    state: str = RUN
    triggered_after: int | None = None  # newest save in S3 when the save was asked for
    stopped_with: int | None = None  # newest save in S3 when training was stopped
    measured_rollout_s: float | None = None
    measured_save_upload: dict[int, float] = field(default_factory=dict)
    reread: Callable[[], Window | None] | None = None  # end_reader(); None: the end is fixed
    reread_s: float = REREAD_S
    _first_seen: dict[int, datetime] = field(default_factory=dict)
    _read_at: datetime | None = None

    @classmethod
    def from_env(cls, window: Window, env: Mapping[str, str], log: TextIO,
                 reread: Callable[[], Window | None] | None = None) -> "EndGuard":
        return cls(window, rollout_s=_seconds(env, ROLLOUT_ESTIMATE_ENV, DEFAULT_ROLLOUT_S),
                   save_upload_s=_seconds(env, SAVE_UPLOAD_ESTIMATE_ENV, DEFAULT_SAVE_UPLOAD_S), log=log,
                   load_s=_seconds(env, LOAD_ESTIMATE_ENV, DEFAULT_LOAD_S, zero_ok=True), reread=reread)

    # --- durations -------------------------------------------------------------------------------

    @property
    def rollout(self) -> float:
        return self.measured_rollout_s if self.measured_rollout_s is not None else self.rollout_s

    @property
    def save_upload(self) -> float:
        measured = self.measured_save_upload.values()
        return max(measured) if measured else self.save_upload_s

    @property
    def scale_down(self) -> datetime:
        """When EKS starts draining the nodes: the run must be in S3 by then."""
        return self.window.end - timedelta(seconds=self.margin_s)

    @property
    def save_by(self) -> datetime:
        """The latest moment to ask for a save: one rollout (Miles saves at the end of the one
        running) plus one save and its upload before the scale-down."""
        return self.scale_down - timedelta(seconds=self.rollout + self.save_upload)

    def arithmetic(self, now: datetime, load_s: float = 0.0) -> str:
        left = (self.window.end - now).total_seconds()
        load = f"Miles loading the save and the reference weights {load_s / 60:.0f} min + " if load_s else ""
        return (f"block ends {_fmt(self.window.end)} ({self.window.source}); {left / 60:.0f} min left minus "
                f"{self.margin_s / 60:.0f} min EKS scale-down margin = {(left - self.margin_s) / 60:.0f} min; "
                f"{load}one rollout {self.rollout / 60:.0f} min + save and upload {self.save_upload / 60:.0f} min "
                f"= {(load_s + self.rollout + self.save_upload) / 60:.0f} min")

    def observe(self, now: datetime, saves: Iterable[int], uploaded: Iterable[int]) -> None:
        """Measure this run's saves: when each save directory first appears, the rollout time
        from two of them, and the save-plus-upload time once its upload has finished."""
        done = set(uploaded)
        for iteration in sorted(saves):
            if iteration in self._first_seen:
                continue
            earlier = [i for i in self._first_seen if i < iteration]
            self._first_seen[iteration] = now
            if earlier:
                prev = max(earlier)
                seconds = (now - self._first_seen[prev]).total_seconds() / (iteration - prev)
                if seconds > 0:
                    self.measured_rollout_s = seconds
        for iteration in done:
            seen = self._first_seen.get(iteration)
            if seen is not None and iteration not in self.measured_save_upload:
                self.measured_save_upload[iteration] = max((now - seen).total_seconds(), 0.0)

    def too_late_to_start(self, now: datetime) -> str | None:
        """Why a run starting now cannot reach one save in S3 before the scale-down (None: it can).
        Miles loads the save and the reference weights before its first rollout (``load_s``)."""
        if now + timedelta(seconds=self.load_s) < self.save_by:
            return None
        return (f"too late to start: {self.arithmetic(now, self.load_s)}, which does not fit. The block's "
                "nodes are drained before a save could reach S3; launch on the next reservation")

    def _refresh(self, now: datetime) -> None:
        """Re-read the end when it is due, or when this step would ask for the save or stop; a
        later end (the block was extended) moves the plan, and an asked-for save that is no longer
        the last one lets training go on (Miles still saves it; nothing is lost)."""
        if self._read_at is None:  # the first step: the launcher has just read it
            self._read_at = now
        acting = ((self.state == RUN and now >= self.save_by)
                  or (self.state == SAVE and now >= self.scale_down))
        due = (now - self._read_at).total_seconds() >= self.reread_s
        if self.reread is None or self.state == STOP or not (acting or due):
            return
        self._read_at = now
        fresh = self.reread()
        if fresh is None or fresh.end <= self.window.end:
            return
        print(f"rltrainer: the Capacity Block was extended: it now ends {_fmt(fresh.end)} (was "
              f"{_fmt(self.window.end)}; {fresh.source})", file=self.log, flush=True)
        self.window = fresh
        if self.state == SAVE and now < self.save_by:
            self.state, self.triggered_after = RUN, None
            print("rltrainer: training on; the save asked for is not the last one any more",
                  file=self.log, flush=True)

    def step(self, now: datetime, saves: Iterable[int], uploaded: Iterable[int]) -> str:
        """RUN (keep training), SAVE (ask Miles for a save now) or STOP (stop training now)."""
        uploaded = set(uploaded)
        self.observe(now, saves, uploaded)
        self._refresh(now)
        newest = max(uploaded, default=-1)
        if self.state == RUN:
            if now < self.save_by:
                return RUN
            self.state, self.triggered_after = SAVE, newest
            print(f"rltrainer: saving before the Capacity Block ends: {self.arithmetic(now)}; asking "
                  "Miles for a save after this rollout", file=self.log, flush=True)
            return SAVE
        if self.state == SAVE:
            if newest > (self.triggered_after if self.triggered_after is not None else -1):
                print(f"rltrainer: save {newest} is complete in S3; stopping training before EKS scales "
                      f"the Capacity Block's nodes down at {_fmt(self.scale_down)}", file=self.log, flush=True)
            elif now >= self.scale_down:
                print("rltrainer: EKS scales the Capacity Block's nodes down now and no save after the "
                      "request reached S3; stopping training (the newest save in S3 is "
                      f"{newest if newest >= 0 else 'none'})", file=self.log, flush=True)
            else:
                return RUN
            self.state, self.stopped_with = STOP, newest
            return STOP
        return STOP


def supervise(proc: Any, guard: EndGuard, *, clock: Callable[[], datetime], saves: Callable[[], Iterable[int]],
              uploaded: Callable[[], Iterable[int]], request_save: Callable[[], None], stop: Callable[[], None],
              sleep: Callable[[float], None], poll_s: float = 30.0, blind_limit_s: float = BLIND_LIMIT_S) -> int:
    """Wait for ``proc`` like ``proc.wait()``, asking for a save and stopping it as ``guard`` says.

    An OSError from ``saves``, ``uploaded`` or ``request_save`` is a missed poll, not the end of
    the guard (module docstring: the last saves seen stand, the request is written again); one
    lasting ``blind_limit_s`` stops ``proc``. Any other error propagates (``launch.run_training``
    then stops the trainer's group)."""
    seen: list[int] = []
    done: list[int] = []
    asked = False  # the save request is written (in SAVE state)
    failing_since: datetime | None = None
    said_at: datetime | None = None
    while True:
        code = proc.poll()
        if code is not None:
            return code
        now = clock()
        error: OSError | None = None
        for read in (saves, uploaded):
            try:
                values = list(read())
            except OSError as exc:
                error = error or exc
                continue
            seen, done = (values, done) if read is saves else (seen, values)
        if guard.step(now, seen, done) == STOP:
            stop()
            return proc.wait()
        asked = asked and guard.state == SAVE  # an extended block went back to RUN: ask again later
        if guard.state == SAVE and not asked:
            try:
                request_save()
                asked = True
            except OSError as exc:
                error = error or exc
        if error is None:
            if failing_since is not None:
                print(f"rltrainer: the Capacity Block guard reads its checkpoint directory again (it had "
                      f"failed for {(now - failing_since).total_seconds() / 60:.0f} min)", file=guard.log, flush=True)
            failing_since = None
        else:
            failing_since = failing_since or now
            failed_s = (now - failing_since).total_seconds()
            if failed_s >= blind_limit_s:
                return _stop_blind(proc, guard, now, failed_s, error, stop, max(done, default=-1))
            if said_at is None or failing_since > said_at or (now - said_at).total_seconds() >= REMIND_S:
                said_at = now
                print(f"rltrainer: the Capacity Block guard could not read its checkpoint directory or write the "
                      f"save request ({type(error).__name__}: {error}); failing for {failed_s / 60:.0f} min, it "
                      f"stops training after {blind_limit_s / 60:.0f} min of failures; meanwhile it asks for the "
                      f"save at {_fmt(guard.save_by)} and stops at {_fmt(guard.scale_down)} by the clock alone",
                      file=guard.log, flush=True)
        sleep(poll_s)


def _stop_blind(proc: Any, guard: EndGuard, now: datetime, failed_s: float, error: OSError,
                stop: Callable[[], None], newest: int) -> int:
    """Stop training the guard can no longer watch. Once the last save is due, as at the block's
    end (exit 5, no retries: a retry could not reach a save either); before, with a failure code
    so that KubeRay retries on a fresh pod."""
    late = now >= guard.save_by
    if late:
        guard.state, guard.stopped_with = STOP, newest
    print(f"rltrainer: the Capacity Block guard has failed to read its checkpoint directory or write the save "
          f"request for {failed_s / 60:.0f} min ({type(error).__name__}: {error}); stopping training, which "
          "it can no longer watch and whose saves cannot be uploaded from there. "
          + ("The last save before the block's end was due; exiting as for the block's end"
             if late else "KubeRay's retry mounts the file system anew and resumes from the newest save in S3")
          + f" (newest save uploaded: {newest if newest >= 0 else 'none'})", file=guard.log, flush=True)
    stop()
    code = proc.wait()
    return code if code else 1  # a trainer that exits 0 on SIGTERM did not finish: never report success


def write_trigger(local_dir: str) -> None:
    path = Path(save_trigger_path(local_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("save requested by rltrainer before the Capacity Block ends\n")


def clear_trigger(local_dir: str) -> None:
    Path(save_trigger_path(local_dir)).unlink(missing_ok=True)

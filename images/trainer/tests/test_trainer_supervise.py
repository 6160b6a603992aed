"""The launcher's supervision survives the file system it watches, and never leaves Miles unwatched.

Failure this prevents: on a Capacity Block the guard's 30 s poll lists the checkpoint directory
on Lustre and writes Miles' save request there. Before, one OSError (EIO, ESTALE, a client
eviction, ENOSPC) left the loop, then the launcher, while Miles (its own session) trained on with
no uploads and no guard until EKS drained the nodes. Every test runs on a fake clock.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
from datetime import datetime, timedelta, timezone

import pytest
from trainer_helpers import FakeClock

from rltrainer import launch, reservation
from rltrainer.miles import TrainCommand

END = datetime(2026, 12, 1, 18, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)


class FakeTrainer:
    """A running trainer until stopped; then it has exited as SIGTERM leaves Python."""

    def __init__(self):
        self.stopped = False

    def poll(self):
        return -signal.SIGTERM if self.stopped else None

    def wait(self):
        return -signal.SIGTERM

    def stop(self):
        self.stopped = True


def supervise(g: reservation.EndGuard, clock: FakeClock, saves, uploaded, request_save, *, poll_s=300.0, **kw):
    trainer = FakeTrainer()
    code = reservation.supervise(trainer, g, clock=clock, saves=saves, uploaded=uploaded, request_save=request_save,
                                 stop=trainer.stop, sleep=clock.advance, poll_s=poll_s, **kw)
    return code, trainer


def test_a_failing_poll_is_said_and_the_guard_still_saves_then_stops():
    g = reservation.EndGuard(reservation.Window(END, "test"), rollout_s=600, save_upload_s=1200, log=io.StringIO())
    clock = FakeClock(END - 80 * MIN)  # the save is due at END - 70 min; a poll every 5 min
    polls, writes, in_s3 = [0], [], [20]

    def saves():
        polls[0] += 1
        if polls[0] == 3:  # END - 70 min, the poll that asks for the save
            raise OSError(errno.EIO, "Input/output error", "/fsx/ckpt")
        return []  # no save directory seen: the estimates stand (measuring has its own tests)

    def request_save():
        writes.append(clock.now)
        if len(writes) == 1:
            raise OSError(errno.ENOSPC, "No space left on device", "/fsx/ckpt/_rltrainer_save_now")
        in_s3.append(21)  # Miles saves after this rollout; the watcher uploads it

    code, trainer = supervise(g, clock, saves, lambda: list(in_s3), request_save)
    assert trainer.stopped and code == -signal.SIGTERM
    assert g.state == reservation.STOP and g.stopped_with == 21
    # The request that failed was written again at the next poll.
    assert writes == [END - 70 * MIN, END - 65 * MIN]
    log = g.log.getvalue()
    assert log.count("could not read its checkpoint directory or write the save request") == 1, log
    assert ("(OSError: [Errno 5] Input/output error: '/fsx/ckpt'); failing for 0 min, it stops training after "
            "30 min of failures; meanwhile it asks for the save at 2026-12-01 16:50:00 UTC and stops at "
            "2026-12-01 17:20:00 UTC by the clock alone") in log
    assert "reads its checkpoint directory again (it had failed for 5 min)" in log
    assert "save 21 is complete in S3; stopping training" in log


def test_the_clock_still_stops_training_at_the_scale_down_when_the_directory_stays_unreadable():
    g = reservation.EndGuard(reservation.Window(END, "test"), rollout_s=600, save_upload_s=1200, log=io.StringIO())
    clock = FakeClock(END - 75 * MIN)

    def saves():
        if clock.now >= END - 70 * MIN:
            raise OSError(errno.ESTALE, "Stale file handle")
        return [20]

    code, trainer = supervise(g, clock, saves, lambda: [20], lambda: None, poll_s=30.0,
                              blind_limit_s=24 * 3600)  # the limit is not what stops it here
    assert trainer.stopped and clock.now == END - 40 * MIN and g.state == reservation.STOP
    log = g.log.getvalue()
    assert "no save after the request reached S3; stopping training (the newest save in S3 is 20)" in log
    # Said when it began and every 10 minutes (30 min: 3 lines), not at each of its 61 polls.
    assert log.count("could not read its checkpoint directory") == 3, log


@pytest.mark.parametrize("start, late", [(END - 10 * 60 * MIN, False), (END - 90 * MIN, True)])
def test_a_directory_unreadable_past_the_limit_stops_training(start, late):
    """Blind, the guard can neither see a save nor ask for one, and nothing can be uploaded from
    the directory. Far from the end the exit lets KubeRay retry (a fresh pod mounts the file
    system anew); once the last save is due, it is the block's end (exit 5, no retries)."""
    g = reservation.EndGuard(reservation.Window(END, "test"), rollout_s=600, save_upload_s=1200, log=io.StringIO())
    clock = FakeClock(start)

    def saves():
        raise OSError(errno.EIO, "Input/output error")

    code, trainer = supervise(g, clock, saves, lambda: [7], lambda: None, poll_s=30.0)
    assert trainer.stopped and clock.now == start + timedelta(seconds=reservation.BLIND_LIMIT_S)
    assert code == -signal.SIGTERM
    assert (g.state == reservation.STOP) is late and (g.stopped_with == 7 if late else g.stopped_with is None)
    log = g.log.getvalue()
    assert "has failed to read its checkpoint directory or write the save request for 30 min" in log
    assert ("exiting as for the block's end" in log) is late
    assert ("KubeRay's retry mounts the file system anew" in log) is not late


def test_a_trainer_that_exits_0_when_stopped_blind_is_not_reported_as_finished():
    g = reservation.EndGuard(reservation.Window(END, "test"), log=io.StringIO())
    clock = FakeClock(END - 10 * 60 * MIN)
    trainer = FakeTrainer()
    trainer.wait = lambda: 0

    def saves():
        raise OSError(errno.EIO, "Input/output error")

    assert reservation.supervise(trainer, g, clock=clock, saves=saves, uploaded=list, request_save=lambda: None,
                                 stop=trainer.stop, sleep=clock.advance) == 1


def test_an_error_that_is_not_the_file_systems_still_propagates():
    g = reservation.EndGuard(reservation.Window(END, "test"), log=io.StringIO())
    clock = FakeClock(END - 10 * 60 * MIN)

    def saves():
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        supervise(g, clock, saves, list, lambda: None)


def test_when_the_supervision_fails_the_trainer_group_is_stopped_before_the_error_leaves(tmp_path):
    """Before: the launcher's exception left run_training and the trainer (its own session)
    trained on with nothing uploading its saves and no guard."""
    seen = []

    def wait(proc):
        seen.append(proc)
        raise OSError(errno.EIO, "Input/output error")

    err = io.StringIO()
    cmd = TrainCommand([sys.executable, "-c", "import time; time.sleep(30)"], cwd=str(tmp_path))
    with pytest.raises(OSError):
        launch.run_training(cmd, wait=wait, log=err)
    (proc,) = seen
    assert proc.returncode == -signal.SIGTERM  # stopped and reaped before the error left
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing is left in its group
    assert "the launcher failed while the trainer ran; stopping the trainer first" in err.getvalue()


@pytest.mark.parametrize("code, expected, said", [
    (0, 0, False), (1, 1, False), (137, 137, False),
    (-signal.SIGTERM, 143, False), (-signal.SIGKILL, 137, False),  # as a shell says it; not sys.exit(-15) = 241
    (2, 1, True), (3, 1, True), (4, 1, True), (5, 1, True),  # the launcher's own codes
])
def test_the_trainers_exit_code_as_the_launcher_reports_it(code, expected, said):
    err = io.StringIO()
    assert launch.trainer_exit_code(code, err) == expected
    assert (f"the trainer exited {code}, a code the launcher keeps for its own decisions" in err.getvalue()) is said

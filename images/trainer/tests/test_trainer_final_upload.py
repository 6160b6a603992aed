"""After a stop signal the launcher has FINAL_UPLOAD_BUDGET_S (Ray's SIGKILL comes then). Before, it
forwarded the signal, waited for the trainer however long it took, and then uploaded every
missing save oldest first (with retries and sleeps on a pod's own disk) until the SIGKILL cut it
off mid-upload, saying nothing. Now the trainer gets STOP_GRACE_S, the newest save that can finish
in the time left goes first, one that cannot is not started, and a last line says what was left."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from rltrainer import final_upload, launch
from rltrainer.checkpoints import CheckpointWatcher, UploadResult, write_tracker
from rltrainer.final_upload import StopSignal, upload_within_budget


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeStore:
    """Uploads at ``rate`` bytes per second of the fake clock; records the order."""

    uri = "s3://bucket/run/"
    require_data_cursor = False

    def __init__(self, clock: FakeClock, rate: float, complete=(), block: threading.Event | None = None):
        self.clock, self.rate, self.complete, self.block = clock, rate, set(complete), block
        self.uploads: list[int] = []

    def _markers(self):
        return set(self.complete), set()

    def upload(self, local_dir, iteration):
        from rltrainer.checkpoints.local import save_bytes

        self.uploads.append(iteration)
        if self.block is not None:
            self.block.wait(10)
        self.clock.t += save_bytes(local_dir, iteration) / self.rate
        self.complete.add(iteration)
        return UploadResult(iteration, "uploaded")


def save(root: Path, iteration: int, size: int) -> None:
    it = root / f"iter_{iteration:07d}"
    it.mkdir(parents=True)
    (it / "shard.distcp").write_bytes(b"x" * size)
    write_tracker(root, iteration)


def watcher_with(tmp_path: Path, clock: FakeClock, store: FakeStore) -> CheckpointWatcher:
    w = CheckpointWatcher(store, tmp_path, log=io.StringIO())
    w.monotonic = clock
    return w


def test_the_newest_save_that_fits_goes_first_and_one_that_cannot_finish_is_not_started(tmp_path):
    clock = FakeClock()
    store = FakeStore(clock, rate=10.0)
    w = watcher_with(tmp_path, clock, store)
    save(tmp_path, 10, 1000)
    w.scan_once()  # during the run: 1000 bytes in 100 s, a measured 10 B/s
    assert store.uploads == [10] and w.rate() == pytest.approx(10.0)
    save(tmp_path, 20, 1000)  # 100 s at that rate
    save(tmp_path, 30, 5000)  # 500 s: cannot finish
    stop = StopSignal(monotonic=clock)
    stop.receive(signal.SIGTERM)
    clock.t += 265  # the trainer took this long to stop: 480 - 15 - 265 = 200 s left
    log = io.StringIO()
    out = upload_within_budget(w, stop, log, kept=True)
    assert store.uploads == [10, 20]  # 30 never started
    assert out.uploaded == [20] and out.left == [30]
    assert clock.t <= stop.deadline
    text = log.getvalue()
    assert ("rltrainer: final upload: 2 finished save(s) not in S3: iter_0000030, iter_0000020; 200 s of the "
            "480 s budget left; upload rate 0 MB/s (measured from this run's uploads)") in text
    assert "rltrainer: final upload: not starting iter_0000030: needs ~500 s for 0.0 GiB at 0 MB/s, 200 s were left" in text
    assert text.splitlines()[-1] == (
        f"rltrainer: final upload: 365 s after the stop signal: uploaded iter_0000020; iter_0000030 (needs ~500 s "
        f"for 0.0 GiB at 0 MB/s, 200 s were left) left on {tmp_path} for the next attempt, whose resume uploads the "
        "newest of them before it trains; exiting 15 s or more before Ray's SIGKILL")


def test_when_only_one_fits_it_is_the_newest(tmp_path):
    clock = FakeClock()
    store = FakeStore(clock, rate=10.0)
    w = watcher_with(tmp_path, clock, store)
    save(tmp_path, 20, 1000)
    save(tmp_path, 30, 1000)
    stop = StopSignal(monotonic=clock)
    stop.receive(signal.SIGTERM)
    clock.t += 315  # 150 s left: one save of 100 s
    log = io.StringIO()
    out = upload_within_budget(w, stop, log, kept=False, env={"RLTRAINER_SAVE_GIB": str(1000 / 2**30),
                                                              "RLTRAINER_SAVE_UPLOAD_S": "100"})
    assert store.uploads == [30] and out.left == [20]  # oldest first (the watcher's order) would upload 20
    assert "upload rate 0 MB/s (the kit's estimate)" in log.getvalue()
    assert "iter_0000020 (needs ~100 s for 0.0 GiB at 0 MB/s, 50 s were left) on this pod's own disk" in log.getvalue()


def test_an_upload_still_running_at_the_deadline_is_left_and_said(tmp_path):
    block = threading.Event()
    store = FakeStore(FakeClock(), rate=1e9, block=block)
    w = CheckpointWatcher(store, tmp_path, log=io.StringIO())
    save(tmp_path, 5, 100)
    stop = StopSignal(budget_s=0.4, margin_s=0.1)
    stop.receive(signal.SIGTERM)
    log = io.StringIO()
    started = time.monotonic()
    try:
        out = upload_within_budget(w, stop, log, kept=True)
    finally:
        block.set()
    assert time.monotonic() - started < 2.0
    assert out.cut_short == 5 and out.left == [5] and out.uploaded == []
    assert ("iter_0000005 did not finish in the budget; its upload is cut short (a save without its "
            "manifest is not published)") in log.getvalue()
    assert "iter_0000005 (cut short at the budget's end) left on" in log.getvalue()


def test_after_a_signal_the_exit_path_plans_instead_of_retrying(tmp_path, monkeypatch):
    """A pod's own disk used to retry the upload with 30-300 s sleeps after any exit: past the budget."""
    clock = FakeClock()
    store = FakeStore(clock, rate=10.0)
    w = watcher_with(tmp_path, clock, store)
    save(tmp_path, 7, 100)
    stop = StopSignal(monotonic=clock)
    stop.receive(signal.SIGTERM)

    class Cfg:
        class checkpoint:
            local_dir = str(tmp_path)

    class Args:
        final_upload_attempts, final_upload_delay = 6, 30.0

    def no_sleep(_s):
        raise AssertionError("no retry sleeps after a stop signal")

    err = io.StringIO()
    code = launch._finish_uploads(w, Cfg, 143, Args, err, no_sleep, mounts_file=str(tmp_path / "none"),
                                  stopped=stop)
    assert code == 143 and store.uploads == [7]
    assert "uploaded iter_0000007; nothing left to upload" in err.getvalue()


# Ignores SIGTERM (a trainer stuck in a save, say); says it is up.
IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open({ready!r}, 'w').close(); time.sleep(60)"


def test_a_trainer_that_ignores_the_signal_is_killed_after_stop_grace(tmp_path, monkeypatch):
    from rltrainer.miles import TrainCommand

    monkeypatch.setattr(launch, "STOP_GRACE_S", 0.5)
    ready = tmp_path / "ready"
    cmd = TrainCommand(argv=(sys.executable, "-c", IGNORES_TERM.format(ready=str(ready))), env={}, cwd=str(tmp_path))
    stop = StopSignal()
    err = io.StringIO()

    def pod_stops():
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=pod_stops, daemon=True).start()
    started = time.monotonic()
    code = launch.run_training(cmd, log=err, stopped=stop)
    assert code == -signal.SIGKILL and time.monotonic() - started < 15
    assert stop.signum == signal.SIGTERM and stop.received_at is not None
    assert "the trainer did not exit within STOP_GRACE_S of the stop signal; killed its process group" in err.getvalue()


def test_an_upload_cut_short_exits_at_once(monkeypatch):
    exits = []
    monkeypatch.setattr(final_upload, "hard_exit", exits.append)
    final_upload.exit_now(143, io.StringIO())
    assert exits == [143]


def test_stop_grace_leaves_the_upload_most_of_the_budget():
    assert launch.STOP_GRACE_S + final_upload.EXIT_MARGIN_S <= final_upload.FINAL_UPLOAD_BUDGET_S / 2

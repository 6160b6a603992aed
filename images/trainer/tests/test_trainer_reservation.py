"""A run on a Capacity Block saves, uploads and stops before EKS drains the block's nodes.

Upstream failure this prevents: EKS scales a Capacity Block node group to 0 about 40 minutes
before the block ends, and EC2 shuts the instances down from 30 minutes before it [EKS user
guide, "capacity-blocks-mng"]. Without a guard the run is killed with its work since the last
periodic save lost (up to 20 rollouts), and KubeRay retries it onto capacity that is gone.
Every test runs the block's end on a fake clock.
"""

from __future__ import annotations

import io
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from trainer_helpers import FIXTURES, FakeClock
from rltrainer import launch, no_retry, reservation
from rltrainer.contract import (
    LOAD_ESTIMATE_ENV,
    RESERVATION_END_ENV,
    RESERVATION_ID_ENV,
    ROLLOUT_ESTIMATE_ENV,
    SAVE_UPLOAD_ESTIMATE_ENV,
)

END = datetime(2026, 12, 1, 18, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)


def guard(**kw) -> reservation.EndGuard:
    return reservation.EndGuard(reservation.Window(END, "test"), log=io.StringIO(), **kw)


def test_the_save_is_asked_for_one_rollout_plus_save_and_upload_before_the_scale_down():
    g = guard(rollout_s=600, save_upload_s=1200)
    # 40 min EKS margin + 10 min rollout + 20 min save and upload = 70 min before the end.
    assert g.save_by == END - 70 * MIN
    assert g.step(END - 71 * MIN, [], []) == reservation.RUN
    assert g.step(END - 70 * MIN, [], [20]) == reservation.SAVE
    assert g.triggered_after == 20
    # The save asked for is not in S3 yet: keep training until it is, or until the scale-down.
    assert g.step(END - 60 * MIN, [20, 21], [20]) == reservation.RUN
    assert g.step(END - 50 * MIN, [20, 21], [20, 21]) == reservation.STOP
    assert g.stopped_with == 21


def test_without_a_save_in_s3_the_run_stops_at_the_scale_down_anyway():
    g = guard(rollout_s=600, save_upload_s=1200)
    assert g.step(END - 70 * MIN, [], []) == reservation.SAVE
    assert g.step(END - 41 * MIN, [3], []) == reservation.RUN
    assert g.step(END - 40 * MIN, [3], []) == reservation.STOP
    assert "no save after the request reached S3" in g.log.getvalue()


def test_measured_saves_replace_the_estimates():
    g = guard(rollout_s=60, save_upload_s=60)
    t = END - 10 * 60 * MIN
    g.observe(t, [20], [])
    g.observe(t + 30 * MIN, [20], [20])  # save 20 took 30 min from its directory to S3
    g.observe(t + 100 * MIN, [20, 40], [20])  # 20 rollouts in 100 min
    assert g.save_upload == 30 * 60
    assert g.measured_rollout_s == 5 * 60
    assert g.save_by == END - (40 + 5 + 30) * MIN


def test_a_run_that_cannot_reach_one_save_does_not_start():
    g = guard(rollout_s=600, save_upload_s=1200)
    assert g.too_late_to_start(END - 71 * MIN) is None
    why = g.too_late_to_start(END - 69 * MIN)
    assert why == ("too late to start: block ends 2026-12-01 18:00:00 UTC (test); 69 min left minus 40 min "
                   "EKS scale-down margin = 29 min; one rollout 10 min + save and upload 20 min = 30 min, which "
                   "does not fit. The block's nodes are drained before a save could reach S3; launch on the next "
                   "reservation")


def test_the_end_is_re_read_with_describe_capacity_reservations():
    import boto3
    from botocore.stub import Stubber

    ec2 = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    extended = END + timedelta(days=1)
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations",
                          {"CapacityReservations": [{"CapacityReservationId": "cr-0123456789abcdef0",
                                                     "EndDate": extended}]},
                          {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
        window = reservation.learn_window({RESERVATION_ID_ENV: "cr-0123456789abcdef0",
                                           RESERVATION_END_ENV: "2026-12-01T18:00:00Z"}, ec2=ec2)
    assert window == reservation.Window(extended, "DescribeCapacityReservations cr-0123456789abcdef0",
                                        "cr-0123456789abcdef0")
    # Without permission to read it, the rendered value stands.
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", "UnauthorizedOperation")
        log = io.StringIO()
        window = reservation.learn_window({RESERVATION_ID_ENV: "cr-0123456789abcdef0",
                                           RESERVATION_END_ENV: "2026-12-01T18:00:00Z"}, ec2=ec2, log=log)
    assert window.end == END and "could not re-read the end of cr-0123456789abcdef0" in log.getvalue()
    assert reservation.learn_window({}) is None
    # The guard's re-reads: the current window, or None on a failure (the known end stands).
    read = reservation.end_reader("cr-0123456789abcdef0", ec2=ec2)
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations",
                          {"CapacityReservations": [{"CapacityReservationId": "cr-0123456789abcdef0",
                                                     "EndDate": extended}]},
                          {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
        stub.add_client_error("describe_capacity_reservations", "RequestLimitExceeded")
        assert read() == reservation.Window(extended, "DescribeCapacityReservations cr-0123456789abcdef0",
                                            "cr-0123456789abcdef0")
        assert read() is None
    assert reservation.end_reader(None) is None


def _extends(clock: FakeClock, at: datetime, to: datetime, reads: list) -> callable:
    """DescribeCapacityReservations on a block its owner extends to ``to`` at ``at``."""
    def reread() -> reservation.Window:
        reads.append(clock())
        return reservation.Window(to if clock() >= at else END, "DescribeCapacityReservations cr-1", "cr-1")
    return reread


def test_a_block_extended_while_the_run_trains_moves_the_save_and_the_stop():
    """EC2 lets an active block be extended and its instances run on ("Extend Capacity Blocks" in
    the EC2 user guide); an end read once at the start stopped the run at the old end."""
    clock, reads = FakeClock(END - 10 * 60 * MIN), []
    week = END + timedelta(days=7)
    g = guard(rollout_s=600, save_upload_s=1200, reread=_extends(clock, END - 5 * 60 * MIN, week, reads))
    while clock() < END:  # past the old end: never asked for a save, never stopped
        assert g.step(clock(), [], []) == reservation.RUN
        clock.advance(30)
    assert g.window.end == week and g.save_by == week - 70 * MIN
    assert "the Capacity Block was extended: it now ends 2026-12-08 18:00:00 UTC (was 2026-12-01 " \
           "18:00:00 UTC; DescribeCapacityReservations cr-1)" in g.log.getvalue()
    # every 15 minutes after the launcher's own read, not every poll
    assert reads[0] == END - 10 * 60 * MIN + 15 * MIN
    assert all(b - a == 15 * MIN for a, b in zip(reads, reads[1:])) and reads[-1] == END - 15 * MIN


def test_the_end_is_read_again_before_the_last_save_is_asked_for():
    clock, reads = FakeClock(END - 80 * MIN), []
    # extended a minute before the save would be asked for; no periodic read since the start
    g = guard(rollout_s=600, save_upload_s=1200, reread_s=10 ** 9,
              reread=_extends(clock, END - 71 * MIN, END + 4 * 60 * MIN, reads))
    assert g.step(clock(), [], []) == reservation.RUN and reads == []
    clock.now = END - 70 * MIN
    assert g.step(clock(), [], []) == reservation.RUN
    assert reads == [END - 70 * MIN]


def test_an_extension_after_the_save_was_asked_for_lets_training_go_on():
    clock, reads = FakeClock(END - 80 * MIN), []
    g = guard(rollout_s=600, save_upload_s=1200, reread_s=600,
              reread=_extends(clock, END - 60 * MIN, END + 4 * 60 * MIN, reads))
    assert g.step(clock(), [], []) == reservation.RUN
    clock.now = END - 70 * MIN
    assert g.step(clock(), [], []) == reservation.SAVE  # read again: not extended yet
    clock.now = END - 60 * MIN
    assert g.step(clock(), [], []) == reservation.RUN
    assert (g.state, g.triggered_after) == (reservation.RUN, None)
    assert "training on; the save asked for is not the last one any more" in g.log.getvalue()


def test_a_failed_re_read_keeps_the_known_end():
    g = guard(rollout_s=600, save_upload_s=1200, reread=lambda: None)
    assert g.step(END - 71 * MIN, [], []) == reservation.RUN
    assert g.step(END - 70 * MIN, [], []) == reservation.SAVE


# --- the launcher, end to end, against moto S3 and a stand-in train.py ------------------------------

# Trains one "rollout" every 50 ms; saves only when the sentinel asks (save_interval is 1000),
# and removes the sentinel after saving, as Miles v0.1.0 train.py does.
SENTINEL_TRAIN = '''
import os, pathlib, sys, time
args = sys.argv[1:]
def last(flag):
    i = len(args) - 1 - args[::-1].index(flag)
    return args[i + 1]
save = pathlib.Path(last("--save"))
sentinel = pathlib.Path(last("--save-trigger-sentinel"))
pathlib.Path(os.environ["FAKE_TRAIN_STARTED"]).write_text("yes")
for it in range(1, 100000):
    time.sleep(0.05)
    if sentinel.exists():
        d = save / f"iter_{it:07d}"
        (d / "model").mkdir(parents=True)
        (d / "model" / "__0_0.distcp").write_bytes(os.urandom(2000))
        (d / "common.pt").write_bytes(b"c" * 100)
        (save / "rollout").mkdir(exist_ok=True)
        import torch
        torch.save({"cursor": it}, save / "rollout" / f"global_dataset_state_dict_{it}.pt")
        (save / "latest_checkpointed_iteration.txt").write_text(str(it))
        sentinel.unlink()
'''


@pytest.fixture
def run(tmp_path: Path, monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    from moto import mock_aws

    with mock_aws():
        import boto3

        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="my-bucket")
        miles = tmp_path / "miles"
        miles.mkdir()
        (miles / "train.py").write_text(SENTINEL_TRAIN)
        data = yaml.safe_load((FIXTURES / "qwen3-30b-a3b.yaml").read_text())
        data["checkpoint"].update(local_dir=str(tmp_path / "ckpt"), s3_uri="s3://my-bucket/checkpoints/run1/",
                                  save_interval=1000)
        data["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(data))
        mounts = tmp_path / "mounts"
        mounts.write_text(f"10.0.0.5@tcp:/abcdefgh {tmp_path} lustre rw 0 0\n")
        monkeypatch.setenv("FAKE_TRAIN_STARTED", str(tmp_path / "started"))
        monkeypatch.setenv(RESERVATION_END_ENV, "2026-12-01T18:00:00Z")
        monkeypatch.setenv(ROLLOUT_ESTIMATE_ENV, "600")
        monkeypatch.setenv(SAVE_UPLOAD_ESTIMATE_ENV, "1200")
        monkeypatch.setenv(LOAD_ESTIMATE_ENV, "0")  # the stand-in trainer loads nothing
        monkeypatch.delenv(RESERVATION_ID_ENV, raising=False)
        stops = []
        monkeypatch.setattr(no_retry, "stop_retries", lambda log, **kw: stops.append(kw) or True)
        argv = ["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable,
                "--upload-interval", "0.05"]
        yield s3, argv, str(mounts), stops, tmp_path


def test_the_launcher_saves_uploads_and_stops_before_the_block_ends(run, monkeypatch):
    s3, argv, mounts, stops, tmp_path = run
    fake = FakeClock(END - 2 * 60 * MIN)
    err = io.StringIO()
    monkeypatch.setattr(launch, "clock", fake)
    sentinel = tmp_path / "ckpt" / reservation.SAVE_TRIGGER_FILE

    def pause(_seconds: float) -> None:
        # Five minutes of the block per pause until the save is asked for; then 30 s per 0.2 s of
        # real time, which leaves the stand-in trainer (torch import included) and moto 12 s of
        # real time to save and upload before the scale-down.
        asked = sentinel.exists() or "saving before" in err.getvalue()
        time.sleep(0.2 if asked else 0.02)
        fake.advance(30 if asked else 300)

    monkeypatch.setattr(launch, "sleep", pause)
    code = launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts)
    log = err.getvalue()
    assert code == launch.EXIT_RESERVATION_END, log
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="my-bucket").get("Contents", [])]
    complete = [k for k in keys if k.endswith("/_COMPLETE.json")]
    assert len(complete) == 1, keys  # the one save asked for, complete in S3
    assert "saving before the Capacity Block ends" in log
    assert "is complete in S3; stopping training" in log
    # Asked for at end - 70 min (40 margin + 10 rollout + 20 save and upload), stopped before
    # the scale-down at end - 40 min.
    assert END - 70 * MIN <= fake.now < END - 40 * MIN
    assert stops == [{"reason": "stopped for the Capacity Block's end",
                      "next_step": "launch again on the next reservation; it resumes from the newest save in S3"}]
    assert not (tmp_path / "ckpt" / reservation.SAVE_TRIGGER_FILE).exists()


def test_the_launcher_does_not_start_a_run_that_cannot_reach_a_save(run, monkeypatch):
    """Nor does it leave behind a save the killed attempt finished but did not upload: that needs
    no GPU, and an ephemeral file system goes with the cluster."""
    from ckpt_helpers import make_save

    s3, argv, mounts, stops, tmp_path = run
    make_save(tmp_path / "ckpt", 7)  # the previous attempt saved 7, then its pod was killed
    monkeypatch.setattr(launch, "clock", FakeClock(END - 65 * MIN))
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == launch.EXIT_RESERVATION_END
    assert "too late to start" in err.getvalue()
    assert not (tmp_path / "started").exists()
    assert len(stops) == 1
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="my-bucket").get("Contents", [])]
    assert "checkpoints/run1/iter_0000007/_COMPLETE.json" in keys, err.getvalue()


def test_a_start_that_staging_and_restoring_made_too_late_does_not_train(run, monkeypatch):
    """A KubeRay retry late in a block: in time when it starts, too late once the inputs are
    staged and the start point restored (their time was not counted). Before: it started
    training whose first save could not fit before the scale-down (the stand-in trainer here
    saves at once, so only the refusal shows)."""
    from rltrainer.checkpoints import resume as resume_module

    s3, argv, mounts, stops, tmp_path = run
    fake = FakeClock(END - 75 * MIN)  # 5 minutes before a save must be asked for
    monkeypatch.setattr(launch, "clock", fake)
    real_prepare = resume_module.prepare_resume

    def slow_restore(*args, **kwargs):
        fake.advance(10 * 60)  # a 10-minute restore
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr("rltrainer.checkpoints.prepare_resume", slow_restore)
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == launch.EXIT_RESERVATION_END
    assert "rltrainer launch: after staging and restoring, too late to start:" in err.getvalue()
    assert not (tmp_path / "started").exists() and len(stops) == 1


def test_a_window_that_fits_a_rollout_and_a_save_but_not_the_load_before_them_refuses_after_the_restore(
        run, monkeypatch):
    """Miles loads the save and the reference weights before its first rollout (28 min on the
    kit's default file system). Before: after the restore only one rollout and one save plus
    upload were counted, and a run started whose first save could not reach S3 in time."""
    from rltrainer.checkpoints import resume as resume_module

    s3, argv, mounts, stops, tmp_path = run
    monkeypatch.setenv(LOAD_ESTIMATE_ENV, "1200")  # 20 min of reads ahead once restored
    fake = FakeClock(END - 100 * MIN)  # the save is due at END - 70 min: 30 min ahead, the load fits
    monkeypatch.setattr(launch, "clock", fake)
    real_prepare = resume_module.prepare_resume

    def slow_restore(*args, **kwargs):
        fake.advance(15 * 60)  # restored at END - 85 min: rollout and save fit, the load no longer
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr("rltrainer.checkpoints.prepare_resume", slow_restore)
    # Were training to start, each poll is five minutes of the block: it ends at the scale-down.
    monkeypatch.setattr(launch, "sleep", lambda _s: (time.sleep(0.02), fake.advance(300)))
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == launch.EXIT_RESERVATION_END
    assert ("rltrainer launch: after staging and restoring, too late to start: block ends 2026-12-01 18:00:00 UTC "
            "(RLTRAINER_RESERVATION_END (rendered by rlkit launch)); 85 min left minus 40 min EKS scale-down margin "
            "= 45 min; Miles loading the save and the reference weights 20 min + one rollout 10 min + save and "
            "upload 20 min = 50 min, which does not fit.") in err.getvalue()
    assert not (tmp_path / "started").exists() and len(stops) == 1


def test_the_load_estimate_comes_from_the_kit_or_the_default():
    window = reservation.Window(END, "test")
    assert reservation.EndGuard.from_env(window, {LOAD_ESTIMATE_ENV: "1680"}, io.StringIO()).load_s == 1680
    # No shared file system, or nothing to read: the kit renders 0, which stands.
    assert reservation.EndGuard.from_env(window, {LOAD_ESTIMATE_ENV: "0"}, io.StringIO()).load_s == 0
    for env in ({}, {LOAD_ESTIMATE_ENV: "soon"}, {LOAD_ESTIMATE_ENV: "-5"}):
        assert reservation.EndGuard.from_env(window, env, io.StringIO()).load_s == reservation.DEFAULT_LOAD_S
    g = guard(rollout_s=600, save_upload_s=1200, load_s=1200)
    assert g.too_late_to_start(END - 91 * MIN) is None and g.too_late_to_start(END - 90 * MIN) is not None
    assert g.save_by == END - 70 * MIN  # once training, the load is behind it: the plan is unchanged


@pytest.mark.parametrize("body, on_block, expected", [
    ("import sys; sys.exit(5)", True, 1),  # 5 without the guard having acted is not the block's end
    ("import sys; sys.exit(5)", False, 1),
    ("import sys; sys.exit(2)", False, 1),  # nor is a 2 a refused run config
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", True, 128 + 15),  # not sys.exit(-15) = 241
])
def test_the_trainers_exit_code_never_passes_for_the_launchers_own(run, monkeypatch, body, on_block, expected):
    """main stops KubeRay's retries on 2 (a config error) and 5 (the block's end). Before: Miles'
    own exit 5 or 2 passed through and switched the retries off, as if the launcher had decided."""
    s3, argv, mounts, stops, tmp_path = run
    (tmp_path / "miles" / "train.py").write_text(body)
    if not on_block:
        monkeypatch.delenv(RESERVATION_END_ENV)
    monkeypatch.setattr(launch, "clock", FakeClock(END - 10 * 60 * MIN))
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == expected, err.getvalue()
    assert stops == []


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_grace_period():
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    started = time.monotonic()
    launch._stop_group(proc, grace_s=0.3)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_with_ray_address_the_stop_before_the_blocks_end_stops_the_submitted_ray_job(run, monkeypatch):
    """--ray-address: the launcher's child is `ray job submit`, which only follows the job's logs.
    Before: the stop signalled that child's process group, and the Ray job (Miles training and
    saving) went on with nothing left to upload its saves. Now the launcher submits with its own
    --submission-id and stops that job with `ray job stop` (tests/ray_helpers.py: the stand-in)."""
    from ray_helpers import install_fake_ray, kill_jobs, ray_calls, running_jobs

    s3, argv, mounts, stops, tmp_path = run
    state = install_fake_ray(tmp_path, monkeypatch)
    fake = FakeClock(END - 2 * 60 * MIN)
    err = io.StringIO()
    monkeypatch.setattr(launch, "clock", fake)
    sentinel = tmp_path / "ckpt" / reservation.SAVE_TRIGGER_FILE

    def pause(_seconds: float) -> None:  # as in the test above
        asked = sentinel.exists() or "saving before" in err.getvalue()
        time.sleep(0.2 if asked else 0.02)
        fake.advance(30 if asked else 300)

    monkeypatch.setattr(launch, "sleep", pause)
    try:
        code = launch.main(argv + ["--ray-address", "http://127.0.0.1:8265"], out=io.StringIO(), err=err,
                           mounts_file=mounts)
        log = err.getvalue()
        assert code == launch.EXIT_RESERVATION_END, log
        assert "is complete in S3; stopping training" in log
        assert running_jobs(state) == {}, log
        submit, stop = ray_calls(state)
        ids = [a.split("=", 1)[1] for a in submit[:submit.index("--")] if a.startswith("--submission-id=")]
        assert len(ids) == 1 and ids[0].startswith("rltrainer-qwen3-30b-a3b-grpo-")
        assert stop == ["job", "stop", "--address=http://127.0.0.1:8265", ids[0]]
    finally:
        kill_jobs(state)


def test_a_ray_job_stop_that_fails_is_said_and_the_submitter_is_still_stopped(tmp_path: Path, monkeypatch):
    import signal
    import subprocess

    from ray_helpers import install_fake_ray

    install_fake_ray(tmp_path, monkeypatch)
    for stop_argv, said in (
        (("ray", "job", "stop", "--address=http://127.0.0.1:8265", "rltrainer-gone"),
         "rltrainer: ray job stop --address=http://127.0.0.1:8265 rltrainer-gone exited 1; "
         "the Ray job may still be running\n"),
        ((str(tmp_path / "no-ray"), "job", "stop", "rltrainer-gone"),
         f"rltrainer: could not run {tmp_path / 'no-ray'} job stop rltrainer-gone: [Errno 2] No such file or "
         f"directory: '{tmp_path / 'no-ray'}'; the Ray job may still be running\n"),
    ):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        err = io.StringIO()
        launch._stop_group(proc, grace_s=30, stop_argv=stop_argv, log=err)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert err.getvalue() == said


def test_a_save_request_that_cannot_be_removed_is_one_line_and_exit_4(run, monkeypatch):
    """Before: the OSError of clear_trigger left the launcher as a traceback (exit 1), after staging
    and restoring. Now one line names the file, the error and the fix, and the start exits 4."""
    _s3, argv, mounts, stops, tmp_path = run
    monkeypatch.setattr(launch, "clock", FakeClock(END - 10 * 60 * MIN))

    def refuse(local_dir):
        raise PermissionError(13, "Permission denied", reservation.save_trigger_path(local_dir))

    monkeypatch.setattr(reservation, "clear_trigger", refuse)
    err = io.StringIO()
    assert launch.main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == launch.EXIT_PREPARE
    trigger = reservation.save_trigger_path(str(tmp_path / "ckpt"))
    assert (f"rltrainer launch: could not remove the save request {trigger} left by an earlier attempt "
            f"([Errno 13] Permission denied: '{trigger}'); Miles would save and the guard stop at once. Nothing "
            "was started; fix the file's permissions or remove it, then launch again\n") in err.getvalue()
    assert "Traceback" not in err.getvalue() and not (tmp_path / "started").exists()
    assert stops == []

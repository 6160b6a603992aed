"""`rlkit status`'s health line names a RUNNING run that reports no training step, and not one
whose retry replays its rollouts (ops.observability; botocore Stubber, no AWS)."""

from __future__ import annotations

import argparse
import datetime as dt

from botocore.stub import ANY

from infra.config import load_config
from ops import observability
from tests.support import REPO_ROOT
from tests.support.preflight import stubbed  # a client answered by botocore's Stubber

CFG = load_config(REPO_ROOT / "examples" / "p5-2node.yaml")
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


# --- the health line names a run that stopped stepping --------------------------------------------
#
# A hung run (an NCCL hang, say) fails no pod: no restart, no failed node, no EFA drop. What shows
# it is the training metrics: the launcher writes a reward and a step time once per rollout.


def rayjob_status(job_status: str, *, started: dt.datetime | None = None,
                  ray_started: dt.datetime | None = None) -> dict:
    """A RayJob as `kubectl get rayjob -o json` returns it (KubeRay v1.7.0 status fields)."""
    def stamp(when):
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    st: dict = {"jobStatus": job_status, "jobDeploymentStatus": "Running"}
    if started is not None:
        st["startTime"] = stamp(started)
    if ray_started is not None:
        st["rayJobInfo"] = {"startTime": stamp(ray_started)}
    return {"metadata": {"name": CFG.training.run_name}, "status": st}


def health_with(values: dict[str, list[tuple[dt.datetime, float]]], *, lookback: dt.timedelta,
                running_from: dt.datetime | None) -> str:
    """The health line over a fake CloudWatch (botocore Stubber) that holds ``values`` (id ->
    [(timestamp, value)], newest first) and is asked for exactly ``lookback``."""
    cw, stub = stubbed("cloudwatch")
    stub.add_response("get_metric_data", {"MetricDataResults": [
        {"Id": k, "Values": [v for _, v in points], "Timestamps": [t for t, _ in points],
         "StatusCode": "Complete"} for k, points in values.items()]}, {
        "MetricDataQueries": ANY, "StartTime": NOW - lookback, "EndTime": NOW,
        "ScanBy": "TimestampDescending"})
    with stub:
        return observability.health_line(cw, CFG, now=NOW, running_from=running_from)


MIN = dt.timedelta(minutes=1)
GPU_BUSY = {"gpu": [(NOW - MIN, 97.0)], "efadrop": [(NOW - MIN, 0.0)], "failed": [(NOW - MIN, 0.0)]}


def test_a_running_job_that_reports_no_training_step_is_a_problem():
    """The job has run 3 hours, its GPUs are busy, nothing failed, and no reward or step time
    arrived within the quiet window (2 x rollout_minutes + one save and its upload = 69 min here,
    the save the kit's estimate with training.save_upload_minutes unset: 49 min): before, the line
    said `ok: ... reward n/a, step time n/a`."""
    window = observability.quiet_window(CFG)
    assert CFG.training.save_upload_minutes is None
    assert window == dt.timedelta(minutes=2 * 10 + 49)
    job = rayjob_status("RUNNING", started=NOW - 200 * MIN, ray_started=NOW - 180 * MIN)
    since = observability.running_since(job)
    assert since == NOW - 180 * MIN
    line = health_with(GPU_BUSY, lookback=window, running_from=since)
    assert line == (
        "health, last 15 min: problem (no training step reported in the last 69 min (no reward, "
        "step time or replayed rollout; the job has run 180 min, about one rollout every 10 min "
        "expected)): "
        "GPU util 97%, EFA rx drops 0, failed nodes 0, container restarts in rl-training n/a, "
        "reward n/a, step time n/a")


def test_a_step_within_the_quiet_window_is_not_a_stall():
    """A step time 40 min ago (a save and its upload between rollouts): outside the 15 minutes the
    line shows, inside the quiet window, so no problem."""
    since = NOW - 180 * MIN
    line = health_with({**GPU_BUSY, "steptime": [(NOW - 40 * MIN, 300.0)]},
                       lookback=observability.quiet_window(CFG), running_from=since)
    assert line.startswith("health, last 15 min: ok: ") and line.endswith("reward n/a, step time n/a")
    # Within the last 15 minutes it is shown as before.
    line = health_with({**GPU_BUSY, "reward": [(NOW - 5 * MIN, 0.5), (NOW - 30 * MIN, 0.4)]},
                       lookback=observability.quiet_window(CFG), running_from=since)
    assert "ok: " in line and "reward 0.5," in line


def test_a_job_that_just_started_is_not_called_stalled():
    """No reward yet 90 min after the Ray job started: staging, restoring the newest save and
    loading the engines come first, so a job is judged only after twice the quiet window
    (138 min here). A retry counts from its own start (KubeRay sets it again)."""
    for ran in (20 * MIN, 90 * MIN, 137 * MIN):
        line = health_with(GPU_BUSY, lookback=observability.quiet_window(CFG),
                           running_from=NOW - ran)
        assert "ok: " in line, (ran, line)
    line = health_with(GPU_BUSY, lookback=observability.quiet_window(CFG),
                       running_from=NOW - 138 * MIN)
    assert "problem (no training step reported in the last 69 min" in line


def test_a_retry_replaying_its_rollouts_is_not_called_stalled_but_a_stall_in_it_is():
    """After a retry Miles runs the rollouts after the newest save again, up to a save interval of
    them, and the launcher's ledger keeps their values from being sent twice. Before, nothing
    reached CloudWatch for them and status said "no training step reported in the last 55 min
    ... the job has run 150 min" of a healthy retry. The launcher now sends each replayed
    rollout's id (replayed_rollout), which counts as progress and is shown; a retry that stops
    replaying is still a stall."""
    since = NOW - 150 * MIN  # the retry's Ray job started 150 min ago; its last reward is older
    replaying = {**GPU_BUSY, "replay": [(NOW - 4 * MIN, 37.0), (NOW - 14 * MIN, 36.0)],
                 "reward": [(NOW - 400 * MIN, 0.5)]}
    line = health_with(replaying, lookback=observability.quiet_window(CFG), running_from=since)
    assert line.startswith("health, last 15 min: ok: ") and \
        line.endswith("reward n/a, step time n/a, replayed rollout 37"), line
    stopped = {**GPU_BUSY, "replay": [(NOW - 70 * MIN, 20.0)]}
    line = health_with(stopped, lookback=observability.quiet_window(CFG), running_from=since)
    assert "problem (no training step reported in the last 69 min" in line
    assert "replayed rollout" not in line.split("): ", 1)[1]  # older than 15 min: not shown


def test_no_start_time_or_a_job_not_running_is_not_judged():
    assert observability.running_since(rayjob_status("PENDING", started=NOW - 300 * MIN)) is None
    assert observability.running_since(rayjob_status("SUCCEEDED", started=NOW - 300 * MIN)) is None
    assert observability.running_since(rayjob_status("RUNNING")) is None
    assert observability.running_since(None) is None
    # Only KubeRay's attempt start: that one.
    assert observability.running_since(rayjob_status("RUNNING", started=NOW - 300 * MIN)) == \
        NOW - 300 * MIN
    # Not running: the 15-minute query of before, and no verdict on the training metrics.
    line = health_with(GPU_BUSY, lookback=observability.HEALTH_WINDOW, running_from=None)
    assert "ok: " in line


def test_rlkit_status_passes_the_rayjobs_start_to_the_health_line(monkeypatch):
    from ops import launch_cmd

    seen = {}

    def fake_health_line(cloudwatch, cfg, *, now, running_from=None):
        seen["running_from"] = running_from
        return "health: fake"

    monkeypatch.setattr(observability, "health_line", fake_health_line)
    monkeypatch.setattr(launch_cmd.options, "aws_clients",
                        lambda args, region: argparse.Namespace(cloudwatch=object()))
    args = argparse.Namespace(no_health=False)
    launch_cmd._print_health(args, CFG, rayjob_status("RUNNING", ray_started=NOW - 180 * MIN))
    assert seen["running_from"] == NOW - 180 * MIN

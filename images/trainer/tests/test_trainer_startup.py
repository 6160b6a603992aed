"""The launcher logs how long its attempt took to reach the first rollout, from KubeRay's start of
the attempt (the RayJob's status.startTime), so that users can set training.startup_minutes, which
`rlkit launch` counts before a Capacity Block run's first save. Before, nothing measured it, and
the kit's check left the start out."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from kube_helpers import QuietHandler, stand_in_api

from rltrainer import metrics, no_retry, startup
from rltrainer.contract import RAYJOB_ENV

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
PERF_0 = ("[2026-12-01 12:41:00 RolloutManager] metrics.py:89 - perf 0: "
          "{'perf/rollout_time': 360.0, 'perf/tokens_per_gpu_per_sec': 950.5}\n")


@pytest.fixture
def api(tmp_path):
    """A local stand-in for the Kubernetes API server that answers GETs of RayJobs."""
    seen = []

    class Handler(QuietHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            seen.append((self.path, self.headers["Authorization"]))
            if "forbidden" in self.path:
                self.send_response(403)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"status": {"startTime": "2026-12-01T12:00:00Z",
                                                    "jobDeploymentStatus": "Running"}}).encode())


    with stand_in_api(tmp_path, Handler) as (url, sa):
        yield url, sa, seen


def request_via(url, sa):
    return lambda rayjob: no_retry.rayjob_request(rayjob, api_url=url, service_account_dir=sa)


def test_reads_when_kuberay_started_the_attempt(api):
    url, sa, seen = api
    log = io.StringIO()
    assert startup.attempt_start(log, {RAYJOB_ENV: "grpo"}, request_via(url, sa)) == T0
    assert seen == [("/apis/ray.io/v1/namespaces/rl-training/rayjobs/grpo", "Bearer tok")]
    assert log.getvalue() == ""


def test_an_unreadable_start_is_said_and_the_launchers_start_counts(api):
    url, sa, _ = api
    log = io.StringIO()
    clock = startup.StartupClock.begin(log, lambda: T0 + timedelta(minutes=9),
                                       {RAYJOB_ENV: "forbidden"}, request_via(url, sa))
    assert clock.attempt_start is None
    assert log.getvalue().startswith(
        "rltrainer: startup: could not read when KubeRay started this attempt (RayJob forbidden "
        "status.startTime: HTTPError: HTTP Error 403")
    assert "counting from the launcher's start, after the image pull and Ray's start" in log.getvalue()


def test_outside_a_kit_rayjob_nothing_is_read():
    def refuse(rayjob):
        raise AssertionError("no request outside the kit's RayJob")

    assert startup.attempt_start(io.StringIO(), {}, refuse) is None


def test_the_first_rollouts_start_is_logged_once(api):
    """KubeRay started the attempt at 12:00; the launcher ran at 12:09; the first rollout's perf
    line came at 12:47 with 6 minutes of generation: the start took 41 minutes."""
    url, sa, _ = api
    now = [T0 + timedelta(minutes=9)]
    log = io.StringIO()
    clock = startup.StartupClock.begin(log, lambda: now[0], {RAYJOB_ENV: "grpo"}, request_via(url, sa))
    now[0] = T0 + timedelta(minutes=47)
    lines = ["no metric here\n", "[x] log_utils.py:1 - rollout 0: {'rollout/raw_reward': 0.5}\n",
             PERF_0, PERF_0.replace("perf 0", "perf 1")]
    list(metrics.emf_lines(lines, environment="e", run="r", on_metric=clock.on_metric))
    assert log.getvalue().splitlines() == [
        "rltrainer: startup: KubeRay started this attempt at 2026-12-01 12:00:00 UTC; the launcher "
        "runs 9.0 min later (the pods' scheduling, the image pull, Ray's start)",
        "rltrainer: startup: the first rollout (id 0) began 41.0 min after KubeRay's start of this "
        "attempt (on a Capacity Block launched before its start, the wait for it included), at "
        "2026-12-01 12:41:00 UTC; training.startup_minutes estimates this for `rlkit launch` on a "
        "Capacity Block"]


def test_a_failing_observer_never_stops_the_relay():
    """The relay drains the trainer's pipe; if it stopped, the trainer would block on a full pipe."""
    def broken(metric):
        raise RuntimeError("boom")

    out = list(metrics.emf_lines([PERF_0, "plain\n"], environment="e", run="r", on_metric=broken))
    assert [line for line, _ in out] == [PERF_0, "plain\n"] and out[0][1] is not None


def test_the_launcher_logs_the_start_of_a_real_run(monkeypatch):
    """run_training hands each relayed metric line to the startup clock."""
    import sys

    from rltrainer import launch
    from rltrainer.miles import TrainCommand

    seen = []
    cmd = TrainCommand(argv=[sys.executable, "-c", f"import sys; sys.stderr.write({PERF_0!r})"],
                       env={}, cwd=".")
    assert launch.run_training(cmd, metrics_run="r", on_metric=seen.append) == 0
    assert [(m.kind, m.index, m.values["perf/rollout_time"]) for m in seen] == [("perf", 0, 360.0)]

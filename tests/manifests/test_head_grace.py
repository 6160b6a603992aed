"""The Ray head's stop: how long the launcher has, after a stop signal, to upload what finished.

Ray's job stop (KubeRay's StopJob when a RayJob is deleted, and the head's own preStop) SIGKILLs
the launcher RAY_JOB_STOP_WAIT_TIME_S after its SIGTERM (3 s unless set), and the kubelet kills the
head terminationGracePeriodSeconds after a pod's deletion starts (30 s unless set); the kubelet's
SIGTERM itself never reaches the launcher (PID 1 is `ray start`, which takes the container down
within seconds), so the preStop is what stops the job gracefully (manifests/context.py). The budget
is the trainer package's own constant, read here, not copied.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from infra.config import load_config
from manifests import build_context, placeholder_outputs, render
from rltrainer.contract import FINAL_UPLOAD_BUDGET_S
from tests.support import REPO_ROOT

EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


@functools.cache
def rayjob(example: str) -> dict:
    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    return next(f.obj for f in render(build_context(cfg, placeholder_outputs(cfg))) if f.kind == "RayJob")


def _head(job: dict) -> dict:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_head_grace_and_job_stop_wait_cover_the_final_upload_budget(example):
    """Before: no terminationGracePeriodSeconds (30 s), no RAY_JOB_STOP_WAIT_TIME_S (3 s) and no
    preStop: a drain or a deleted RayJob SIGKILLed the launcher mid-upload within seconds."""
    job = rayjob(example)
    head = _head(job)
    env_vars = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    stop_wait = int(env_vars["RAY_JOB_STOP_WAIT_TIME_S"])  # Ray parses it with int()
    grace = head["terminationGracePeriodSeconds"]
    assert stop_wait >= FINAL_UPLOAD_BUDGET_S
    assert grace >= FINAL_UPLOAD_BUDGET_S
    # the preStop's wait outlasts Ray's SIGKILL and ends before the kubelet's, which leaves
    # `ray start` time to take the Ray processes down after the kubelet's SIGTERM
    container = head["containers"][0]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    waits = [int(line.rsplit("+", 1)[1]) for line in command[2].splitlines() if "deadline =" in line]
    assert waits and stop_wait <= waits[0] < grace
    # the workers run no launcher: the kubelet's default grace is theirs
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "terminationGracePeriodSeconds" not in worker
    assert "lifecycle" not in worker["containers"][0]


def test_the_grace_fits_a_capacity_block_scale_down():
    """EKS scales a Capacity Block group to 0 40 minutes before its end and EC2 shuts the
    instances down from 30 minutes before (EKS user guide, capacity-blocks-mng): 10 minutes, and
    EKS terminates a scaled-down node after 15 minutes of eviction (managed-node-groups)."""
    from infra.trainer_contract import EKS_SCALE_DOWN_MARGIN_S

    ec2_shutdown_margin_s = 30 * 60
    grace = _head(rayjob("p5en-capacity-block"))["terminationGracePeriodSeconds"]
    assert grace <= EKS_SCALE_DOWN_MARGIN_S - ec2_shutdown_margin_s


def test_replace_waits_for_the_old_head_to_finish_its_upload():
    """`rlkit launch --replace` deletes the old RayJob and waits for its pods: the wait must
    outlast the head's grace, or a replace of a running job times out during its final upload."""
    from ops.launch_cmd import REPLACE_TIMEOUT_S

    assert REPLACE_TIMEOUT_S > _head(rayjob("default"))["terminationGracePeriodSeconds"]


FAKE_RAY = '''
import json, os

LOG = os.environ["FAKE_RAY_LOG"]


class _Status(str):
    def is_terminal(self):
        return self in ("SUCCEEDED", "FAILED", "STOPPED")


class _Job:
    def __init__(self, submission_id, status):
        self.submission_id, self.status = submission_id, _Status(status)


class JobSubmissionClient:
    polls = 0

    def __init__(self, address):
        self._log("address", address)

    def _log(self, *event):
        with open(LOG, "a") as f:
            f.write(json.dumps(event) + "\\n")

    def list_jobs(self):
        # a driver started with ray.init() has no submission ID; a finished job needs no stop
        return [_Job("raysubmit_done", "SUCCEEDED"), _Job(None, "RUNNING"), _Job("raysubmit_live", "RUNNING")]

    def stop_job(self, job):
        self._log("stop", job)
        return True

    def get_job_status(self, job):
        JobSubmissionClient.polls += 1
        status = "RUNNING" if JobSubmissionClient.polls < 2 else "STOPPED"
        self._log("status", job, status)
        return _Status(status)
'''


def test_pre_stop_stops_the_running_job_and_waits_until_it_has_stopped(tmp_path):
    """The preStop script itself, run against a stand-in for Ray's job SDK: it stops only the
    running submitted job, through the head's own dashboard, and returns once Ray says STOPPED
    (the launcher's final upload is over, or Ray's SIGKILL ended it)."""
    from manifests.context import HEAD_PRE_STOP

    fake = tmp_path / "ray"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "job_submission.py").write_text(textwrap.dedent(FAKE_RAY))
    log = tmp_path / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "FAKE_RAY_LOG": str(log)}
    argv = [sys.executable, *HEAD_PRE_STOP[1:]]  # python3 in the image; this interpreter here
    subprocess.run(argv, env=env, check=True, timeout=60)
    events = [tuple(json.loads(line)) for line in log.read_text().splitlines()]
    assert events == [("address", "http://127.0.0.1:8265"), ("stop", "raysubmit_live"),
                      ("status", "raysubmit_live", "RUNNING"), ("status", "raysubmit_live", "STOPPED")]

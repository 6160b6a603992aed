"""`rlkit status` on a RayJob that KubeRay calls Running while its submitter pod cannot start.

KubeRay v1.7.0 moves the RayJob Initializing -> Running once the submitter Job exists
(ray-project/kuberay@59d663a rayjob_controller.go:231-236), checks preRunningDeadlineSeconds only
while Initializing (:188), and in Running requeues a Ray job not found for as long as the
submitter Job has not failed (:302-316): a submitter pod in ImagePullBackOff holds the Ray
cluster, and its GPU nodes, for ever. Before, status said "running" and exited 0.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from tests.support.fakes import FakeKubectl, rayjob, run

NOW = datetime(2026, 12, 2, 12, 30, tzinfo=timezone.utc)
JOB = "qwen3-30b-a3b-grpo"
POD = f"{JOB}-x7k2p"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlkit-gt-trainer:v1"


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    import ops.launch_cmd as launch_cmd

    monkeypatch.setattr(launch_cmd, "utcnow", lambda: NOW)
    return FakeKubectl(tmp_path, monkeypatch)


def submitter_pod(waiting: str | None = None, *, created: str | None = None,
                  phase: str = "Pending", unschedulable: str | None = None,
                  name: str = POD) -> dict:
    """A submitter pod as `kubectl get pods -o json` prints it (the fields rlkit reads)."""
    status: dict = {"phase": phase}
    if waiting:
        status["containerStatuses"] = [{"name": "ray-job-submitter", "state": {"waiting": {
            "reason": waiting, "message": f"Back-off pulling image \"{IMAGE}\""}}}]
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": unschedulable}]
    meta: dict = {"name": name, "labels": {"batch.kubernetes.io/job-name": JOB}}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "status": status,
            "spec": {"containers": [{"name": "ray-job-submitter", "image": IMAGE}]}}


def pods(*items: dict) -> str:
    return json.dumps({"items": list(items)})


def test_a_submitter_in_image_pull_backoff_is_stuck_and_named(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Running", startTime="2026-12-02T12:00:00Z"))
    kubectl.rule(["get", "pods"], stdout=pods(submitter_pod("ImagePullBackOff")))
    assert run(tmp_path, "status", "--no-health") == 1
    err = capsys.readouterr().err
    assert ["get", "pods", "-n", "rl-training", "-l",
            f"batch.kubernetes.io/job-name={JOB}"] == kubectl.calls[1][:6]
    stuck = [line for line in err.splitlines() if line.startswith("Stuck:")]
    assert len(stuck) == 1, err
    assert stuck[0].startswith(
        f"Stuck: RayJob {JOB} is Running but its Ray job was never submitted: submitter pod {POD} "
        f"Pending: ImagePullBackOff (Back-off pulling image \"{IMAGE}\") (its image cannot be "
        "pulled).")
    assert f"Fix: check that the image ({IMAGE}) exists" in stuck[0]
    assert f"kubectl describe pod {POD} -n rl-training" in stuck[0]
    assert f"To free the GPU nodes now: kubectl delete rayjob {JOB} -n rl-training" in stuck[0]
    assert "rlkit launch --replace --config" in stuck[0]


def test_the_watch_ends_at_a_stuck_submitter_and_json_carries_the_line(tmp_path, kubectl, capsys):
    """Before, --watch followed a RayJob that KubeRay never ends, for ever."""
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Running", startTime="2026-12-02T12:00:00Z"))
    kubectl.rule(["get", "pods"], stdout=pods(
        submitter_pod("ErrImagePull", created="2026-12-02T12:05:00Z")))
    assert run(tmp_path, "status", "--watch", "--no-health", "-o", "json") == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["stuck"].startswith(f"Stuck: RayJob {JOB} is Running") and doc["finished"] is False
    assert len([c for c in kubectl.calls if "rayjob" in c]) == 1


def test_an_unschedulable_submitter_names_the_scheduler_and_the_heads_node(tmp_path, kubectl,
                                                                          capsys):
    why = "0/4 nodes are available: 4 Insufficient memory."
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Running", startTime="2026-12-02T12:00:00Z"))
    kubectl.rule(["get", "pods"], stdout=pods(submitter_pod(unschedulable=why)))
    assert run(tmp_path, "status", "--no-health") == 1
    err = capsys.readouterr().err
    assert f"submitter pod {POD} Pending: {why} (no node can take it)" in err
    assert "Fix: no node fits it beside the Ray head" in err


@pytest.mark.parametrize("case, stdout, said", [
    ("pulling, slow but not stuck", pods(submitter_pod("ContainerCreating")),
     f"Submitting (Running with no Ray job status; attempt started 2026-12-02T12:00:00Z): "
     f"submitter pod {POD} is still starting: Pending: ContainerCreating (Back-off pulling image "
     f"\"{IMAGE}\") (pulling its image can take many minutes)"),
    ("a pull error on a pod only 5 minutes old",
     pods(submitter_pod("ImagePullBackOff", created="2026-12-02T12:25:00Z")),
     f"submitter pod {POD} is still starting: Pending: ImagePullBackOff"),
    ("no pod yet", pods(),
     f"the submitter Job {JOB} has no pod yet. Why: kubectl describe job {JOB} -n rl-training"),
    ("the newest pod runs", pods(submitter_pod("ImagePullBackOff", created="2026-12-02T12:01:00Z",
                                               name=f"{JOB}-old11"),
                                 submitter_pod(phase="Running", created="2026-12-02T12:20:00Z")),
     f"submitter pod {POD} is Running; KubeRay has not found the Ray job yet"),
])
def test_a_submitter_that_is_only_slow_is_said_not_failed(tmp_path, kubectl, capsys, case, stdout,
                                                         said):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Running", startTime="2026-12-02T12:00:00Z"))
    kubectl.rule(["get", "pods"], stdout=stdout)
    assert run(tmp_path, "status", "--no-health") == 0, case
    err = capsys.readouterr().err
    assert said in err and "Stuck:" not in err, (case, err)


def test_a_running_ray_job_or_a_fresh_attempt_reads_no_submitter_pods(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout_seq=[
        rayjob("RUNNING", "Running", startTime="2026-12-02T12:00:00Z"),
        rayjob("", "Running", startTime="2026-12-02T12:27:00Z")])
    for _ in range(2):
        assert run(tmp_path, "status", "--no-health") == 0
    assert not [c for c in kubectl.calls if "pods" in c]
    assert "Submitting" not in capsys.readouterr().err


def test_a_failed_read_of_the_submitter_pods_is_said_not_fatal(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Running", startTime="2026-12-02T12:00:00Z"))
    kubectl.rule(["get", "pods"], rc=1, stderr="Error from server (Forbidden): pods is forbidden\n")
    assert run(tmp_path, "status", "--no-health") == 0
    assert f"Submitting; could not read the pods of submitter Job {JOB}" in capsys.readouterr().err

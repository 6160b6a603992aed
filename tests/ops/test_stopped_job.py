"""`rlkit status` on a Ray job that ended STOPPED: since the Ray head's preStop stops the job when
its pod is deleted (a drain, a node group update or scale-down, a Capacity Block's end), STOPPED is
not only a `ray job stop`. Before, status said only "Read its output", and nothing of the drain
or of `rlkit launch --replace`, which resumes from the newest complete save."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from ops import launch_cmd
from ops.stopped_job import drain_signs, stopped_advice
from tests.support.fakes import FakeKubectl, rayjob, run

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
END = NOW - timedelta(minutes=3)
NODE = "ip-10-0-1-10.ec2.internal"
CLUSTER = "qwen3-30b-a3b-grpo-raycluster-x"
ADVICE_TAIL = ("`rlkit launch --replace{flag}` starts the run again from its newest complete save (in "
               "S3, or one on the shared file system that the stop left unuploaded, which the "
               "launcher uploads first). Read its output: rlkit logs{flag}")
HEAD_START = ("The job was stopped before it finished (jobStatus STOPPED): by `ray job stop`, or by "
              "the Ray head's preStop when its pod was deleted (a node drain, a node group update or "
              "scale-down, a Capacity Block's end), and KubeRay does not retry it. ")


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    monkeypatch.setattr(launch_cmd, "utcnow", lambda: NOW)
    return FakeKubectl(tmp_path, monkeypatch)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def head(created: datetime = END - timedelta(hours=5), deleting: bool = False,
         node: str = NODE) -> dict:
    meta = {"name": f"{CLUSTER}-head-abcde", "creationTimestamp": _iso(created)}
    if deleting:
        meta["deletionTimestamp"] = _iso(NOW)
    return {"metadata": meta, "spec": {"nodeName": node}}


def node(ready: bool = True, cordoned: bool = False) -> dict:
    return {"metadata": {"name": NODE}, "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


def stopped(end: datetime = END) -> dict:
    doc = json.loads(rayjob("STOPPED", "Complete", endTime=_iso(end)))
    doc["spec"]["ttlSecondsAfterFinished"] = 600
    return doc


def test_status_of_a_job_stopped_by_a_drain_says_so_and_how_the_run_goes_on(tmp_path, kubectl,
                                                                              capsys):
    kubectl.rule(["get", "rayjob"], stdout=json.dumps(stopped()))
    kubectl.rule(["get", "pods", f"ray.io/cluster={CLUSTER},ray.io/node-type=head"],
                 stdout=json.dumps({"items": [head(deleting=True)]}))
    kubectl.rule(["get", "node", NODE], stdout=json.dumps(node(cordoned=True)))
    assert run(tmp_path, "status") == 1
    flag = f" --config {tmp_path / 'gt.yaml'}"
    assert (HEAD_START + "This one looks like the head pod's deletion (a drain): its head pod "
            f"{CLUSTER}-head-abcde is being deleted; the head's node {NODE} is cordoned, as a drain "
            "does first. " + ADVICE_TAIL.format(flag=flag)) in capsys.readouterr().err


def test_a_stop_with_the_head_where_it_was_names_no_drain_but_still_the_way_on(tmp_path, kubectl,
                                                                               capsys):
    kubectl.rule(["get", "rayjob"], stdout=json.dumps(stopped()))
    kubectl.rule(["get", "pods", f"ray.io/cluster={CLUSTER},ray.io/node-type=head"], stdout=json.dumps({"items": [head()]}))
    kubectl.rule(["get", "node", NODE], stdout=json.dumps(node()))
    assert run(tmp_path, "status") == 1
    err = capsys.readouterr().err
    assert HEAD_START + ADVICE_TAIL.format(flag=f" --config {tmp_path / 'gt.yaml'}") in err


def test_a_failed_read_of_the_pods_still_gives_the_advice(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=json.dumps(stopped()))
    kubectl.rule(["get", "pods"], rc=1, stderr="Error from server (Forbidden): pods is forbidden\n")
    assert run(tmp_path, "status") == 1
    err = capsys.readouterr().err
    assert HEAD_START + ADVICE_TAIL.format(flag=f" --config {tmp_path / 'gt.yaml'}") in err


@pytest.mark.parametrize("heads, nodes, signs", [
    ([head()], {NODE: node()}, []),  # `ray job stop`: the head that ran it, on a Ready node
    ([head(created=END + timedelta(minutes=1))], {NODE: node()},
     [f"its head pod {CLUSTER}-head-abcde was created after the job ended (a new one: the head "
      "that ran the job was deleted)"]),
    ([head()], {NODE: None}, [f"the head's node {NODE} is gone"]),
    ([head()], {NODE: node(ready=False)}, [f"the head's node {NODE} is NotReady"]),
    ([], {}, ["its Ray cluster has no head pod 3 min after the job ended, though KubeRay deletes "
              "the cluster only 600 s after that"]),
    (None, {}, []),  # not read
])
def test_drain_signs(heads, nodes, signs):
    assert drain_signs(stopped(), heads, nodes, NOW) == signs


def test_no_head_after_kuberays_own_cleanup_says_nothing():
    assert drain_signs(stopped(end=NOW - timedelta(minutes=11)), [], {}, NOW) == []
    assert "looks like" not in stopped_advice(stopped(end=NOW - timedelta(minutes=11)), [], {}, NOW, "")

"""`rlkit gate`: the comparison logic on recorded logs, and the kubectl flow with a fake kubectl."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from infra import acceptance
from infra.config import parse_config
from ops import gate_cmd
from ops.gate import FAIL, PASS, WARN, evaluate, faster_backend, nccl_transport, state_document
from ops.gate_cmd import GateInterrupted, GateRunner
from ops.kube import Kubectl

FIXTURES = Path(__file__).parent / "fixtures" / "gate"
FAKE_KUBECTL = FIXTURES / "fake_kubectl.py"


def scenario(name: str) -> tuple[dict, dict[str, str]]:
    d = FIXTURES / name
    meta = json.loads((d / "meta.json").read_text())
    logs = {p.stem: p.read_text() for p in d.glob("*.log")}
    return meta, logs


def judge(name: str, instance_type: str | None = None):
    meta, logs = scenario(name)
    return evaluate(logs, instance_type or meta["instance_type"], meta["nodes"], meta["ep_backend"])


def by_check(report) -> dict:
    return {f.check: f for f in report.findings}


# --- comparison on recorded outputs --------------------------------------------------------------


def test_healthy_p5_passes_with_measured_and_expected_figures():
    report = judge("pass-p5-2node")
    f = by_check(report)
    assert report.ok
    assert f["all-reduce busbw @ 2 GiB"].status == PASS
    assert f["all-reduce busbw @ 2 GiB"].measured == "441.7 GB/s"
    assert f["all-reduce busbw @ 2 GiB"].expected == ">= 393.3 GB/s (90% of 437 published)"
    assert f["all-reduce busbw @ 16 GiB"].status == PASS
    assert f["NCCL transport"].status == PASS
    assert f["NCCL transport"].detail == "NCCL's log names the OFI plugin"
    assert f["nodecheck"].status == PASS


def test_no_published_ep_figure_is_a_warning_never_a_silent_pass():
    f = by_check(judge("pass-p5-2node"))["EP nccl"]
    assert f.status == WARN
    assert f.detail == "no published threshold for nccl on 2 x p5.48xlarge: recorded only"


def test_instance_type_without_any_figure_is_recorded_only():
    report = judge("pass-p5-2node", instance_type="p5e.48xlarge")
    f = by_check(report)["all-reduce busbw"]
    assert f.status == WARN
    assert f.detail == "no published threshold for p5e.48xlarge: recorded only"
    assert not any(x.status == PASS and x.check.startswith("all-reduce busbw")
                   for x in report.findings)


def test_degraded_fabric_fails_with_share_of_published_figure():
    report = judge("degraded-p5-2node")
    f = by_check(report)
    assert not report.ok
    low = f["all-reduce busbw @ 2 GiB"]
    assert low.status == FAIL and low.measured == "283.9 GB/s"
    assert low.detail.startswith("degraded fabric: 65% of the published figure")
    assert "cluster placement group" in low.fix
    assert f["NCCL transport"].status == PASS  # slow, but still EFA


def test_socket_fallback_detected_from_nccl_log():
    f = by_check(judge("sockets-p5-2node"))["NCCL transport"]
    assert f.status == FAIL and f.measured == "TCP sockets"
    assert f.detail == "NCCL fell back to sockets: its log says NET/Socket"
    assert "NCCL_NET_PLUGIN=ofi" in f.fix


def test_socket_fallback_detected_from_bandwidth_alone():
    meta, logs = scenario("sockets-p5-2node")
    logs["allreduce"] = "\n".join(l for l in logs["allreduce"].splitlines() if "NCCL INFO" not in l)
    report = evaluate(logs, meta["instance_type"], meta["nodes"], meta["ep_backend"])
    f = by_check(report)["NCCL transport"]
    assert f.status == FAIL
    assert f.detail == "bandwidth far below EFA: NCCL most likely fell back to TCP sockets"
    assert f.expected == f">= {acceptance.socket_suspect_GBps('p5.48xlarge', 3200):.1f} GB/s on EFA"


def test_missing_efa_devices_fail_and_later_jobs_are_reported_not_run():
    report = judge("missing-efa-p5-2node")
    f = by_check(report)
    efa = f["node 0: EFA devices"]
    assert efa.status == FAIL and (efa.measured, efa.expected) == ("0", "32")
    assert efa.detail.startswith("missing EFA devices: the pod sees 0 of 32")
    assert "aws-efa-k8s-device-plugin" in efa.fix
    assert f["allreduce"].status == FAIL and f["allreduce"].measured == "not run"
    assert f["ep"].status == FAIL


def test_deepep_on_p5en_passes_against_published_dispatch_and_combine():
    report = judge("pass-p5en-deepep-2node")
    f = by_check(report)
    assert report.ok
    assert f["EP deepep-nvshmem dispatch"].status == PASS
    assert f["EP deepep-nvshmem dispatch"].measured == "66.4 GB/s"
    assert f["EP deepep-nvshmem combine"].expected.startswith(">= 53.1 GB/s (90% of 59 published")
    assert report.ep.backend == "deepep-nvshmem"


def test_wrong_ep_results_fail():
    meta, logs = scenario("pass-p5en-deepep-2node")
    logs["ep"] = logs["ep"].replace('"correct": true', '"correct": false')
    f = by_check(evaluate(logs, meta["instance_type"], 2, "deepep-nvshmem"))
    assert f["expert parallel results"].status == FAIL
    assert "timings mean nothing" in f["expert parallel results"].detail


def test_single_node_allreduce_is_flagged_as_not_spanning_the_nodes():
    meta, logs = scenario("pass-p5-2node")
    logs["allreduce"] = logs["allreduce"].replace('"world_size": 16', '"world_size": 8')
    f = by_check(evaluate(logs, "p5.48xlarge", 2, "nccl"))["all-reduce ranks"]
    assert f.status == FAIL and (f.measured, f.expected) == ("8", "16")


def test_transport_markers():
    assert nccl_transport("x NCCL INFO Using network Socket") == "socket"
    assert nccl_transport("x NCCL INFO Using network AWS Libfabric") == "ofi"
    assert nccl_transport("no nccl lines") is None


def test_state_merges_ep_measurements_and_picks_the_faster_backend():
    report = judge("pass-p5en-deepep-2node")
    prev = {"instance_type": "p5en.48xlarge", "nodes": 2,
            "ep": {"shape": report.ep.shape, "measurements": {
                "nccl": {"dispatch_GBps": 30.0, "combine_GBps": 29.0, "time_us": 9e9}}}}
    doc = state_document(report, "cb", "2026-03-01T12:00:00+00:00", prev)
    assert set(doc["ep"]["measurements"]) == {"nccl", "deepep-nvshmem"}
    assert doc["ep"]["faster"] == "deepep-nvshmem" and doc["ok"] is True
    assert faster_backend({"a": {"time_us": 2}, "b": {"time_us": 1}}) == "b"


def test_state_ignores_earlier_measurements_of_another_shape():
    report = judge("pass-p5en-deepep-2node")
    prev = {"instance_type": "p5en.48xlarge", "nodes": 4,
            "ep": {"shape": report.ep.shape, "measurements": {"nccl": {"time_us": 1}}}}
    doc = state_document(report, "cb", "now", prev)
    assert set(doc["ep"]["measurements"]) == {"deepep-nvshmem"}


# --- the kubectl flow ----------------------------------------------------------------------------

CONFIG = """
name: gt
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
gpu_node_groups:
  p5: {instance_type: p5.48xlarge, availability_zone: us-east-1a, desired_size: 2, max_size: 2}
training: {node_group: p5, nodes: 2}
"""


def outputs_file(tmp_path: Path, name: str = "gt") -> Path:
    data = {
        # TrainerRoleArn is in both: it moved from the cluster to the data stack.
        f"{name}-data": {"DataBucketName": "gt-bucket",
                         "EcrRepositoryUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gt",
                         "TrainerRoleArn": "arn:aws:iam::123456789012:role/gt-trainer"},
        f"{name}-cluster": {"ClusterName": "gt-cluster", "Region": "us-east-1",
                            "TrainerNamespace": "rl-training",
                            "TrainerServiceAccount": "rl-trainer",
                            "TrainerRoleArn": "arn:aws:iam::123456789012:role/gt-trainer"},
        f"{name}-gpu-p5": {"NodegroupName": "gt-p5"},
    }
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps(data))
    return path


class FakeKubectl:
    """Puts a recording kubectl first on PATH; ``calls`` are the argv lists it got."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "kubectl-calls.jsonl"
        self.rules_path = tmp_path / "kubectl-rules.json"
        exe = self.bin / "kubectl"
        exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_KUBECTL} \"$@\"\n")
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{self.bin}:/usr/bin:/bin")
        monkeypatch.setenv("FAKE_KUBECTL_LOG", str(self.log))
        monkeypatch.setenv("FAKE_KUBECTL_RULES", str(self.rules_path))
        self.rules: list[dict] = []

    def rule(self, match, **answer):
        self.rules.append({"match": match, **answer})
        self.rules_path.write_text(json.dumps(self.rules))

    @property
    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(l) for l in self.log.read_text().splitlines()]


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    return FakeKubectl(tmp_path, monkeypatch)


def job_json(done: bool, failed: bool = False) -> str:
    conds = []
    if done:
        conds = [{"type": "Failed" if failed else "Complete", "status": "True"}]
    return json.dumps({"status": {"active": 0 if done else 2, "succeeded": 2 if done and not failed
                                  else 0, "conditions": conds}})


def pods_json(job: str, phase: str = "Running", message: str | None = None) -> str:
    status: dict = {"phase": phase}
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    return json.dumps({"items": [{"metadata": {"name": f"{job}-0-abcde"}, "status": status}]})


def script_cluster(k: FakeKubectl, fixture: str, failing_job: str | None = None) -> None:
    for key in ("nodecheck", "allreduce", "ep"):
        job = f"fabric-p5-{key}"
        k.rule(["get", "job", job], stdout_seq=[job_json(False), job_json(True, key == failing_job)])
        k.rule(["get", "pods", f"job-name={job}"], stdout=pods_json(job))
        log = FIXTURES / fixture / f"{key}.log"
        if log.exists():
            k.rule(["logs", f"{job}-0-abcde"], stdout_file=str(log))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlkit")
    gate_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def run_gate(tmp_path: Path, *extra: str) -> int:
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--outputs", str(outputs_file(tmp_path)),
                  "--out", str(tmp_path / "out"), "--state-dir", str(tmp_path / ".rlkit"),
                  "--poll", "0", "--width", "250", *extra])
    return args.func(args)


def test_gate_runs_each_job_in_order_and_records_a_pass(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node")
    code = run_gate(tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    applied = [c[c.index("-f") + 1] for c in kubectl.calls if c[0] == "apply"]
    assert applied == [str(tmp_path / "out/00-namespace.yaml")] + [
        str(tmp_path / f"out/fabric/{k}") for k in ("nodecheck", "allreduce", "ep")]
    deletes = [c for c in kubectl.calls if c[0] == "delete"]
    assert len(deletes) == 6  # before (stale run) and after each job
    state = json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())
    assert state["ok"] is True and state["ep"]["faster"] == "nccl"
    assert (tmp_path / ".rlkit/gt/gate-logs/allreduce.log").read_text() == (
        FIXTURES / "pass-p5-2node/allreduce.log").read_text()
    assert "nodecheck: 0 succeeded, 0 failed, pods 1 Running" in out
    assert "Gate PASSED" in out


def test_gate_stops_after_a_failed_node_check(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "missing-efa-p5-2node")
    code = run_gate(tmp_path)
    out = capsys.readouterr().out
    assert code == 1
    assert not any("fabric/allreduce" in " ".join(c) for c in kubectl.calls if c[0] == "apply")
    assert "Node check failed: the benchmarks are skipped." in out
    assert "Gate FAILED" in out and "missing EFA devices" in out
    assert json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())["ok"] is False


def test_gate_reports_a_failed_job(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node", failing_job="allreduce")
    assert run_gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "job fabric-p5-allreduce failed" in out


def test_gate_times_out_and_names_pending_pods(tmp_path, kubectl, capsys):
    job = "fabric-p5-nodecheck"
    kubectl.rule(["get", "job", job], stdout=job_json(False))
    kubectl.rule(["get", "pods", f"job-name={job}"], stdout=pods_json(
        job, "Pending", "0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa."))
    assert run_gate(tmp_path, "--timeout", "0") == 1
    out = capsys.readouterr().out
    assert "(0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa.)" in out
    assert "did not finish in time" in out


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, kubectl, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "out"),
                  "--state-dir", str(tmp_path / ".rlkit")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert kubectl.calls == []
    assert not (tmp_path / "out").exists()
    assert f"[dry-run] kubectl apply -f {tmp_path}/out/fabric/nodecheck" in out
    assert "[dry-run] kubectl wait -n rl-training job/fabric-p5-allreduce" in out
    assert "[dry-run] would judge the logs" in out


def _runner(tmp_path, k: Kubectl, sleep) -> GateRunner:
    out = tmp_path / "out"
    (out / "fabric" / "nodecheck").mkdir(parents=True)
    (out / "fabric" / "nodecheck" / "00-job.yaml").write_text(
        "kind: Job\nmetadata: {name: fabric-p5-nodecheck, namespace: rl-training}\n")
    return GateRunner(k, "rl-training", out, [("nodecheck", "fabric-p5-nodecheck")],
                      "p5.48xlarge", 2, timeout_s=100, poll_s=1, echo=lambda s: None,
                      sleep=sleep)


def _interrupt(_):
    raise KeyboardInterrupt


def test_ctrl_c_deletes_what_the_gate_applied(tmp_path, kubectl):
    kubectl.rule(["get", "job"], stdout=job_json(False))
    runner = _runner(tmp_path, Kubectl(), _interrupt)
    with pytest.raises(GateInterrupted) as err:
        runner.run()
    assert str(err.value) == ("Interrupted; deleted job/fabric-p5-nodecheck from namespace "
                              "rl-training.")
    assert kubectl.calls[-1][:3] == ["delete", "--ignore-not-found", "--wait=true"]


def test_ctrl_c_reports_exactly_what_is_left_when_delete_fails(tmp_path, kubectl):
    kubectl.rule(["get", "job"], stdout=job_json(False))
    kubectl.rule(["delete", "--timeout=60s"], rc=1, stderr="Unable to connect to the server")
    runner = _runner(tmp_path, Kubectl(), _interrupt)
    with pytest.raises(GateInterrupted) as err:
        runner.run()
    msg = str(err.value)
    assert "Left in namespace rl-training: job/fabric-p5-nodecheck." in msg
    assert f"kubectl delete --ignore-not-found -f {tmp_path}/out/fabric/nodecheck" in msg
    assert "Unable to connect to the server" in msg


def test_missing_kubectl_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_gate(tmp_path) == 2
    assert "kubectl is not installed or not on PATH" in capsys.readouterr().err


def test_logs_dir_judges_recorded_logs(tmp_path, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--logs-dir", str(FIXTURES / "degraded-p5-2node"),
                  "--state-dir", str(tmp_path / ".rlkit"), "--width", "250"])
    assert args.func(args) == 1
    assert "degraded fabric" in capsys.readouterr().out


def test_ep_backend_override_is_validated(tmp_path, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--ep-backend", "deepep-gin", "--dry-run",
                  "--state-dir", str(tmp_path / ".rlkit"), "--out", str(tmp_path / "o")])
    args.func(args)
    assert "EP backend deepep-gin" in capsys.readouterr().out


def test_config_is_valid_for_the_fixture_shapes():
    cfg = parse_config(__import__("yaml").safe_load(CONFIG))
    assert cfg.training.nodes * 8 == 16  # the fixtures' world_size

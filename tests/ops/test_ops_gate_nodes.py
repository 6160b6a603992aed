"""Finding the bad node: bisection on recorded reruns, the subset job, isolation with a fake kubectl."""

from __future__ import annotations

import json

import pytest
import yaml

from ops.gate import FAIL, PASS, WARN, evaluate
from ops.gate.bisect import SubsetResult, find_bad_nodes, isolation_commands, subset_job
from ops.gate.nodes import find_bad, isolate, nodes_of, rerun_remaining
from ops.gate.record import BASELINE_RUNS, baseline_file, load_baseline, state_document, update_baseline
from infra.config import load_config
from ops.gate.runner import GateInterrupted
from ops.kube import Kubectl, KubectlError
from tests.support.fakes import FIXTURES, by_check, judge, kubectl, scenario  # noqa: F401 (fixture)
from tests.support import REPO_ROOT

NODES = [f"ip-10-0-1-{10 + i}.ec2.internal" for i in range(4)]


def recorded_reruns(fixture: str, calls: list):
    """run_subset from the fixture's bisect/<node>+<node>/ logs (what the reruns printed)."""

    def run_subset(key, nodes, suffix):
        calls.append((key, list(nodes), suffix))
        path = FIXTURES / fixture / "bisect" / "+".join(sorted(nodes)) / f"{key}.log"
        return ("complete", path.read_text()) if path.is_file() else ("failed", "")

    return run_subset


def test_a_slow_node_is_named_by_bisection_on_recorded_reruns():
    meta, logs = scenario("slow-node-p5-4node")
    report = evaluate(logs, "p5.48xlarge", 4, "nccl")
    assert not report.ok and not report.bad_nodes  # slow, but every NIC carried traffic
    assert by_check(report)["EFA traffic (allreduce)"].status == PASS
    calls, echoed = [], []
    findings = find_bad(report, logs, recorded_reruns("slow-node-p5-4node", calls), {}, None, echoed.append)
    # halves first, then each suspect with a node seen healthy
    assert [c[1] for c in calls] == [NODES[:2], NODES[2:], [NODES[2], NODES[0]], [NODES[3], NODES[0]]]
    assert [c[2] for c in calls] == ["b1", "b2", "b3", "b4"]
    f = {x.check: x for x in findings}
    bad = f["bad node ip-10-0-1-12.ec2.internal"]
    assert bad.status == FAIL and bad.measured == "drags allreduce"
    assert "kubectl cordon ip-10-0-1-12.ec2.internal; kubectl taint nodes ip-10-0-1-12.ec2.internal " \
           "rlkit/fabric=failed:NoSchedule --overwrite" in bad.fix
    # the cordon is not what replaces it: the instance (nodes.json's providerID) is, run by the user
    assert ("which keeps new pods off it; a cordon does not get it replaced (EKS node auto-repair "
            "acts on node conditions (Ready, AcceleratedHardwareReady, ...), not on cordons): "
            "replace instance i-0000000000000000c yourself: aws autoscaling "
            "terminate-instance-in-auto-scaling-group --instance-id i-0000000000000000c "
            "--no-should-decrement-desired-capacity; then run `rlkit gate` again") in bad.fix
    assert report.bad_nodes == {"ip-10-0-1-12.ec2.internal": "drags allreduce (bisection)"}
    assert f[f"bisection (allreduce) on {NODES[0]}, {NODES[1]}"].status == PASS
    assert "all-reduce busbw @ 2 GiB: 291.5 GB/s" in f[f"bisection (allreduce) on {NODES[2]}, {NODES[3]}"].detail


def test_each_rerun_is_also_held_to_the_instance_types_baseline():
    meta, logs = scenario("slow-node-p5-4node")
    report = evaluate(logs, "p5.48xlarge", 4, "nccl")
    calls: list = []
    # a baseline higher than every rerun: nothing passes, so nothing is known healthy
    findings = find_bad(report, logs, recorded_reruns("slow-node-p5-4node", calls),
                        {"all-reduce busbw @ 16 GiB (GB/s)": 600.0}, None, lambda _: None)
    f = {x.check: x for x in findings}
    assert "below 90% of the baseline 600.0" in f[f"bisection (allreduce) on {NODES[0]}, {NODES[1]}"].detail
    assert f["bisection (allreduce)"].status == WARN and not report.bad_nodes


def test_bisection_algorithm_edges():
    def measure_bad(*bad):
        return lambda nodes: SubsetResult(nodes, not set(bad) & set(nodes), "")
    six = [f"n{i}" for i in range(6)]
    found = find_bad_nodes(six, measure_bad("n4"))
    assert found.bad == ["n4"] and not found.undecided
    found = find_bad_nodes(six, measure_bad("n1", "n4"))
    assert sorted(found.bad) == ["n1", "n4"]
    # three suspects and no healthy node: the pairs among them
    found = find_bad_nodes(["a", "b", "c"], measure_bad("b"))
    assert found.bad == ["b"]
    # two nodes cannot be split by a two-node benchmark
    assert find_bad_nodes(["a", "b"], measure_bad("a")).undecided == ["a", "b"]
    # both halves pass alone: no single node drags it
    found = find_bad_nodes(["a", "b", "c", "d"], lambda nodes: SubsetResult(nodes, True, ""))
    assert found.bad == [] and "no single node drags" in found.note


def test_two_bad_nodes_of_three_name_no_node_they_cannot_prove_bad():
    """Three suspects, a and b bad: every pair fails, so each node "failed all its pairs", but
    healthy c did too. Nothing proves any one of them bad: all three are "cannot tell"."""
    def measure_bad(*bad):
        return lambda nodes: SubsetResult(nodes, not set(bad) & set(nodes), "")

    found = find_bad_nodes(["a", "b", "c"], measure_bad("a", "b"))
    assert found.bad == [] and found.undecided == ["a", "b", "c"]
    assert "every pair among a, b, c failed: at least two of them are bad" in found.note
    # all three bad: the same results, the same answer
    assert find_bad_nodes(["a", "b", "c"], measure_bad("a", "b", "c")).bad == []
    # one pair passes: its two nodes are healthy, and the third failed beside a healthy one
    found = find_bad_nodes(["a", "b", "c"], measure_bad("c"))
    assert found.bad == ["c"] and not found.undecided
    # results that contradict each other (a flaky run) name nobody
    flaky = {("a", "b"): True, ("a", "c"): True, ("b", "c"): False}
    found = find_bad_nodes(["a", "b", "c"], lambda nodes: SubsetResult(nodes, flaky[tuple(nodes)], ""))
    assert found.bad == [] and "does not repeat" in found.note


def test_a_three_node_run_with_two_bad_nodes_isolates_nothing(tmp_path, kubectl):
    """Through find_bad and --isolate: the undecided nodes are a warning, never cordoned."""
    meta, logs = scenario("slow-node-p5-4node")
    three = NODES[:3]
    logs = {k: "\n".join(l for l in v.splitlines() if NODES[3] not in l) for k, v in logs.items()}
    report = evaluate(logs, "p5.48xlarge", 3, "nccl")
    bad = {NODES[0], NODES[1]}
    healthy = (FIXTURES / "slow-node-p5-4node/bisect" / f"{NODES[0]}+{NODES[1]}" / "allreduce.log").read_text()

    def run_subset(key, nodes, suffix):
        return ("failed", "") if bad & set(nodes) else ("complete", healthy)

    findings = find_bad(report, logs, run_subset, {}, None, lambda _: None)
    assert not report.bad_nodes
    f = {x.check: x for x in findings}
    assert not [c for c in f if c.startswith("bad node")]
    warn = f["bisection (allreduce)"]
    assert warn.status == WARN and warn.measured == f"cannot tell: {', '.join(three)}"
    assert "none of them is named bad or isolated" in warn.detail
    kubectl.rule(["get", "nodes"], stdout=json.dumps({"items": [{"metadata": {"name": n}} for n in three]}))
    assert isolate(Kubectl(), report.bad_nodes, "rlkit.aws/node-group=p5", lambda _: None) == ([], [])
    assert not [c for c in kubectl.calls if c[0] in ("cordon", "taint")]


def test_a_node_left_undecided_is_paired_with_a_node_found_healthy_later():
    """Six nodes, a and b bad in the first half, d bad in the second: the first half's pairs all
    fail (no healthy node yet), the second half's find e and f healthy; a, b and c are then each
    rerun beside e, which tells them apart."""
    bad = {"a", "b", "d"}
    found = find_bad_nodes(list("abcdef"), lambda nodes: SubsetResult(nodes, not bad & set(nodes), ""))
    assert sorted(found.bad) == ["a", "b", "d"] and not found.undecided and not found.note


GONE = "could not run: fabric-p5-allreduce-b2-0-abcde Pending: 0/4 nodes are available: 4 node(s) didn't match " \
       "Pod's node affinity/selector."


def test_a_rerun_that_could_not_run_names_no_node_bad():
    """The slow node is NODES[2]; NODES[3] is gone (spot reclaimed, auto-repair, the Capacity
    Block ended), so every rerun with it never starts. That is evidence of nothing: NODES[3] is
    "cannot tell", never named bad or isolated, and NODES[2] is still found beside healthy NODES[0]."""
    meta, logs = scenario("slow-node-p5-4node")
    report = evaluate(logs, "p5.48xlarge", 4, "nccl")
    recorded = recorded_reruns("slow-node-p5-4node", calls := [])
    echoed: list[str] = []

    def run_subset(key, nodes, suffix):
        if NODES[3] in nodes:
            calls.append((key, list(nodes), suffix))
            return GONE, f"# rlkit gate: pod x on node {NODES[3]}\n(no log: the pod never ran)\n"
        return recorded(key, nodes, suffix)

    findings = find_bad(report, logs, run_subset, {}, None, echoed.append)
    assert report.bad_nodes == {NODES[2]: "drags allreduce (bisection)"}
    f = {x.check: x for x in findings}
    assert f"bad node {NODES[3]}" not in f
    warn = f["bisection (allreduce)"]
    assert warn.status == WARN and warn.measured == f"cannot tell: {NODES[3]}"
    assert "could not run (its pods never started: a node gone or unschedulable)" in warn.detail
    step = f[f"bisection (allreduce) on {NODES[3]}, {NODES[0]}"]
    assert step.measured == "could not run" and step.detail == f"the allreduce job {GONE}"
    assert f"  could not run: the allreduce job {GONE}" in echoed


def test_bisection_counts_a_rerun_that_could_not_run_neither_for_nor_against():
    def measure(bad=(), gone=()):
        return lambda nodes: SubsetResult(nodes, None if set(gone) & set(nodes) else not set(bad) & set(nodes), "")

    # three suspects, c gone: a and b pass together, c never ran beside either
    found = find_bad_nodes(["a", "b", "c"], measure(gone="c"))
    assert found.bad == [] and found.undecided == ["c"]
    assert found.note == ("the rerun(s) on a, c and on b, c could not run (its pods never started: a node "
                          "gone or unschedulable): it counts neither for nor against them")
    # the gone node's half could not run: its other node is still told apart beside a healthy one
    found = find_bad_nodes(list("abcdef"), measure(bad="e", gone="d"))
    assert found.bad == ["e"] and found.undecided == ["d"]
    # a half that could not run is not "every half passes"
    found = find_bad_nodes(list("abcd"), measure(gone="d"))
    assert found.bad == [] and found.undecided == ["d"] and "no single node drags" not in found.note


def test_two_node_failure_says_why_it_cannot_bisect():
    meta, logs = scenario("degraded-p5-2node")
    report = evaluate(logs, "p5.48xlarge", 2, "nccl")
    (f,) = find_bad(report, logs, lambda *a: ("complete", ""), {}, None, lambda _: None)
    assert f.status == WARN and "cannot split two" in f.detail and "one more node" in f.fix


def test_transport_failures_and_counter_named_nodes_are_not_bisected():
    meta, logs = scenario("sockets-p5-2node")
    report = evaluate(logs, "p5.48xlarge", 2, "nccl")
    (f,) = find_bad(report, logs, None, {}, None, lambda _: None)
    assert f.check == "bisection" and "a transport problem fails every subset alike" in f.detail
    meta, logs = scenario("idle-nic-p5-2node")
    report = evaluate(logs, "p5.48xlarge", 2, "nccl")
    assert find_bad(report, logs, None, {}, None, lambda _: None) == []
    assert report.bad_nodes == {"ip-10-0-1-11.ec2.internal": "idle EFA device(s) rdmap29s0"}


def test_subset_job_runs_on_the_named_nodes_only_under_its_own_name():
    docs = [d for f in sorted((REPO_ROOT / "tests/golden/p5-2node/fabric/allreduce").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    service, job = subset_job(docs, "fabric-p5-allreduce", NODES[1:4], "b2")
    assert service["metadata"]["name"] == job["metadata"]["name"] == "fabric-p5-allreduce-b2"
    spec = job["spec"]
    assert spec["completions"] == spec["parallelism"] == 3
    pod = spec["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[command.index("--nnodes") + 1] == "3"
    assert command[command.index("--master-addr") + 1] == "fabric-p5-allreduce-b2-0.fabric-p5-allreduce-b2"
    assert pod["subdomain"] == "fabric-p5-allreduce-b2"
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": NODES[1:4]} in term["matchExpressions"]
    assert docs[1]["spec"]["completions"] == 2  # the rendered job is untouched


def test_an_ep_rerun_on_three_nodes_drops_what_cannot_spread_over_24_gpus():
    docs = [d for f in sorted((REPO_ROOT / "tests/golden/p5-2node/fabric/ep").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    _, job = subset_job(docs, "fabric-p5-ep", NODES[:3], "b1")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--acceptance" not in command  # 256 experts over 24 GPUs
    assert command[command.index("--span"):] == ["--span", "training:8:1", "--span", "rollout:8:1"]
    _, job = subset_job(docs, "fabric-p5-ep", NODES[:2], "b2")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "--acceptance"


def test_nodes_of_reads_the_pod_lines_in_pod_order():
    meta, logs = scenario("slow-node-p5-4node")
    assert nodes_of(logs["allreduce"], None) == NODES


def test_isolate_touches_only_this_environments_nodes_and_says_so_first(tmp_path, kubectl):
    nodes = {"items": [{"metadata": {"name": n}} for n in NODES]}
    kubectl.rule(["get", "nodes"], stdout=json.dumps(nodes))
    k = Kubectl()
    said = []
    done, findings = isolate(k, {NODES[2]: "drags allreduce", "ip-10-9-9-9.ec2.internal": "x"},
                             "rlkit.aws/node-group=p5", said.append)
    assert done == [NODES[2]]
    calls = [c for c in kubectl.calls if c[0] in ("cordon", "taint")]
    assert calls == [["cordon", NODES[2]], ["taint", "nodes", NODES[2], "rlkit/fabric=failed:NoSchedule",
                                               "--overwrite"]]
    assert said[0].startswith(f"Isolating {NODES[2]} (drags allreduce): kubectl cordon {NODES[2]}")
    f = {x.check: x for x in findings}
    assert f["isolate ip-10-9-9-9.ec2.internal"].status == FAIL
    assert "does not carry this environment's GPU node labels" in f["isolate ip-10-9-9-9.ec2.internal"].detail
    assert isolation_commands("n") == [["cordon", "n"], ["taint", "nodes", "n", "rlkit/fabric=failed:NoSchedule",
                                                         "--overwrite"]]


def test_after_isolation_the_gate_reruns_on_the_remaining_nodes():
    meta, logs = scenario("slow-node-p5-4node")
    report = evaluate(logs, "p5.48xlarge", 4, "nccl")
    calls: list = []

    def run_subset(key, nodes, suffix):
        calls.append((key, nodes, suffix))
        if key != "allreduce":
            return "failed", ""
        path = FIXTURES / "slow-node-p5-4node/bisect" / "+".join(sorted([NODES[0], NODES[3]])) / "allreduce.log"
        return "complete", path.read_text()

    findings = rerun_remaining(report, {"allreduce": logs["allreduce"]}, [NODES[1], NODES[2]], run_subset, {},
                               None, lambda _: None)
    assert calls == [("allreduce", [NODES[0], NODES[3]], "rest")]
    (f,) = findings
    assert f.status == PASS and f.check == "rerun (allreduce) without isolated nodes"


def test_the_baseline_is_the_median_of_recent_passing_runs(tmp_path):
    """Before: the best figure ever won, so one lucky run (or a software stack since replaced)
    set a bar that healthy nodes then missed in bisection, for good."""
    name = "all-reduce busbw @ 2 GiB (GB/s)"
    doc = state_document(judge("pass-p5-2node"), "a", "2026-11-01T00:00:00+00:00")
    assert update_baseline(tmp_path, doc) == baseline_file(tmp_path, "p5.48xlarge")
    assert load_baseline(tmp_path, "p5.48xlarge")["figures"][name] == 441.7

    def passing(value: float) -> None:
        run = state_document(judge("pass-nccl-net-ofi-p5-2node"), "b", "now")
        run["figures"][name] = value
        update_baseline(tmp_path, run)

    passing(420.0)
    assert load_baseline(tmp_path, "p5.48xlarge")["figures"][name] == (441.7 + 420.0) / 2
    passing(600.0)  # an outlier moves the median, not the bar to 600
    assert load_baseline(tmp_path, "p5.48xlarge")["figures"][name] == 441.7
    for _ in range(BASELINE_RUNS):
        passing(430.0)
    base = load_baseline(tmp_path, "p5.48xlarge")
    assert base["figures"][name] == 430.0 and base["recent"][name] == [430.0] * BASELINE_RUNS
    assert base["sources"][name].startswith(f"median of the last {BASELINE_RUNS} passing gate(s)")
    failed = state_document(judge("degraded-p5-2node"), "c", "now")
    assert update_baseline(tmp_path, failed) is None  # a failed run is no baseline
    assert load_baseline(tmp_path, "p5e.48xlarge")["figures"] == {}


def test_a_baseline_an_older_rlkit_wrote_counts_as_one_run(tmp_path):
    name = "all-reduce busbw @ 2 GiB (GB/s)"
    path = baseline_file(tmp_path, "p5.48xlarge")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"instance_type": "p5.48xlarge", "figures": {name: 480.0},
                                "sources": {}}))
    run = state_document(judge("pass-p5-2node"), "a", "now")
    update_baseline(tmp_path, run)
    assert load_baseline(tmp_path, "p5.48xlarge")["recent"][name] == [480.0, 441.7]


# --- through `rlkit gate` with a fake kubectl ----------------------------------------------------


def test_gate_isolate_cordons_the_node_the_counters_named(tmp_path, kubectl, capsys):
    from tests.support.fakes import run_gate, script_cluster

    script_cluster(kubectl, "idle-nic-p5-2node")
    assert run_gate(tmp_path, "--isolate") == 1
    out = capsys.readouterr().out
    node = "ip-10-0-1-11.ec2.internal"
    assert [c for c in kubectl.calls if c[0] in ("cordon", "taint")] == [
        ["cordon", node], ["taint", "nodes", node, "rlkit/fabric=failed:NoSchedule", "--overwrite"]]
    assert f"Isolating {node} (idle EFA device(s) rdmap29s0)" in out
    assert f"Bad node(s): {node} (idle EFA device(s) rdmap29s0, isolated)" in out
    # isolated, not replaced: the gate says so and prints the replacement, for the user to run
    assert ("--instance-id i-0000000000000000b --no-should-decrement-desired-capacity   # "
            f"{node}") in out
    state = json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())
    checks = {f["check"]: f for f in state["findings"]}
    assert checks[f"isolate {node}"]["status"] == "pass"
    assert "node auto-repair," not in checks[f"isolate {node}"]["detail"]
    assert checks[f"isolate {node}"]["detail"] == (
        "idle EFA device(s) rdmap29s0; new pods stay off it, but a cordon does not get it "
        "replaced (EKS node auto-repair acts on node conditions, not on cordons)")
    assert checks[f"isolate {node}"]["fix"] == (
        "replace instance i-0000000000000000b yourself: aws autoscaling "
        "terminate-instance-in-auto-scaling-group --region us-east-1 --instance-id "
        "i-0000000000000000b --no-should-decrement-desired-capacity (its node group launches a new "
        f"node); to undo the isolation instead: kubectl uncordon {node}; kubectl taint nodes {node} "
        "rlkit/fabric-")
    # one node left: too few for a two-node rerun, said so
    assert checks["rerun (allreduce) without isolated nodes"]["status"] == "warn"


def test_without_isolate_the_gate_only_prints_the_commands(tmp_path, kubectl, capsys):
    from tests.support.fakes import run_gate, script_cluster

    script_cluster(kubectl, "idle-nic-p5-2node")
    assert run_gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "Bad node(s): ip-10-0-1-11.ec2.internal (idle EFA device(s) rdmap29s0)" in out
    assert "kubectl taint nodes ip-10-0-1-11.ec2.internal rlkit/fabric=failed:NoSchedule --overwrite" in out
    assert not [c for c in kubectl.calls if c[0] in ("cordon", "taint")]
    # the replacement is the user's to run, with the instance ID from the node's providerID
    assert ("A cordon keeps new pods off a node but does not replace it: EKS node auto-repair acts "
            "on node conditions (Ready, AcceleratedHardwareReady, ...), not on cordons. To replace "
            "a bad node, terminate its instance and its node group launches a new one (yours to "
            "run; it ends whatever still runs there):") in out
    assert ("  aws autoscaling terminate-instance-in-auto-scaling-group --region us-east-1 "
            "--instance-id i-0000000000000000b --no-should-decrement-desired-capacity"
            "   # ip-10-0-1-11.ec2.internal") in out
    assert "i-0000000000000000a" not in out  # the healthy node's instance is never named
    assert not [c for c in kubectl.all_calls if "terminate" in " ".join(c)]


def test_run_subset_applies_waits_collects_and_deletes_the_rewritten_job(tmp_path, kubectl):
    from ops.gate.runner import GateRunner
    from tests.support.fakes import job_json, run_gate, script_cluster

    script_cluster(kubectl, "pass-p5-2node")
    assert run_gate(tmp_path) == 0  # renders tmp/out
    sub = "fabric-p5-allreduce-b1"
    kubectl.rule(["get", "job", sub], stdout=job_json(True))
    kubectl.rule(["get", "pods", f"job-name={sub}"], stdout=json.dumps({"items": [
        {"metadata": {"name": f"{sub}-0-xyz"}, "spec": {"nodeName": NODES[3]}, "status": {"phase": "Succeeded"}}]}))
    kubectl.rule(["logs", f"{sub}-0-xyz"], stdout="rows\n")
    runner = GateRunner(Kubectl(), "rl-training", tmp_path / "out",
                        [("allreduce", "fabric-p5-allreduce")], "p5.48xlarge", 2, 100, 0, lambda _: None,
                        sleep=lambda _: None)
    state, text = runner.run_subset("allreduce", [NODES[2], NODES[3]], "b1")
    assert state == "complete"
    assert text == f"# rlkit gate: pod {sub}-0-xyz on node {NODES[3]}\nrows\n"
    directory = tmp_path / "out/fabric-subsets/allreduce-b1"
    job = yaml.safe_load((directory / "01-job.yaml").read_text())
    assert job["metadata"]["name"] == sub and job["spec"]["completions"] == 2
    calls = [c for c in kubectl.calls if c[0] in ("apply", "delete") and str(directory) in c]
    assert [c[0] for c in calls] == ["delete", "apply", "delete"] and runner.applied == []


@pytest.mark.parametrize("cut_short, code", [
    (GateInterrupted("Interrupted: deleted fabric-p5-allreduce-b1."), 130),
    (KubectlError("kubectl get job fabric-p5-allreduce-b1", "the server is currently unable to "
                  "handle the request"), 2)])
def test_a_failed_gate_whose_bisection_is_cut_short_leaves_no_earlier_pass(
        tmp_path, kubectl, capsys, monkeypatch, cut_short, code):
    """Bisection can run subset jobs for hours; stopped part way, the FAIL it started from is
    what gate.json holds, not the PASS of an earlier gate that `rlkit launch` would trust."""
    from ops import gate_cmd
    from ops.launching import gate_verdict
    from tests.support.fakes import run_gate, script_cluster, write_state

    write_state(tmp_path, ok=True)  # last week's gate passed
    script_cluster(kubectl, "degraded-p5-2node")

    def find_bad(*_args, **_kwargs):
        raise cut_short

    monkeypatch.setattr(gate_cmd, "find_bad", find_bad)
    assert run_gate(tmp_path) == code
    path = tmp_path / ".rlkit/gt/gate.json"
    state = json.loads(path.read_text())
    assert state["ok"] is False and state["finished_at"] != "2026-03-01T12:00:00+00:00"
    assert (tmp_path / ".rlkit/gt/gate-logs/nodecheck.log").is_file()  # the logs it judged
    err = capsys.readouterr().err
    assert f"The gate FAILED (recorded in {path}); bisection stopped before naming a node." in err
    cfg = load_config(tmp_path / "gt.yaml")
    assert gate_verdict(state, cfg, path).startswith("the last fabric gate for 'gt' FAILED")

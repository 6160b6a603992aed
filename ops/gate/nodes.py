"""After a failed gate: name the bad node(s), print how to isolate them, and on request isolate them
and rerun the gate on the nodes that are left.

``find_bad`` bisects each benchmark (all-reduce, EP) whose bandwidth, time, traffic or job failed,
on the nodes it ran on (the runner's pod lines name them), with reruns through
``GateRunner.run_subset`` judged by ``ops.gate.bisect.subset_verdict`` against the published
figures and the instance type's baseline. ``isolate`` cordons and taints named nodes, but only
nodes that carry this environment's GPU node-group labels on the cluster ``rlkit gate`` already
checked is this environment's, saying what it will run before it runs it; ``rerun_remaining``
runs the benchmarks again on the other nodes. A cordon does not get a node replaced (EKS node
auto-repair acts on node conditions); ``replacement_advice`` gives the command that replaces its
instance, which the user runs (the kit never terminates an instance).
"""

from __future__ import annotations

import json
from typing import Callable

from infra import names
from infra.names import RAY_CLUSTER_LABEL

from ops.gate.bisect import find_bad_nodes, isolation_commands, subset_verdict
from ops.gate.findings import (FAIL, NOT_REPAIRED, PASS, RECORDED, REPLACE_COMMAND, WARN, Finding,
                               GateReport)
from ops.gate.record import instance_id, instance_ids
from ops.gate.traffic import pod_nodes
from ops.kube import Kubectl, KubectlError
from ops.launching import finished
from ops.scheduling import quantity

# Failed findings that a node can cause (bandwidth, time, traffic, a job that did not finish); a
# transport or driver failure is the whole fabric's, and bisecting it would only repeat it.
_ALLREDUCE_BOUND = ("all-reduce busbw", "all-reduce bandwidth", "allreduce job", "EFA traffic (allreduce)")


def _failed_benchmarks(report: GateReport) -> list[str]:
    keys = []
    for f in report.findings:
        if f.status != FAIL:
            continue
        if f.check.startswith(_ALLREDUCE_BOUND):
            keys.append("allreduce")
        elif f.check.startswith("ep job") or (f.check.startswith("EP ") and f.check.endswith(" RDMA")) \
                or f.check.startswith("EFA traffic (ep)"):
            keys.append("ep")
    return list(dict.fromkeys(keys))


def nodes_of(log: str, nodes_json: str | None) -> list[str]:
    """The nodes a job ran on, in pod order; else the node group's nodes."""
    found = [n for _, n in sorted(pod_nodes(log).items()) if n != "unscheduled"]
    if found:
        return list(dict.fromkeys(found))
    try:
        items = json.loads(nodes_json or "{}").get("items", [])
    except json.JSONDecodeError:
        items = []
    return [i["metadata"]["name"] for i in items if i.get("metadata", {}).get("name")]


def replace_command(instance: str, region: str | None = None) -> str:
    """The command that replaces a node's instance (the user runs it; the kit never does)."""
    return REPLACE_COMMAND.format(region=f" --region {region}" if region else "", instance=instance)


def _replace_its_instance(node: str, instance: str | None, region: str | None) -> str:
    if instance:
        return f"replace instance {instance} yourself: {replace_command(instance, region)}"
    return (f"replace its instance yourself: {replace_command('<instance ID>', region)} (the ID "
            f"ends its providerID: kubectl get node {node} -o jsonpath='{{.spec.providerID}}')")


def find_bad(report: GateReport, logs: dict[str, str], run_subset: Callable[[str, list[str], str], tuple[str, str]],
             baseline: dict[str, float], gin_type: str | None,
             echo: Callable[[str], None], region: str | None = None) -> list[Finding]:
    """Bisect every node-bound failure; findings name the bad nodes (added to report.bad_nodes)."""
    findings: list[Finding] = []
    transport = [f.check for f in report.findings if f.status == FAIL and f.check.removeprefix("EP ") in
                 ("NCCL OFI plugin", "NCCL network", "NVSHMEM transport", "NCCL GIN type")]
    if transport:  # the whole fabric's: every subset would fail the same way
        return [Finding("bisection", WARN, "not run", "-", f"{', '.join(transport)} failed: a transport "
                        "problem fails every subset alike, so bisecting cannot name a node", "fix the "
                        "transport first (its fix is above), then run `rlkit gate` again")]
    if report.bad_nodes:  # the EFA counters already named them
        return []
    counter = iter(range(1, 1000))
    for key in _failed_benchmarks(report):
        nodes = nodes_of(logs.get(key, ""), logs.get("nodes"))
        if len(nodes) < 3:
            if not report.bad_nodes:
                findings.append(Finding(
                    f"bisection ({key})", WARN, f"{len(nodes)} node(s)", ">= 3 nodes",
                    f"the {key} benchmark failed on {', '.join(nodes) or 'its nodes'}; a benchmark that "
                    "needs two nodes cannot split two, and no node is known healthy",
                    "rerun with one more node in the node group (then the gate pairs each with it), "
                    "or compare the two nodes' EFA counters and nodecheck results above"))
            continue

        def measure(subset: list[str], key: str = key):
            suffix = f"b{next(counter)}"
            echo(f"Bisecting {key}: rerunning on {', '.join(subset)} ({suffix})")
            state, text = run_subset(key, subset, suffix)
            result = subset_verdict(key, text, report.instance_type, subset, report.ep_backend, gin_type,
                                    baseline, state)
            echo(f"  {_verdict(result.ok)}: {result.summary}")
            return result

        found = find_bad_nodes(nodes, measure)
        for step in found.steps:
            findings.append(Finding(f"bisection ({key}) on {', '.join(step.nodes)}",
                                    PASS if step.ok else RECORDED, _verdict(step.ok).lower(),
                                    "pass", step.summary))
        for node in found.bad:
            failing = [s for s in found.steps if node in s.nodes and s.ok is False]
            report.bad_nodes.setdefault(node, f"drags {key} (bisection)")
            findings.append(Finding(
                f"bad node {node}", FAIL, f"drags {key}", "passes with any healthy node",
                f"bisection of the {key} benchmark over {len(nodes)} nodes: every rerun with {node} "
                f"failed ({'; '.join(s.summary for s in failing[-2:])}), one of them beside nodes "
                "that passed elsewhere",
                "isolate it: " + "; ".join("kubectl " + " ".join(c) for c in isolation_commands(node))
                + " (or rlkit gate --isolate), which keeps new pods off it; a cordon does not get "
                f"it replaced ({NOT_REPAIRED}): "
                + _replace_its_instance(node, instance_ids(logs.get("nodes")).get(node), region)
                + "; then run `rlkit gate` again"))
        if found.undecided or found.note:
            detail = found.note or "the reruns could not tell these apart"
            if found.undecided:  # not proven bad: not named, not isolated
                detail += "; none of them is named bad or isolated"
            findings.append(Finding(f"bisection ({key})", WARN,
                                    f"cannot tell: {', '.join(found.undecided)}" if found.undecided
                                    else "-", "a named node", detail,
                                    "compare their EFA counters and nodecheck results; add a node "
                                    "and run `rlkit gate` again"))
    return findings


# kubectl's answer when the RayJob CRD is not installed (no KubeRay yet): then no RayJob runs.
_NO_RESOURCE_TYPE = "the server doesn't have a resource type"


def _gpus(pod: dict) -> float:
    """The GPUs a pod holds on its node: the largest of its containers' requests or limits of
    nvidia.com/gpu (an extended resource's request equals its limit)."""
    held = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            value = (res.get(part) or {}).get(names.GPU_RESOURCE)
            if value is not None:
                try:
                    held = max(held, float(quantity(str(value))))
                except ValueError:
                    held = max(held, 1.0)  # unreadable, but it asks for GPUs
    return held


def gpu_holders(kubectl: Kubectl, namespace: str, selector: str,
                own: Callable[[str, dict[str, str]], bool]) -> tuple[list[str], list[str]]:
    """What holds, or waits for, this node group's GPUs before a gate runs: (descriptions, the
    commands that would free them, for the user to choose). Each RayJob in the kit's
    ``namespace`` that KubeRay is not done with (``ops.launching.finished``), and each pod that
    is not done and asks for GPUs on a node matching ``selector`` (any namespace; a pod ``own``
    says is the gate's, from this run's or an earlier run's fabric jobs, is left out: the gate
    deletes those before it applies its own; the pods of a listed RayJob's Ray cluster are not
    named twice). Three reads: rayjobs,
    nodes, pods."""
    found: list[str] = []
    fixes: list[str] = []
    try:
        rayjobs = kubectl.get_json(["rayjobs", "-n", namespace]) or {}
    except KubectlError as err:
        if _NO_RESOURCE_TYPE not in err.message:
            raise
        rayjobs = {}
    clusters = set()
    for rj in rayjobs.get("items") or []:
        if finished(rj):
            continue
        name = (rj.get("metadata") or {}).get("name", "?")
        st = rj.get("status") or {}
        if st.get("rayClusterName"):
            clusters.add(st["rayClusterName"])
        found.append(f"RayJob {name} in {namespace} (jobDeploymentStatus "
                     f"{st.get('jobDeploymentStatus') or '-'}, jobStatus {st.get('jobStatus') or '-'})")
        fixes.append(f"kubectl delete rayjob {name} -n {namespace}")
    ours = environment_nodes(kubectl, selector)
    if ours:
        pods = kubectl.get_json(["pods", "-A", "--field-selector",
                                 "status.phase!=Succeeded,status.phase!=Failed"]) or {}
        for pod in pods.get("items") or []:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            gpus = _gpus(pod)
            if node not in ours or not gpus or labels.get(RAY_CLUSTER_LABEL) in clusters:
                continue
            if own(meta.get("namespace", ""), labels):
                continue
            owner = next(iter(meta.get("ownerReferences") or []), None)
            pns = meta.get("namespace", "?")
            found.append(f"pod {pns}/{meta.get('name', '?')} on {node} ({gpus:g} GPU(s)"
                         + (f", owned by {owner.get('kind')} {owner.get('name')})" if owner else ")"))
            fixes.append(f"kubectl delete {owner.get('kind', '').lower()} {owner.get('name')} -n {pns}"
                         if owner else f"kubectl delete pod {meta.get('name', '?')} -n {pns}")
    return found, list(dict.fromkeys(fixes))


def _environment_items(kubectl: Kubectl, selector: str) -> list[dict]:
    return (kubectl.get_json(["nodes", "-l", selector]) or {}).get("items", [])


def environment_nodes(kubectl: Kubectl, selector: str) -> set[str]:
    return {i["metadata"]["name"] for i in _environment_items(kubectl, selector)}


def isolate(kubectl: Kubectl, bad: dict[str, str], selector: str,
            echo: Callable[[str], None], region: str | None = None) -> tuple[list[str], list[Finding]]:
    """Cordon and taint each bad node of this environment; (isolated nodes, findings). It does
    not replace them: each finding gives the command that does, for the user to run."""
    items = _environment_items(kubectl, selector)
    ours = {i["metadata"]["name"] for i in items}
    instances = {i["metadata"]["name"]: instance_id(i) for i in items}
    done, findings = [], []
    for node, why in bad.items():
        if node not in ours:
            findings.append(Finding(f"isolate {node}", FAIL, "not isolated", "cordoned and tainted",
                                    f"{node} does not carry this environment's GPU node labels "
                                    f"({selector}), so the gate does not touch it",
                                    "isolate it by hand if it is yours"))
            continue
        commands = isolation_commands(node)
        echo(f"Isolating {node} ({why}): " + "; ".join(kubectl.command(c) for c in commands))
        for c in commands:
            kubectl.run(c)
        done.append(node)
        findings.append(Finding(f"isolate {node}", PASS, "cordoned and tainted", "cordoned and tainted",
                                f"{why}; new pods stay off it, but a cordon does not get it replaced "
                                "(EKS node auto-repair acts on node conditions, not on cordons)",
                                _replace_its_instance(node, instances.get(node), region)
                                + " (its node group launches a new node); to undo the isolation "
                                f"instead: kubectl uncordon {node}; kubectl taint nodes {node} "
                                "rlkit/fabric-"))
    return done, findings


def rerun_remaining(report: GateReport, logs: dict[str, str], isolated: list[str],
                    run_subset: Callable[[str, list[str], str], tuple[str, str]],
                    baseline: dict[str, float], gin_type: str | None,
                    echo: Callable[[str], None]) -> list[Finding]:
    """The benchmarks again on the nodes that are left (at least two)."""
    findings = []
    for key in ("allreduce", "ep"):
        if key not in logs:
            continue
        left = [n for n in nodes_of(logs[key], logs.get("nodes")) if n not in isolated]
        if len(left) < 2:
            findings.append(Finding(f"rerun ({key}) without isolated nodes", WARN, f"{len(left)} node(s) left",
                                    ">= 2 nodes", "too few nodes left to rerun a two-node benchmark",
                                    "wait for the replacements, then run `rlkit gate` again"))
            continue
        echo(f"Rerunning {key} on the {len(left)} remaining node(s): {', '.join(left)}")
        state, text = run_subset(key, left, "rest")
        result = subset_verdict(key, text, report.instance_type, left, report.ep_backend, gin_type,
                                baseline, state)
        if result.ok is None:  # its pods never ran: says nothing about the remaining nodes
            findings.append(Finding(f"rerun ({key}) without isolated nodes", WARN, "could not run",
                                    "pass", f"on {', '.join(left)}: {result.summary}",
                                    "run `rlkit gate` again once the nodes are back"))
            continue
        findings.append(Finding(f"rerun ({key}) without isolated nodes", PASS if result.ok else FAIL,
                                "pass" if result.ok else "fail", "pass",
                                f"on {', '.join(left)}: {result.summary}",
                                "" if result.ok else "the fault is not (only) in the isolated nodes: "
                                "read the findings above"))
    return findings


def _verdict(ok: bool | None) -> str:
    return "could not run" if ok is None else "pass" if ok else "FAIL"


def isolation_advice(report: GateReport, done: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The commands to print for each named node not isolated already."""
    return ["kubectl " + " ".join(c) for node in report.bad_nodes if node not in done
            for c in isolation_commands(node)]


REPLACEMENT_NOTE = (f"A cordon keeps new pods off a node but does not replace it: {NOT_REPAIRED}. "
                    "To replace a bad node, terminate its instance and its node group launches a "
                    "new one (yours to run; it ends whatever still runs there):")


def replacement_advice(report: GateReport, nodes_json: str | None,
                       region: str | None = None) -> list[str]:
    """For each named node, the command that replaces its instance (``instance_ids`` of the node
    list the gate read), or how to find the ID when that list does not have it."""
    ids = instance_ids(nodes_json)
    return [f"{replace_command(ids[node], region)}   # {node}" if node in ids else
            f"# {node}: instance ID not in the node list the gate read; it ends the node's "
            f"providerID (kubectl get node {node} -o jsonpath='{{.spec.providerID}}')"
            for node in report.bad_nodes]


"""Finding the bad node: split the nodes of a failed or slow benchmark and rerun it on the parts.

A fabric benchmark over N nodes runs at the pace of its slowest node; the number says that
something is wrong, not where. ``find_bad_nodes`` reruns the benchmark on halves of the nodes
(each half at least two nodes, so that it still crosses EFA), recurses into the halves that fail,
and ends with pairs: a suspect paired with a node already seen healthy. A node is named only when
a rerun proves it bad (it failed beside nodes proven healthy); what the reruns cannot tell apart is
reported as undecided, never named or isolated; so is a node whose rerun could not run at all (its
pods never started: the node gone, unschedulable), which counts neither for nor against any node. Each subset's figure is judged against the published figure where one applies and
against the per-instance-type baseline that earlier passing gates recorded
(``ops.gate.record.load_baseline``; ``rlkit gate --compare`` shows it), whichever is known.

``subset_job`` rewrites one rendered fabric job for a subset: its own name (so the rerun never
collides with the full job), the node count, and a node affinity that pins it to those nodes.
``isolation_commands`` are the cordon and taint commands for a named node. No kubectl here: the
runner applies what this module writes, the measure function is injected (recorded logs test it).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from infra.catalog import INSTANCE_TYPES, acceptance
from infra.names import HOSTNAME_LABEL
from manifests.fabric import EP_ACCEPTANCE_EXPERTS
from ops.gate.findings import FAIL
from ops.gate.judges import judge_allreduce, judge_ep
from ops.gate.record import figure_name
from ops.gate.traffic import judge_efa_traffic

# The state of a rerun whose pods never ran (a node gone: spot, auto-repair, the end of a Capacity
# Block; or unschedulable): it proves nothing about its nodes, for or against.
NOT_STARTED = "could not run"
TAINT = "rlkit/fabric=failed:NoSchedule"


@dataclass
class SubsetResult:
    """One rerun on a subset of the nodes."""

    nodes: list[str]
    ok: bool | None  # None: the rerun could not run (NOT_STARTED), evidence of nothing
    summary: str  # the figure and the bar it was held to, or why it failed or could not run


@dataclass
class Bisection:
    """What the search ran and what it found."""

    steps: list[SubsetResult] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)  # suspects no rerun could tell apart
    note: str = ""


def halves(nodes: list[str]) -> tuple[list[str], list[str]]:
    mid = len(nodes) // 2
    return nodes[:mid], nodes[mid:]


def find_bad_nodes(nodes: list[str], measure: Callable[[list[str]], SubsetResult],
                   max_runs: int = 16) -> Bisection:
    """Name the node(s) that drag a benchmark on ``nodes`` down, rerunning ``measure`` on parts.

    Halves while a half keeps at least two nodes; then each suspect with a known-good node. The
    rule: a node that passes in any rerun is healthy, and a node is named ``bad`` only when a rerun
    of it beside nodes proven healthy fails; a node nothing proves bad is never named (it goes to
    ``undecided``, which the gate reports and never isolates). Two nodes and no healthy one known
    cannot be told apart by a benchmark that needs two nodes; three suspects with no healthy node
    run their three pairs, and when every pair fails (at least two bad, which ones unknown) all
    three are ``undecided``. Suspects left undecided before a healthy node was found elsewhere
    are each rerun beside it at the end. Both halves passing means no single node drags the whole
    down (the placement, the AZ or the rail layout between the halves): ``note`` says so.
    A rerun that could not run (``ok`` None: its pods never started) is evidence of nothing: its
    nodes are neither healthy nor failing; they stay ``undecided`` unless another rerun decides.
    """
    out = Bisection()
    good: list[str] = []  # nodes proven healthy: each passed in a rerun
    ambiguous: list[list[str]] = []  # three suspects whose every pair failed

    def run(subset: list[str]) -> SubsetResult:
        result = measure(subset)
        out.steps.append(result)
        return result

    def say(text: str) -> None:
        out.note = f"{out.note}; {text}" if out.note else text

    def stopped(suspects: list[str]) -> bool:
        if len(out.steps) < max_runs:
            return False
        out.undecided += [s for s in suspects if s not in out.undecided]
        if f"stopped after {max_runs} reruns" not in out.note:
            say(f"stopped after {max_runs} reruns")
        return True

    def could_not_run(nodes: list[str]) -> None:
        out.undecided += [n for n in nodes if n not in out.undecided and n not in good]
        say(f"the rerun on {', '.join(nodes)} could not run (its pods never started: a node gone "
            "or unschedulable): it counts neither for nor against them")

    def search(suspects: list[str]) -> None:
        if stopped(suspects):
            return
        if len(suspects) >= 4:
            failing, unrun = [], []
            for half in halves(suspects):
                ok = run(half).ok
                if ok:
                    good.extend(half)
                elif ok is None:
                    unrun.append(half)
                else:
                    failing.append(half)
            for half in unrun:
                could_not_run(half)
            if not failing and not unrun:
                say("every half passes on its own: no single node drags the benchmark; "
                    "look at what joins the halves (placement group, AZ, rails)")
            for half in failing:
                search(half)
            return
        if good:  # a failure beside a node proven healthy proves the suspect bad
            partner = good[0]
            for suspect in suspects:
                ok = run([suspect, partner]).ok
                if ok:
                    good.append(suspect)
                elif ok is None:
                    could_not_run([suspect])
                else:
                    out.bad.append(suspect)
            return
        if len(suspects) == 3:  # no healthy partner yet: the pairs among them
            pairs = {p: run(list(p)).ok for p in itertools.combinations(suspects, 2)}
            healthy = {n for p, ok in pairs.items() if ok for n in p}
            good.extend(n for n in suspects if n in healthy)
            for node in suspects:
                if node in healthy:
                    continue
                # bad only when it failed beside a node that passed in another pair
                if any(ok is False and node in p and set(p) - {node} <= healthy
                       for p, ok in pairs.items()):
                    out.bad.append(node)
                else:
                    out.undecided.append(node)
            if not healthy and all(ok is False for ok in pairs.values()):
                ambiguous.append(suspects)  # said at the end, unless a healthy node tells them apart
            unrun = [", ".join(p) for p, ok in pairs.items() if ok is None]
            if unrun:
                say(f"the rerun(s) on {' and on '.join(unrun)} could not run (its pods never "
                    "started: a node gone or unschedulable): it counts neither for nor against them")
            contradicted = [p for p, ok in pairs.items() if ok is False and set(p) <= healthy]
            if contradicted:
                say(f"the pair {', '.join(contradicted[0])} failed although both passed in other "
                    "pairs: the failure does not repeat reliably")
            return
        out.undecided += suspects

    search(list(nodes))
    # Suspects left undecided before any node was proven healthy: now one is, pair each with it.
    for suspect in list(out.undecided):
        if not good or stopped([]):
            break
        ok = run([suspect, good[0]]).ok
        if ok is None:  # could not run again: stays undecided
            continue
        out.undecided.remove(suspect)
        if ok:
            good.append(suspect)
        else:
            out.bad.append(suspect)
    for trio in ambiguous:
        if set(trio) & set(out.undecided):
            say(f"every pair among {', '.join(trio)} failed: at least two of them are bad, but "
                "with no node proven healthy the reruns cannot tell which (or whether all three are)")
    if not out.bad and not out.undecided and not out.note:
        out.note = "no subset failed: the failure did not repeat"
    return out


def subset_job(documents: list[dict[str, Any]], name: str, nodes: list[str],
               suffix: str) -> list[dict[str, Any]]:
    """The rendered Service + Job of one fabric benchmark, rewritten to run on ``nodes`` only,
    as ``<name>-<suffix>`` (every occurrence of the job's name: Service, subdomain, labels and
    torchrun's --master-addr)."""
    new_name = f"{name}-{suffix}"

    def rename(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(name, new_name)
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    out = []
    for doc in documents:
        doc = rename(copy.deepcopy(doc))
        if doc.get("kind") == "Job":
            spec = doc["spec"]
            spec["completions"] = spec["parallelism"] = len(nodes)
            pod = spec["template"]["spec"]
            for container in pod["containers"]:
                command = container.get("command") or []
                if "--nnodes" in command:
                    command[command.index("--nnodes") + 1] = str(len(nodes))
                    container["command"] = _fit_ep(command, len(nodes))
            terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"]
            for term in terms:
                term.setdefault("matchExpressions", []).append(
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": list(nodes)})
        out.append(doc)
    return out


def _fit_ep(command: list[str], nodes: int) -> list[str]:
    """An EP benchmark on fewer nodes: drop what cannot run on that many GPUs (an EP group that
    does not divide them, DeepEP's published 256 experts that do not spread evenly); the rerun
    then measures what it can, the same way on every subset."""
    if "--nproc-per-node" not in command:
        return command
    world = nodes * int(command[command.index("--nproc-per-node") + 1])
    out: list[str] = []
    skip = False
    for i, arg in enumerate(command):
        if skip:
            skip = False
            continue
        if arg == "--span" and i + 1 < len(command):
            parts = command[i + 1].split(":")
            size, stride = int(parts[1]), int(parts[2]) if len(parts) > 2 else 1
            if world % (size * stride):
                skip = True
                continue
        if arg == "--acceptance" and EP_ACCEPTANCE_EXPERTS % world:
            continue
        out.append(arg)
    return out


def isolation_commands(node: str) -> list[list[str]]:
    """kubectl argv that keep new pods off a bad node until it is replaced: cordon, then a taint
    (terminating its instance gets the node group to replace it; a cordon alone does not)."""
    return [["cordon", node], ["taint", "nodes", node, TAINT, "--overwrite"]]


# --- judging one rerun ---------------------------------------------------------------------------


def subset_verdict(key: str, text: str, instance_type: str, nodes: list[str], ep_backend: str,
                   gin_type: str | None, baseline: dict[str, float], state: str = "complete") -> SubsetResult:
    """Did the benchmark ``key`` pass on ``nodes``: no failed finding (published figures, the
    transport, the EFA counters) and no figure below ``pass_fraction`` of the baseline. A
    ``state`` starting NOT_STARTED (its pods never ran) decides nothing: ``ok`` is None."""
    itype = INSTANCE_TYPES[instance_type]
    n = len(nodes)
    if state.startswith(NOT_STARTED):
        return SubsetResult(nodes, None, f"the {key} job {state}")
    if state != "complete":
        return SubsetResult(nodes, False, f"the {key} job {state}")
    if key == "allreduce":
        findings, by_size = judge_allreduce(text, instance_type, n, n * itype.gpu_count)
        figures = {figure_name(size): v for size, v in by_size.items()}
    else:
        findings, ep = judge_ep(text, instance_type, n, n * itype.gpu_count, ep_backend, gin_type)
        figures = {}
    findings += judge_efa_traffic(text, key, n, itype.efa_devices)[0]
    failed = [f for f in findings if f.status == FAIL]
    if failed:
        return SubsetResult(nodes, False, "; ".join(f"{f.check}: {f.measured} (expected {f.expected})"
                                                    for f in failed[:3]))
    for name, value in sorted(figures.items()):
        base = baseline.get(name)
        if base and value < base * acceptance.DEFAULT_PASS_FRACTION:
            return SubsetResult(nodes, False, f"{name} {value:.1f}, below "
                                f"{acceptance.DEFAULT_PASS_FRACTION:.0%} of the baseline {base:.1f}")
    best = max(figures.items(), key=lambda kv: kv[1], default=None)
    return SubsetResult(nodes, True, f"{best[0]} {best[1]:.1f}" if best else "passed")

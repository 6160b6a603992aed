"""Fabric gate: judge the acceptance jobs' output against published figures.

Input is the text of each job's pod logs (stdout and stderr mixed, as ``kubectl logs`` returns
them): the JSON lines that ``rltrainer nodecheck`` and ``rltrainer bench allreduce|ep`` print
(formats in images/trainer/README.md) plus whatever NCCL logged. Output is a list of findings,
each pass, warn or fail with the measured and expected figure and, for anything that is not a
pass, what to do. Thresholds live in ``infra.acceptance``. No kubectl or AWS here: ``gate_cmd``
collects the logs, this module only reads them, so recorded logs test it.

What it catches:

- nodecheck failures, missing EFA devices above all (a pod that sees fewer EFA devices than the
  instance has runs on fewer rails or on TCP);
- NCCL fallen back to TCP sockets: NCCL's own log line (``NET/Socket``, ``Using network Socket``)
  or an all-reduce bandwidth far below anything EFA delivers;
- a degraded fabric: all-reduce or expert-parallel throughput below the published figure;
- instance types, node counts or backends without a published figure: a warning saying the
  numbers were recorded only, never a silent pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from infra import acceptance
from infra.catalog import INSTANCE_TYPES

PASS, WARN, FAIL = "pass", "warn", "fail"

JOB_KEYS = ("nodecheck", "allreduce", "ep")

# NCCL INFO lines that name the network NCCL picked (visible with NCCL_DEBUG=INFO).
SOCKET_MARKERS = ("NET/Socket", "Using network Socket")
OFI_MARKERS = ("NET/OFI", "Using network AWS Libfabric", "Using network Libfabric")

SOCKET_FIX = ("make NCCL load aws-ofi-nccl: NCCL_NET_PLUGIN=ofi and FI_PROVIDER=efa in the pod, "
              "the plugin in the image (nodecheck's nccl_ofi_plugin check), and the node's full "
              "vpc.amazonaws.com/efa count requested; then run `rlkit gate` again")
DEGRADED_FIX = ("run `rlkit gate` again to rule out a noisy neighbour; if it repeats, check that "
                "both nodes are in one cluster placement group and one AZ, that every pod got all "
                "EFA devices (nodecheck), and the EFA driver/installer versions; replace a node "
                "that keeps failing (kubectl drain, then let the node group replace it)")


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # pass | warn | fail
    measured: str = ""
    expected: str = ""
    detail: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class EpMeasurement:
    backend: str  # config name: nccl | deepep-nvshmem | deepep-gin
    dispatch_GBps: float
    combine_GBps: float
    time_us: float  # dispatch + combine
    shape: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateReport:
    instance_type: str
    nodes: int
    ep_backend: str
    findings: list[Finding] = field(default_factory=list)
    ep: EpMeasurement | None = None

    @property
    def ok(self) -> bool:
        return not any(f.status == FAIL for f in self.findings)

    def add(self, *findings: Finding) -> None:
        self.findings.extend(findings)


def parse_rows(text: str) -> list[dict[str, Any]]:
    """Every JSON object with a ``kind`` in a log; other lines (tables, NCCL INFO) are skipped."""
    rows = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            obj = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "kind" in obj:
            rows.append(obj)
    return rows


def nccl_transport(text: str) -> str | None:
    """"socket" or "ofi" from NCCL's INFO lines, None when NCCL did not log its network."""
    if any(m in text for m in SOCKET_MARKERS):
        return "socket"
    if any(m in text for m in OFI_MARKERS):
        return "ofi"
    return None


def _gb(value: float) -> str:
    return f"{value:.1f} GB/s"


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} B"


# --- node check ----------------------------------------------------------------------------------


def judge_nodecheck(text: str, nodes: int, efa_expected: int) -> list[Finding]:
    rows = [r for r in parse_rows(text) if r.get("kind") == "nodecheck"]
    if not rows:
        return [Finding("nodecheck", FAIL, "no result", f"{nodes} node reports",
                        "the node check printed no JSON result (image without rltrainer, or the "
                        "pod never started)",
                        "look at the pod events: kubectl describe pods -n <namespace> -l "
                        "job-name=<nodecheck job>")]
    findings = []
    if len(rows) < nodes:
        findings.append(Finding("nodecheck", FAIL, f"{len(rows)} node report(s)",
                                f"{nodes}", "not every node reported",
                                "check the pods that did not finish (kubectl get pods)"))
    for i, row in enumerate(rows):
        for c in row.get("checks", []):
            if c.get("ok"):
                continue
            name = c.get("name", "?")
            if name == "efa_devices":
                findings.append(Finding(
                    f"node {i}: EFA devices", FAIL, str(c.get("found")), str(c.get("expected")),
                    f"missing EFA devices: the pod sees {c.get('found')} of {efa_expected}; NCCL "
                    "runs on fewer rails or falls back to TCP sockets",
                    c.get("fix") or "check the EFA device plugin and the pod's "
                    "vpc.amazonaws.com/efa request"))
            else:
                findings.append(Finding(f"node {i}: {name}", FAIL, str(c.get("found")),
                                        str(c.get("expected")), f"node check {name} failed",
                                        c.get("fix", "")))
    if not findings:
        findings.append(Finding("nodecheck", PASS, f"{len(rows)} node(s) ok", f"{nodes}",
                                "GPUs, EFA devices, GDRCopy, huge pages, memlock, shm, "
                                "aws-ofi-nccl"))
    return findings


# --- all-reduce ----------------------------------------------------------------------------------


def judge_allreduce(text: str, instance_type: str, nodes: int, world: int) -> list[Finding]:
    rows = [r for r in parse_rows(text) if r.get("kind") == "allreduce"]
    if not rows:
        return [Finding("all-reduce", FAIL, "no result", "busbw rows",
                        "the all-reduce benchmark printed no JSON rows (it failed or timed out)",
                        "read the job's logs (rlkit keeps them next to gate.json) for the error")]
    findings: list[Finding] = []
    if rows[0].get("world_size") != world:
        findings.append(Finding("all-reduce ranks", FAIL, str(rows[0].get("world_size")),
                                str(world), "the benchmark did not span every GPU of every node",
                                "check the Job's completions and the torchrun --nnodes value"))
    if rows[0].get("backend") != "nccl":
        findings.append(Finding("all-reduce backend", FAIL, str(rows[0].get("backend")), "nccl",
                                "the benchmark ran without NCCL (on CPU)",
                                "the pods need GPUs: check the nvidia.com/gpu request"))
    by_size = {int(r["size_bytes"]): float(r["busbw_GBps"]) for r in rows}
    peak_size = max(by_size, key=lambda s: (by_size[s], s))
    peak = by_size[peak_size]

    # Transport first: a socket fallback explains every threshold miss below.
    transport = nccl_transport(text)
    itype = INSTANCE_TYPES.get(instance_type)
    suspect = acceptance.socket_suspect_GBps(instance_type, itype.efa_bandwidth_gbps if itype else 0)
    if transport == "socket":
        findings.append(Finding("NCCL transport", FAIL, "TCP sockets", "EFA (aws-ofi-nccl)",
                                "NCCL fell back to sockets: its log says NET/Socket", SOCKET_FIX))
    elif peak < suspect:
        findings.append(Finding("NCCL transport", FAIL, f"peak {_gb(peak)}",
                                f">= {_gb(suspect)} on EFA",
                                "bandwidth far below EFA: NCCL most likely fell back to TCP "
                                "sockets", SOCKET_FIX))
    else:
        how = ("NCCL's log names the OFI plugin" if transport == "ofi"
               else "bandwidth is in EFA's range (set NCCL_DEBUG=INFO to see NCCL's network line)")
        findings.append(Finding("NCCL transport", PASS, "EFA", "EFA", how))

    refs = acceptance.allreduce_references(instance_type, nodes)
    if not refs:
        findings.append(Finding(
            "all-reduce busbw", WARN, f"peak {_gb(peak)} at {_size(peak_size)}", "-",
            f"no published threshold for {instance_type}: recorded only",
            "compare with earlier gate runs on this instance type (gate.json keeps the figures)"))
        return findings
    for ref in refs:
        check = f"all-reduce busbw @ {_size(ref.size_bytes)}"
        expected = (f">= {_gb(ref.required_GBps)} ({ref.pass_fraction:.0%} of "
                    f"{ref.published_GBps:g} published)")
        if ref.size_bytes not in by_size:
            findings.append(Finding(check, WARN, "not measured", expected,
                                    f"the run did not include {_size(ref.size_bytes)}",
                                    f"run the all-reduce benchmark up to at least "
                                    f"{_size(ref.size_bytes)} (--max-bytes)"))
            continue
        got = by_size[ref.size_bytes]
        if got >= ref.required_GBps:
            findings.append(Finding(check, PASS, _gb(got), expected, ref.source))
        else:
            findings.append(Finding(check, FAIL if ref.strict else WARN, _gb(got), expected,
                                    f"degraded fabric: {got / ref.published_GBps:.0%} of the "
                                    f"published figure ({ref.source})", DEGRADED_FIX))
    return findings


# --- expert parallel -----------------------------------------------------------------------------


def _ep_backend(row_backend: str, configured: str) -> str:
    """Bench rows say nccl/gloo/deepep; the config names which DeepEP build ran."""
    if row_backend == "deepep":
        return configured if configured.startswith("deepep") else "deepep-nvshmem"
    return row_backend


def judge_ep(text: str, instance_type: str, nodes: int, world: int,
             configured_backend: str) -> tuple[list[Finding], EpMeasurement | None]:
    rows = [r for r in parse_rows(text) if r.get("kind") == "ep"]
    if not rows:
        return [Finding("expert parallel", FAIL, "no result", "dispatch/combine rows",
                        "the EP benchmark printed no JSON rows (it failed or timed out)",
                        "read the job's logs for the error; `--backend deepep` needs an image "
                        "built with a DeepEP backend")], None
    findings: list[Finding] = []
    backend = _ep_backend(str(rows[0].get("backend")), configured_backend)
    if backend == "gloo":
        return [Finding("expert parallel backend", FAIL, "gloo", "nccl or deepep",
                        "the EP benchmark ran on CPU", "the pods need GPUs")], None
    if rows[0].get("world_size") != world:
        findings.append(Finding("expert parallel ranks", FAIL, str(rows[0].get("world_size")),
                                str(world), "the benchmark did not span every GPU",
                                "check the Job's completions and torchrun --nnodes"))
    if not all(r.get("correct") for r in rows):
        findings.append(Finding("expert parallel results", FAIL, "wrong", "correct",
                                f"{backend} dispatch/combine returned wrong tokens; its timings "
                                "mean nothing",
                                "do not train on this fabric: check the DeepEP/NVSHMEM build "
                                "and the EFA installer version in the image"))
        return findings, None
    by_dir = {r["direction"]: r for r in rows}
    if not {"dispatch", "combine"} <= set(by_dir):
        findings.append(Finding("expert parallel", FAIL, ", ".join(sorted(by_dir)),
                                "dispatch and combine", "incomplete benchmark output",
                                "read the job's logs for the error"))
        return findings, None
    d, c = by_dir["dispatch"], by_dir["combine"]
    shape = {k: int(d[k]) for k in ("tokens_per_rank", "hidden", "topk", "experts")}
    measurement = EpMeasurement(backend, float(d["GBps"]), float(c["GBps"]),
                                round(float(d["time_us"]) + float(c["time_us"]), 3), shape)
    refs = acceptance.ep_references(instance_type, nodes, backend)
    if not refs:
        findings.append(Finding(
            f"EP {backend}", WARN,
            f"dispatch {_gb(measurement.dispatch_GBps)}, combine {_gb(measurement.combine_GBps)}",
            "-", f"no published threshold for {backend} on {nodes} x {instance_type}: recorded "
            "only", "compare with earlier gate runs (gate.json keeps the figures)"))
    for ref in refs:
        direction = ref.metric.removeprefix("ep_")
        got = measurement.dispatch_GBps if direction == "dispatch" else measurement.combine_GBps
        expected = (f">= {_gb(ref.required_GBps)} ({ref.pass_fraction:.0%} of "
                    f"{ref.published_GBps:g} published{', ' + ref.note if ref.note else ''})")
        check = f"EP {backend} {direction}"
        if got >= ref.required_GBps:
            findings.append(Finding(check, PASS, _gb(got), expected, ref.source))
        else:
            findings.append(Finding(check, FAIL if ref.strict else WARN, _gb(got), expected,
                                    f"{got / ref.published_GBps:.0%} of the published figure"
                                    + ("" if ref.strict else " (a yardstick, not a gate)"),
                                    DEGRADED_FIX))
    return findings, measurement


# --- all together --------------------------------------------------------------------------------


def evaluate(logs: dict[str, str], instance_type: str, nodes: int,
             ep_backend: str) -> GateReport:
    """Judge the logs of the jobs that ran (keys: nodecheck, allreduce, ep)."""
    itype = INSTANCE_TYPES[instance_type]
    world = nodes * itype.gpu_count
    report = GateReport(instance_type, nodes, ep_backend)
    if "nodecheck" in logs:
        report.add(*judge_nodecheck(logs["nodecheck"], nodes, itype.efa_devices))
    if "allreduce" in logs:
        report.add(*judge_allreduce(logs["allreduce"], instance_type, nodes, world))
    if "ep" in logs:
        findings, report.ep = judge_ep(logs["ep"], instance_type, nodes, world, ep_backend)
        report.add(*findings)
    for key in JOB_KEYS:
        if key not in logs:
            report.add(Finding(key, FAIL, "not run", "run",
                               f"the {key} job did not run (an earlier job failed, or it was "
                               "interrupted)", "fix the failures above and run `rlkit gate` again"))
    return report


# --- state file ----------------------------------------------------------------------------------

STATE_VERSION = 1


def faster_backend(measurements: dict[str, dict[str, Any]]) -> str | None:
    """The EP backend with the lowest dispatch + combine time for the same shape."""
    if not measurements:
        return None
    return min(measurements, key=lambda b: measurements[b]["time_us"])


def state_document(report: GateReport, config_name: str, finished_at: str,
                   previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """gate.json: the verdict and the EP figures, merged with earlier runs of the same shape."""
    measurements: dict[str, dict[str, Any]] = {}
    if previous and report.ep is not None:
        prev_ep = previous.get("ep") or {}
        if (previous.get("instance_type") == report.instance_type
                and previous.get("nodes") == report.nodes
                and prev_ep.get("shape") == report.ep.shape):
            measurements.update(prev_ep.get("measurements", {}))
    ep_doc = None
    if report.ep is not None:
        measurements[report.ep.backend] = {
            "dispatch_GBps": report.ep.dispatch_GBps, "combine_GBps": report.ep.combine_GBps,
            "time_us": report.ep.time_us, "measured_at": finished_at}
        ep_doc = {"shape": report.ep.shape, "measurements": measurements,
                  "faster": faster_backend(measurements)}
    elif previous:
        ep_doc = previous.get("ep")
    return {
        "version": STATE_VERSION,
        "config": config_name,
        "finished_at": finished_at,
        "ok": report.ok,
        "instance_type": report.instance_type,
        "nodes": report.nodes,
        "ep_backend_measured": report.ep_backend,
        "findings": [f.to_dict() for f in report.findings],
        "ep": ep_doc,
    }

"""The gate's verdicts: each job's log judged against the thresholds in ``infra.catalog.acceptance``.

Node check (devices, drivers, allocatable EFA), transport (aws-ofi-nccl, NVSHMEM over libfabric,
NCCL GIN), all-reduce bandwidth and expert-parallel dispatch/combine; ``evaluate`` runs them all on
the logs of the jobs that ran. docs/gate.md explains each number.
"""

from __future__ import annotations

import json
from typing import Any

from infra import names
from infra.catalog import INSTANCE_TYPES, acceptance
from infra.config.ep_spans import EpSpan
from ops.gate.traffic import judge_efa_traffic
from ops.gate.findings import (
    BAD_NODE_FIX,
    DEBUG_HINT,
    DEGRADED_FIX,
    FAIL,
    GIN_GDAKI,
    GIN_TYPE,
    JOB_KEYS,
    NET_ANY,
    NET_OFI,
    NET_SOCKET,
    NVSHMEM_EFA,
    NVSHMEM_FAILED,
    NVSHMEM_OK,
    NVSHMEM_TRANSPORT,
    OFI_FAILED,
    OFI_LOADED,
    OFI_PLUGIN_NAMES,
    PASS,
    RECORDED,
    SOCKET_FIX,
    WARN,
    EpMeasurement,
    Finding,
    GateReport,
    first_line,
    gbps,
    parse_rows,
    size_text,
)


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
        names = sorted({c.get("name", "?") for r in rows for c in r.get("checks", [])})
        findings.append(Finding("nodecheck", PASS, f"{len(rows)} node(s) ok", f"{nodes}",
                                ", ".join(names)))
    return findings


EFA_RESOURCE = names.EFA_RESOURCE


def judge_allocatable(nodes_json: str, requested: int) -> list[Finding]:
    """Allocatable EFA devices on each GPU node against what every pod requests."""
    try:
        doc = json.loads(nodes_json)
    except json.JSONDecodeError:
        return [Finding("allocatable EFA", FAIL, "unreadable node list", f"{requested} per node",
                        "`kubectl get nodes -o json` did not return JSON", "run it by hand and "
                        "check the kubectl context")]
    items = doc.get("items", []) if isinstance(doc, dict) else []
    if not items:
        return [Finding("allocatable EFA", FAIL, "no GPU nodes", f"{requested} per node",
                        "no node carries the node group's labels", "check that the GPU node "
                        "group is up (kubectl get nodes --show-labels)")]
    findings = []
    for node in items:
        name = node.get("metadata", {}).get("name", "?")
        raw = node.get("status", {}).get("allocatable", {}).get(EFA_RESOURCE, "0")
        try:
            have = int(raw)
        except (TypeError, ValueError):
            have = 0
        if have == requested:
            continue
        if have < requested:
            findings.append(Finding(
                f"allocatable EFA on {name}", FAIL, str(have), str(requested),
                f"the node offers {have} {EFA_RESOURCE} but each trainer pod requests {requested}: "
                "the pod cannot be scheduled there (it waits Pending) or, with a smaller request, "
                "runs on fewer rails",
                "look at the EFA device plugin's log on that node (kubectl logs -n kube-system -l "
                "app.kubernetes.io/name=aws-efa-k8s-device-plugin --field-selector ...) and at the "
                "instance's attached EFA interfaces (aws ec2 describe-instances ... "
                "NetworkInterfaces); an interface that did not attach does not come back: "
                + BAD_NODE_FIX))
        else:
            findings.append(Finding(
                f"allocatable EFA on {name}", FAIL, str(have), str(requested),
                f"the node offers {have} {EFA_RESOURCE}, more than the {requested} the pods "
                "request: the kit's instance catalog is wrong for this instance type and the "
                "job would leave rails unused",
                "correct efa_devices for this instance type in infra/catalog/instances.py (the EC2 "
                "MaximumEfaInterfaces figure), render again and rerun `rlkit gate`"))
    if not findings:
        findings.append(Finding("allocatable EFA", PASS, f"{requested} on {len(items)} node(s)",
                                f"{requested} per node", "node allocatable equals the pod request"))
    return findings


# --- transport -----------------------------------------------------------------------------------


def judge_nccl_net(text: str, job: str) -> list[Finding]:
    """aws-ofi-nccl loaded, and NCCL's network is it rather than sockets."""
    findings = []
    if OFI_LOADED in text and OFI_FAILED not in text:
        findings.append(Finding("NCCL OFI plugin", PASS, "loaded", "loaded",
                                first_line(text, OFI_LOADED) or OFI_LOADED))
    else:
        found = first_line(text, OFI_FAILED) or first_line(text, "NET/Plugin") or "no such line"
        findings.append(Finding(
            "NCCL OFI plugin", FAIL, "not loaded", "loaded",
            f"the {job} log has no {OFI_LOADED!r} line without a later {OFI_FAILED!r} (found: "
            f"{found}); {DEBUG_HINT}", SOCKET_FIX))
    network = NET_ANY.search(text)
    ofi = NET_OFI.search(text)
    want = "aws-ofi-nccl (" + " / ".join(OFI_PLUGIN_NAMES) + ")"
    if ofi and NET_SOCKET not in text:
        name = ofi.group(0).removeprefix("Using network ").strip()
        findings.append(Finding("NCCL network", PASS, f"{name} (aws-ofi-nccl, EFA)", want,
                                first_line(text, "Using network") or ""))
    elif NET_SOCKET in text:
        findings.append(Finding("NCCL network", FAIL, "TCP sockets", want,
                                f"NCCL fell back to sockets: the {job} log says {NET_SOCKET!r} "
                                "where it should name aws-ofi-nccl ('Using network Libfabric', "
                                "'AWS Libfabric' or 'OFI')", SOCKET_FIX))
    else:
        findings.append(Finding(
            "NCCL network", FAIL, network.group(1).strip() if network else "not logged", want,
            f"looked for 'Using network ' followed by one of the names aws-ofi-nccl v1.21.1 gives "
            f"itself ({', '.join(OFI_PLUGIN_NAMES)}) in the {job} log and found "
            f"{('Using network ' + network.group(1).strip()) if network else 'no Using network line'}; "
            f"{DEBUG_HINT}", SOCKET_FIX))
    return findings


def judge_nvshmem(text: str) -> list[Finding]:
    """DeepEP V1 over EFA: NVSHMEM initialised its libfabric transport with the efa provider."""
    ok_transport = NVSHMEM_OK in text
    ok_provider = NVSHMEM_EFA in text
    if ok_transport and ok_provider:
        return [Finding("NVSHMEM transport", PASS, "libfabric, provider efa", "libfabric, provider efa",
                        first_line(text, NVSHMEM_EFA) or "")]
    got = NVSHMEM_TRANSPORT.search(text)
    found = (first_line(text, NVSHMEM_FAILED) or (got.group(0) if got else None)
             or first_line(text, "Selected provider") or "no NVSHMEM transport line")
    missing = " and ".join(repr(x) for x, ok in ((NVSHMEM_OK, ok_transport), (NVSHMEM_EFA, ok_provider)) if not ok)
    return [Finding("NVSHMEM transport", FAIL, got.group(1) if got else "not libfabric/efa",
                    "libfabric, provider efa",
                    f"NVSHMEM did not use libfabric over EFA: looked for {missing} in the ep log, "
                    f"found: {found}; {DEBUG_HINT}",
                    "set NVSHMEM_REMOTE_TRANSPORT=libfabric and NVSHMEM_LIBFABRIC_PROVIDER=efa (the "
                    "kit's deepep-nvshmem profile does), use the deepep-nvshmem image (NVSHMEM "
                    "built with libfabric), and check the node check's EFA devices")]


def judge_gin(text: str, expected_type: str) -> list[Finding]:
    """DeepEP V2 over NCCL GIN: the GIN type NCCL read is the profile's."""
    m = GIN_TYPE.search(text)
    want = f"NCCL_GIN_TYPE set by environment to {expected_type}."
    if m is None:
        return [Finding("NCCL GIN type", FAIL, "not logged", expected_type,
                        f"looked for {want!r} in the ep log and found no NCCL_GIN_TYPE line; "
                        f"{DEBUG_HINT}", "check that the pod has the kit's deepep-gin profile "
                        "(NCCL_GIN_TYPE) and the deepep-gin image")]
    if m.group(1) != expected_type:
        return [Finding("NCCL GIN type", FAIL, m.group(1), expected_type,
                        f"the profile asked for GIN type {expected_type} but NCCL read "
                        f"{m.group(1)}: looked for {want!r}, found {m.group(0)!r}",
                        "remove NCCL_GIN_TYPE from any other source of environment (image ENV, "
                        "extra_env, a wrapper script) so the kit's profile value reaches NCCL")]
    findings = [Finding("NCCL GIN type", PASS, expected_type, expected_type, m.group(0))]
    if expected_type == "5":
        if GIN_GDAKI in text:
            findings.append(Finding("GIN EFA-GDA", PASS, "context created", "context created",
                                    first_line(text, GIN_GDAKI) or ""))
        else:
            findings.append(Finding(
                "GIN EFA-GDA", FAIL, "no context", "context created",
                f"looked for {GIN_GDAKI!r} in the ep log (aws-ofi-nccl's proof that EFA-GDA "
                f"ran) and found {first_line(text, 'gin GDAKI') or 'no gin GDAKI line'}",
                "check the node check's efa_driver and peer_mapping_override results, or use "
                "gin_mode: proxy"))
    return findings


# --- all-reduce ----------------------------------------------------------------------------------


def judge_allreduce(text: str, instance_type: str, nodes: int, world: int) -> tuple[list[Finding], dict[int, float]]:
    rows = [r for r in parse_rows(text) if r.get("kind") == "allreduce"]
    if not rows:
        return [Finding("all-reduce", FAIL, "no result", "busbw rows",
                        "the all-reduce benchmark printed no JSON rows (it failed or timed out)",
                        "read the job's logs (rlkit keeps them next to gate.json) for the error")], {}
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
    findings += judge_nccl_net(text, "all-reduce")
    itype = INSTANCE_TYPES.get(instance_type)
    suspect = acceptance.socket_suspect_GBps(instance_type, itype.efa_bandwidth_gbps if itype else 0)
    if peak < suspect:
        findings.append(Finding("all-reduce bandwidth", FAIL, f"peak {gbps(peak)}",
                                f">= {gbps(suspect)} on EFA",
                                "bandwidth far below EFA: NCCL most likely runs on TCP sockets",
                                SOCKET_FIX))

    refs = acceptance.allreduce_references(instance_type, nodes)
    if not refs:
        findings.append(Finding(
            "all-reduce busbw", WARN, f"peak {gbps(peak)} at {size_text(peak_size)}", "-",
            f"no published threshold for {instance_type}: recorded only",
            "compare with earlier gate runs on this instance type (rlkit gate --compare)"))
        return findings, by_size
    for ref in refs:
        check = f"all-reduce busbw @ {size_text(ref.size_bytes)}"
        expected = (f">= {gbps(ref.required_GBps)} ({ref.pass_fraction:.0%} of "
                    f"{ref.published_GBps:g} published on {ref.nodes} nodes)")
        if ref.size_bytes not in by_size:
            findings.append(Finding(check, WARN, "not measured", expected,
                                    f"the run did not include {size_text(ref.size_bytes)}",
                                    f"run the all-reduce benchmark up to at least "
                                    f"{size_text(ref.size_bytes)} (--max-bytes)"))
            continue
        findings.append(_against(check, by_size[ref.size_bytes], expected, ref, "degraded fabric: "))
    return findings, by_size


def _against(check: str, got: float, expected: str, ref: acceptance.Reference,
             degraded: str = "") -> Finding:
    """A measured figure against its published reference: a pass at or above the required share
    of it, else a failure (a warning where the reference is not strict)."""
    if got >= ref.required_GBps:
        return Finding(check, PASS, gbps(got), expected, f"{ref.tool}; {ref.source}")
    return Finding(check, FAIL if ref.strict else WARN, gbps(got), expected,
                   f"{degraded}{got / ref.published_GBps:.0%} of the published figure "
                   f"({ref.tool}; {ref.source})", DEGRADED_FIX)


# --- expert parallel -----------------------------------------------------------------------------


def _ep_backend(row_backend: str, configured: str) -> str:
    """Bench rows say nccl/gloo/deepep; the config names which DeepEP build ran."""
    if row_backend == "deepep":
        return configured if configured.startswith("deepep") else "deepep-nvshmem"
    return row_backend


SHAPE_KEYS = ("tokens_per_rank", "hidden", "topk", "experts")


def _pair(rows: list[dict[str, Any]], purpose: str) -> tuple[dict, dict] | None:
    by_dir = {r["direction"]: r for r in rows if r.get("purpose", "model") == purpose}
    if {"dispatch", "combine"} <= set(by_dir):
        return by_dir["dispatch"], by_dir["combine"]
    return None


def judge_ep(text: str, instance_type: str, nodes: int, world: int, configured_backend: str,
             gin_type: str | None = None) -> tuple[list[Finding], EpMeasurement | None]:
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
    # Transport of the EP path itself.
    if backend == "nccl":
        findings += [Finding(f"EP {f.check}", f.status, f.measured, f.expected, f.detail, f.fix)
                     for f in judge_nccl_net(text, "ep")]
    elif backend == "deepep-nvshmem":
        findings += judge_nvshmem(text)
    elif backend == "deepep-gin" and gin_type is not None:
        findings += judge_gin(text, gin_type)
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
    # The model's shape: inside each of the run's EP groups (purpose = the group's name), or over
    # every rank (purpose "model", an image or config without --span).
    purposes = list(dict.fromkeys(r.get("purpose", "model") for r in rows if r.get("purpose") != "acceptance"))
    pairs = {p: _pair(rows, p) for p in purposes}
    if not purposes or any(v is None for v in pairs.values()):
        findings.append(Finding("expert parallel", FAIL, ", ".join(sorted({r['direction'] for r in rows})),
                                "dispatch and combine", "incomplete benchmark output",
                                "read the job's logs for the error"))
        return findings, None
    itype = INSTANCE_TYPES[instance_type]
    decider = "training" if "training" in pairs else purposes[0]
    measurement = None
    for purpose, (d, c) in pairs.items():
        step = float(d.get("step_time_us", d.get("time_us")))
        cstep = float(c.get("step_time_us", c.get("time_us")))
        where = _span_words(d, itype)
        if measurement is None or purpose == decider:
            measurement = EpMeasurement(backend, round(step + cstep, 3), {k: int(d[k]) for k in SHAPE_KEYS})
        if purpose == decider:
            measurement.time_us = round(step + cstep, 3)
            measurement.decided_by = f"{purpose}: {where}"
        measurement.spans[purpose] = {"time_us": round(step + cstep, 3), "ep_size": int(d.get("ep_size") or world),
                                      "ep_nodes": int(d.get("ep_nodes") or nodes), "where": where}
        decides = purpose == decider
        findings.append(Finding(
            f"EP {backend} step time ({purpose})", RECORDED, f"{(step + cstep) / 1000:.2f} ms",
            "(recorded: picks the faster backend)" if decides else "(recorded)",
            f"dispatch {step:.0f} us + combine {cstep:.0f} us at the model's shape "
            f"{_shape_words(measurement.shape)}, {where}; "
            + ("this measurement decides the EP backend" if decides else
               f"reported beside the {decider} measurement, which decides the backend")
            + "; no published figure applies"))
    assert measurement is not None

    acc = _pair(rows, "acceptance")
    others = [f"{p} ({s['where']}) {s['time_us'] / 1000:.2f} ms" for p, s in measurement.spans.items()
              if p != decider]
    findings.append(Finding(
        "EP verdict", RECORDED, f"backend choice from {decider}",
        "the measurement on the path the run takes",
        f"backend choice: {backend} {measurement.time_us / 1000:.2f} ms per dispatch + combine, measured "
        f"{measurement.decided_by.split(': ', 1)[1]} (the run's {decider} all-to-all)"
        + (f"; also reported: {'; '.join(others)}" if others else "")
        + "; fabric acceptance: "
        + (f"DeepEP's published shape {_span_words(acc[0], itype)}, compared with published figures"
           if acc is not None else "not measured (no --acceptance)")))
    if acc is None:
        findings.append(Finding(
            f"EP {backend} bandwidth", WARN, "not measured", "DeepEP-accounted GB/s at the "
            "published shape", "the benchmark ran without --acceptance: nothing comparable with "
            "the published DeepEP figures was measured (recorded only)",
            "render the manifests with this kit version: the ep job passes --acceptance when DeepEP's "
            "256 experts spread evenly over the GPUs and, with a DeepEP backend, DeepEP configures that "
            "many ranks (the job's description says which)"))
        return findings, measurement
    ad, ac = acc
    shape = tuple(int(ad[k]) for k in SHAPE_KEYS)
    measurement.acceptance = {
        "shape": dict(zip(SHAPE_KEYS, shape)), "timing": ad.get("timing"),
        "dispatch_rdma_GBps": ad.get("rdma_GBps"), "combine_rdma_GBps": ac.get("rdma_GBps"),
        "dispatch_nvl_GBps": ad.get("nvl_GBps"), "combine_nvl_GBps": ac.get("nvl_GBps")}
    refs = acceptance.ep_references(instance_type, nodes, backend, shape)
    got_words = (f"dispatch {gbps(float(ad['rdma_GBps']))} RDMA / {gbps(float(ad['nvl_GBps']))} NVL, "
                 f"combine {gbps(float(ac['rdma_GBps']))} RDMA / {gbps(float(ac['nvl_GBps']))} NVL")
    if not refs:
        findings.append(Finding(
            f"EP {backend} bandwidth", WARN, got_words, "-",
            f"no published threshold for {backend} on {nodes} x {instance_type} at "
            f"{_shape_words(dict(zip(SHAPE_KEYS, shape)))}: recorded only",
            "compare with earlier gate runs (rlkit gate --compare)"))
        return findings, measurement
    for ref in refs:
        direction = ref.metric.removeprefix("ep_")
        row = ad if direction == "dispatch" else ac
        got = float(row["rdma_GBps"])
        expected = (f">= {gbps(ref.required_GBps)} RDMA ({ref.pass_fraction:.0%} of "
                    f"{ref.published_GBps:g} published{', ' + ref.note if ref.note else ''})")
        check = f"EP {backend} {direction} RDMA"
        if row.get("timing") != "kernel":
            findings.append(Finding(check, WARN, gbps(got), expected,
                                    "timed with wall clock, not DeepEP's kernel timer: not "
                                    "comparable with the published figure (recorded only)",
                                    "run the ep job on GPUs with the DeepEP image"))
        else:
            findings.append(_against(check, got, expected, ref))
    return findings, measurement


def _span_words(row: dict[str, Any], itype: Any) -> str:
    """Where one measured EP group ran: inside one NVLink domain or across EFA (the catalog's
    nvlink_domain_gpus decides, never the instance name)."""
    size = int(row.get("ep_size") or row.get("world_size") or 1)
    # ep_first / ep_pool: the ranks the groups tile (a disaggregated run's pools; older rows: all)
    span = EpSpan(str(row.get("purpose")), size, int(row.get("ep_stride") or 1),
                  int(row.get("ep_pool") or row.get("world_size") or size),
                  int(row.get("ranks_per_node") or itype.gpu_count), itype.nvlink_domain_gpus,
                  int(row.get("ep_first") or 0))
    return f"EP{size} {span.where}"


def ep_crosses_efa(text: str, instance_type: str) -> bool:
    """Whether any EP measurement in the log left one NVLink domain (then EFA must carry it)."""
    itype = INSTANCE_TYPES[instance_type]
    return any("across EFA" in _span_words(r, itype) for r in parse_rows(text) if r.get("kind") == "ep")


def _shape_words(shape: dict[str, int]) -> str:
    return (f"{shape['tokens_per_rank']} tokens/rank, hidden {shape['hidden']}, top-{shape['topk']} "
            f"of {shape['experts']} experts")


# --- all together --------------------------------------------------------------------------------


def evaluate(logs: dict[str, str], instance_type: str, nodes: int, ep_backend: str,
             gin_type: str | None = None) -> GateReport:
    """Judge the logs of the jobs that ran (keys: nodecheck, allreduce, ep; optionally nodes, the
    GPU nodes as ``kubectl get nodes -o json`` printed them). ``gin_type`` is the NCCL_GIN_TYPE
    the deepep-gin profile sets."""
    itype = INSTANCE_TYPES[instance_type]
    world = nodes * itype.gpu_count
    report = GateReport(instance_type, nodes, ep_backend)
    if "nodecheck" in logs:
        report.add(*judge_nodecheck(logs["nodecheck"], nodes, itype.efa_devices))
    if "nodes" in logs:
        report.add(*judge_allocatable(logs["nodes"], itype.efa_devices))
    # EFA carries traffic only where the ranks leave one NVLink domain (catalog nvlink_domain_gpus).
    crosses_efa = world > itype.nvlink_domain_gpus
    if "allreduce" in logs:
        findings, report.allreduce = judge_allreduce(logs["allreduce"], instance_type, nodes, world)
        report.add(*findings)
        if crosses_efa:
            findings, bad = judge_efa_traffic(logs["allreduce"], "allreduce", nodes, itype.efa_devices)
            report.add(*findings)
            report.bad_nodes.update(bad)
    if "ep" in logs:
        findings, report.ep = judge_ep(logs["ep"], instance_type, nodes, world, ep_backend, gin_type)
        report.add(*findings)
        if ep_crosses_efa(logs["ep"], instance_type):
            findings, bad = judge_efa_traffic(logs["ep"], "ep", nodes, itype.efa_devices)
            report.add(*findings)
            for node, why in bad.items():
                report.bad_nodes.setdefault(node, why)
    for key in JOB_KEYS:
        if key not in logs:
            report.add(Finding(key, FAIL, "not run", "run",
                               f"the {key} job did not run (an earlier job failed, or it was "
                               "interrupted)", "fix the failures above and run `rlkit gate` again"))
    return report


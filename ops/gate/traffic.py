"""The EFA traffic proof: every EFA device of every node carried the benchmark's bytes.

``rltrainer bench`` prints one ``efa_traffic`` row per node (its local rank 0): the bytes each EFA
device the pod was given moved during the benchmark, read from the EFA driver's port counters
(``/sys/class/infiniband/<dev>/ports/1/hw_counters``; counter names from amzn/amzn-drivers
kernel/linux/efa/src/efa_verbs.c ``EFA_DEFINE_PORT_STATS``, see rltrainer/bench/efa_counters.py),
and the EFA devices of the host it was not given. ``ops.gate.runner`` writes a ``# rlkit gate:
pod <pod> on node <node>`` line before each pod's log, so a row's host (the pod's hostname) names
its Kubernetes node.

A log line can be right while a rail is dead; bandwidth can pass the 90 % bar with one NIC of 32
idle. The counters say which NIC and which node.
"""

from __future__ import annotations

import re
from typing import Any

from ops.gate.findings import BAD_NODE_FIX, FAIL, PASS, Finding, parse_rows

POD_LINE = "# rlkit gate: pod {pod} on node {node}"
_POD_LINE = re.compile(r"^# rlkit gate: pod (\S+) on node (\S+)\s*$", re.MULTILINE)
# A device that moved less than this share of its node's busiest device is idle: NCCL and
# aws-ofi-nccl stripe large messages over every rail, so a working rail is never this far behind.
IDLE_SHARE = 0.01

TRAFFIC_FIX = ("a NIC that carries nothing is a rail that did not come up or a device the pod "
               "was not given: check the node's EFA interfaces (aws ec2 describe-instances ... "
               "NetworkInterfaces), the EFA device plugin's log on that node and nodecheck's "
               "efa_devices; if it repeats, " + BAD_NODE_FIX)


def pod_nodes(text: str) -> dict[str, str]:
    """Pod name -> node name, from the lines the runner writes before each pod's log."""
    return {m.group(1): m.group(2) for m in _POD_LINE.finditer(text)}


def node_of(row: dict[str, Any], pods: dict[str, str]) -> str:
    """The Kubernetes node a row came from: NODE_NAME when the pod had it, else the node of the
    pod whose name starts with the row's hostname (an Indexed Job pod's hostname is
    ``<job>-<index>``, its name ``<job>-<index>-<suffix>``), else the hostname."""
    if row.get("node"):
        return str(row["node"])
    host = str(row.get("host", "?"))
    for pod, node in pods.items():
        if pod == host or pod.startswith(host + "-"):
            return node
    return host


def traffic_rows(text: str, bench: str) -> list[dict[str, Any]]:
    return [r for r in parse_rows(text) if r.get("kind") == "efa_traffic" and r.get("bench") == bench]


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def judge_efa_traffic(text: str, bench: str, nodes: int,
                      efa_expected: int) -> tuple[list[Finding], dict[str, str]]:
    """Findings for one benchmark's counters, and the nodes they name (node -> why)."""
    check = f"EFA traffic ({bench})"
    rows = traffic_rows(text, bench)
    if not rows:
        return [Finding(check, FAIL, "not measured", f"bytes on each of {efa_expected} EFA devices "
                        f"on {nodes} nodes",
                        f"the {bench} log has no efa_traffic rows, so nothing proves that every EFA "
                        "device carried the benchmark (an image older than this kit, or the "
                        "benchmark failed before its end)",
                        "rebuild the trainer image with this kit's rltrainer (`rlkit image build`) "
                        "and run `rlkit gate` again")], {}
    pods = pod_nodes(text)
    findings: list[Finding] = []
    bad: dict[str, str] = {}
    seen = []
    for row in rows:
        node = node_of(row, pods)
        seen.append(node)
        devices: dict[str, Any] = row.get("devices") or {}
        unreadable = sorted(d for d, v in devices.items() if v is None)
        moved = {d: int(v) for d, v in devices.items() if v is not None}
        busiest = max(moved.values(), default=0)
        idle = sorted(d for d, v in moved.items() if v <= busiest * IDLE_SHARE)
        missing = list(row.get("not_given") or [])
        given = len(devices)
        if given < efa_expected:
            why = (f"the pod was given {given} of {efa_expected} EFA devices"
                   + (f" (not given: {', '.join(missing)})" if missing else
                      f"; the host shows {row.get('host_devices', '?')}"))
            findings.append(Finding(f"{check} on {node}", FAIL, f"{given} devices",
                                    f"{efa_expected} devices", f"missing NIC on node {node}: {why}",
                                    TRAFFIC_FIX))
            bad[node] = f"missing EFA device(s) {', '.join(missing) or '?'}"
        if unreadable:
            findings.append(Finding(
                f"{check} on {node}", FAIL, f"{len(unreadable)} unreadable", "counters on every device",
                f"node {node}: the port counters of {', '.join(unreadable)} could not be read "
                "(/sys/class/infiniband/<dev>/ports/1/hw_counters), so their traffic is unproven",
                "check that the node runs the EFA kernel driver (nodecheck efa_driver) and that "
                "the pod sees /sys/class/infiniband"))
            bad.setdefault(node, f"unreadable counters on {', '.join(unreadable)}")
        if busiest == 0 and moved:
            findings.append(Finding(f"{check} on {node}", FAIL, "0 bytes on every device",
                                    "traffic on every device",
                                    f"node {node}: no EFA device moved a byte during the {bench} "
                                    "benchmark: its traffic went another way (TCP sockets)",
                                    TRAFFIC_FIX))
            bad[node] = "no EFA traffic"
        elif idle:
            findings.append(Finding(
                f"{check} on {node}", FAIL, f"idle: {', '.join(idle)}", "traffic on every device",
                f"idle NIC on node {node}: {', '.join(f'{d} moved {_gb(moved[d])}' for d in idle)} "
                f"while its busiest device moved {_gb(busiest)} (idle below {IDLE_SHARE:.0%} of it)",
                TRAFFIC_FIX))
            bad[node] = f"idle EFA device(s) {', '.join(idle)}"
    if len(rows) < nodes:
        findings.append(Finding(check, FAIL, f"{len(rows)} node(s)", f"{nodes} nodes",
                                f"only {', '.join(seen)} reported EFA counters for the {bench} "
                                "benchmark", "read the job's logs of the other nodes"))
    if not findings:
        least = min((int(v) for r in rows for v in (r.get("devices") or {}).values()), default=0)
        findings.append(Finding(check, PASS, f"{efa_expected} devices x {len(rows)} nodes",
                                "traffic on every EFA device of every node",
                                f"every device moved at least {_gb(least)} during the {bench} "
                                "benchmark (EFA port counters)"))
    return findings, bad

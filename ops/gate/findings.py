"""What the fabric gate reports and the log lines it reads: result types and parsing.

``Finding`` (one check: pass, warn, fail or recorded, with the measured and expected figure and
the fix), ``EpMeasurement`` and ``GateReport``; the log lines the libraries print that prove the
transport; and the helpers that pull the benchmarks' JSON rows out of mixed pod logs. The verdicts
are in ``ops.gate.judges``, the recorded document in ``ops.gate.record``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from infra.problems import FAIL, PASS, RECORDED, WARN, Problem  # noqa: F401 (the gate's statuses)

# RECORDED: a figure kept for a decision (the EP backend), compared with nothing.

JOB_KEYS = ("nodecheck", "allreduce", "ep")

# --- log lines that prove the transport -----------------------------------------------------------
# Exact texts from the sources of the versions the image installs (read 2026-11-30):
# - aws-ofi-nccl v1.21.1 (EFA installer 1.50.0; tag commit 2475c4c736907e68ebeadb3848f31231ee4a44d0):
#   every plugin line starts "NET/OFI " (include/nccl_ofi_log.h); src/nccl_ofi_net.cpp logs
#   "Initializing " PACKAGE_STRING ("aws-ofi-nccl <version>") at init and PACKAGE_NAME
#   " initialization failed" when it gives up; the plugin's NCCL name is "Libfabric"
#   (src/nccl_ofi_interface_nvidia.cpp:662 and the other ncclNetPlugin_v* tables), renamed at load
#   by nvidia_plugin_name_fixup (lines 830-858) to "AWS Libfabric" when NCCL_NET="AWS Libfabric"
#   (the name of releases <= 1.11.0) and to "OFI" when NCCL_NET=OFI (both compared
#   case-insensitively); NCCL logs whichever name the plugin carries; the GIN EFA-GDA path logs
#   "gin GDAKI: createContext done (" (src/rdma/gin/nccl_ofi_gin_gdaki.cpp), and
#   doc/gin-getting-started.md names that line and "NCCL_GIN_TYPE set by environment to 5." as the
#   proof that EFA-GDA ran.
# - NCCL v2.30.7-1 (73cf112295c33aee2b895f329f592f2a9b4b0f97; the newest tag we could read, the GIN
#   image builds v2.31.2-1): src/init.cc "Using network %s" with the net plugin's name ("Socket" is
#   src/transport/net_socket.cc's); src/misc/param.cc "%s set by environment to %lld." for integer
#   parameters such as NCCL_GIN_TYPE.
# - NVSHMEM, branch devel at 2d7d25f0816235e3c2b51779571ec032606ea0dd (CMakeLists.txt VERSION
#   3.5.1.1; not the v3.4.5-0 tag, which is 131da55; ../shared/upstream/README.md); the image builds
#   3.7.0, whose source we could not read: src/host/transport/transport.cpp "Successfully
#   initialized the transport: %s" (the NVSHMEM_REMOTE_TRANSPORT value) and "init failed for remote
#   transport: %s"; src/modules/transport/libfabric/libfabric.cpp "Selected provider %s, fabric %s,
#   nic %s, hmem %s". The 3.7.0 wheel's binaries hold the first two unchanged and the last with a
#   "%s %d " prefix and a "domain %zu/%zu" suffix, so "Selected provider efa," still matches.
OFI_LOADED = "NET/OFI Initializing aws-ofi-nccl"
OFI_FAILED = "NET/OFI aws-ofi-nccl initialization failed"
# Every name NCCL can log for aws-ofi-nccl (see above); "Using network OFI" is a healthy fabric.
OFI_PLUGIN_NAMES = ("Libfabric", "AWS Libfabric", "OFI")
NET_OFI = re.compile(r"Using network (?:AWS Libfabric|Libfabric|OFI)[ \t]*$", re.MULTILINE)
NET_ANY = re.compile(r"Using network (\S[^\n]*)")
NET_SOCKET = "Using network Socket"
NVSHMEM_OK = "Successfully initialized the transport: libfabric"
NVSHMEM_FAILED = "init failed for remote transport:"
NVSHMEM_TRANSPORT = re.compile(r"Successfully initialized the transport: (\S+)")
NVSHMEM_EFA = "Selected provider efa,"
GIN_TYPE = re.compile(r"NCCL_GIN_TYPE set by environment to (-?\d+)\.")
GIN_GDAKI = "NET/OFI gin GDAKI: createContext done ("
DEBUG_HINT = ("the fabric jobs set NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,NET and "
              "NVSHMEM_DEBUG=INFO; a log without these lines either ran with other settings or "
              "never initialised the library")

SOCKET_FIX = ("make NCCL load aws-ofi-nccl: NCCL_NET_PLUGIN=ofi and FI_PROVIDER=efa in the pod, "
              "the plugin in the image (nodecheck's nccl_ofi_plugin check), and the node's full "
              "vpc.amazonaws.com/efa count requested; then run `rlkit gate` again")
# EKS node auto-repair replaces a node whose conditions report a fault (Ready,
# AcceleratedHardwareReady, NetworkingReady, ...) [EKS user guide "Automatically repair nodes in
# EKS clusters", docs.aws.amazon.com/eks/latest/userguide/node-repair.html]; a cordon or a taint is
# no condition, so a cordoned node stays until its instance goes. Terminating it through Auto
# Scaling without decrementing the desired capacity has the node group's Auto Scaling group launch
# a replacement [AWS CLI reference, autoscaling terminate-instance-in-auto-scaling-group]. The kit
# never terminates an instance itself: the user runs it.
REPLACE_COMMAND = ("aws autoscaling terminate-instance-in-auto-scaling-group{region} --instance-id "
                   "{instance} --no-should-decrement-desired-capacity")
NOT_REPAIRED = ("EKS node auto-repair acts on node conditions (Ready, AcceleratedHardwareReady, ...), "
                "not on cordons")
BAD_NODE_FIX = ("cordon the node and taint it (kubectl cordon <node>; kubectl taint nodes <node> "
                "rlkit/fabric=failed:NoSchedule) to keep new pods off it; a cordon alone does not "
                f"get it replaced: {NOT_REPAIRED}. Replace it yourself: `"
                + REPLACE_COMMAND.format(region="", instance="<instance ID>")
                + "` (the instance ID ends the node's spec.providerID; the gate prints the command "
                "for each node it names); then run `rlkit gate` again")
DEGRADED_FIX = ("run `rlkit gate` again to rule out a noisy neighbour; if it repeats, check that "
                "both nodes are in one cluster placement group and one AZ, that every pod got all "
                "EFA devices (nodecheck), and the EFA driver/installer versions; if one node keeps "
                "failing, " + BAD_NODE_FIX)


@dataclass(frozen=True, init=False)
class Finding(Problem):
    """One gate check: how it came out, the measured and expected figures, what was found and the
    fix. A ``Problem`` whose subject is the check (``detail`` is its ``rule``); its JSON view
    keeps the keys gate.json has always had."""

    def __init__(self, check: str, status: str, measured: str = "", expected: str = "",
                 detail: str = "", fix: str = "") -> None:
        super().__init__(subject=check, rule=detail, fix=fix, status=status, check=check,
                         measured=measured, expected=expected)

    @property
    def detail(self) -> str:
        return self.rule

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "measured": self.measured,
                "expected": self.expected, "detail": self.detail, "fix": self.fix}


@dataclass
class EpMeasurement:
    backend: str  # config name: nccl | deepep-nvshmem | deepep-gin
    time_us: float  # dispatch + combine step time at the model's shape: what picks the backend
    shape: dict[str, int]  # the model shape
    acceptance: dict[str, Any] | None = None  # DeepEP-accounted figures at the published shape
    # Each measured EP group of the run (training, rollout; "model" = every rank): time_us,
    # ep_size, ep_nodes, where ("EP8 inside one NVLink domain ...", "EP16 across EFA (2 nodes)").
    spans: dict[str, dict[str, Any]] = field(default_factory=dict)
    decided_by: str = ""  # which of them time_us is: "training: EP8 inside one NVLink domain ..."

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateReport:
    instance_type: str
    nodes: int
    ep_backend: str
    findings: list[Finding] = field(default_factory=list)
    ep: EpMeasurement | None = None
    allreduce: dict[int, float] = field(default_factory=dict)  # size -> busbw GB/s
    bad_nodes: dict[str, str] = field(default_factory=dict)  # node -> why (EFA counters, bisection)
    image: str | None = None  # the trainer image its jobs ran; None: unknown (saved logs judged)

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
    """"socket" or "ofi" from NCCL's "Using network" line, None when NCCL did not log it."""
    if NET_SOCKET in text:
        return "socket"
    if NET_OFI.search(text):
        return "ofi"
    return None


def first_line(text: str, needle: str) -> str | None:
    for line in text.splitlines():
        if needle in line:
            return line.strip()
    return None


def gbps(value: float) -> str:
    return f"{value:.1f} GB/s"


def size_text(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} B"


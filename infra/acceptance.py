"""Fabric acceptance thresholds per instance type: what `rlkit gate` compares measurements with.

Every figure is a published measurement [../shared/design.md, "Acceptance numbers to gate on",
collected from awslabs/awsome-distributed-ai (nccl-tests, micro-benchmarks/expert-parallelism)
and the megatron-bridge README]. The kit passes a run at ``pass_fraction`` of the figure: a fabric
that is 10 % below the published number works; one that is 50 % below has a problem.

Rules the gate follows (``ops/gate.py``):

- all-reduce bus bandwidth is normalised for the rank count (nccl-tests "busbw"), so a figure
  published on 2 nodes applies to any node count >= 2 of the same instance type;
- expert-parallel dispatch/combine throughput depends on the scale, so an EP figure applies only
  to the node count it was published for;
- ``strict=False`` marks a figure measured with a different tool or shape: falling short of it is
  a warning, not a failure;
- an instance type (or node count, or backend) with no published figure is reported as
  "no published threshold: recorded only", a warning, never a silent pass.

No CDK imports; the CLI and the tests read this module.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20

DEFAULT_PASS_FRACTION = 0.9

# Below this share of the reference, a bandwidth is not "a bit slow" but a different transport:
# NCCL over TCP sockets reaches a few GB/s per node where EFA gives hundreds.
SOCKET_SUSPECT_FRACTION = 0.25
# With no published figure, suspect sockets below this share of the instance's network bandwidth
# (catalog efa_bandwidth_gbps / 8, in GB/s).
SOCKET_SUSPECT_NETWORK_FRACTION = 0.1


@dataclass(frozen=True)
class Reference:
    """One published figure and the rule for passing against it."""

    metric: str  # "allreduce_busbw" | "ep_dispatch" | "ep_combine"
    instance_type: str
    nodes: int  # node count of the published run
    published_GBps: float
    source: str
    size_bytes: int | None = None  # all-reduce message size of the figure
    backends: tuple[str, ...] = ()  # EP backends (config names) the figure applies to
    pass_fraction: float = DEFAULT_PASS_FRACTION
    strict: bool = True
    note: str = ""

    @property
    def required_GBps(self) -> float:
        return round(self.published_GBps * self.pass_fraction, 2)


_NCCL_TESTS = "nccl-tests all_reduce_perf, awslabs/awsome-distributed-ai [design.md]"
_DEEPEP = "DeepEP V1 over EFA (NVSHMEM/libfabric), awslabs/awsome-distributed-ai [design.md]"

REFERENCES: tuple[Reference, ...] = (
    Reference("allreduce_busbw", "p5.48xlarge", 2, 437.0, _NCCL_TESTS, size_bytes=2 * GIB),
    Reference("allreduce_busbw", "p5.48xlarge", 2, 487.0, _NCCL_TESTS, size_bytes=16 * GIB),
    Reference("allreduce_busbw", "p6-b200.48xlarge", 2, 524.0, _NCCL_TESTS, size_bytes=8 * GIB),
    # Published range 63-72 GB/s for dispatch; the low end is the reference.
    Reference("ep_dispatch", "p5en.48xlarge", 2, 63.0, _DEEPEP, backends=("deepep-nvshmem",),
              note="EP16; published range 63-72 GB/s"),
    Reference("ep_combine", "p5en.48xlarge", 2, 59.0, _DEEPEP, backends=("deepep-nvshmem",),
              note="EP16"),
    Reference("ep_dispatch", "p5.48xlarge", 4, 44.0, _DEEPEP, backends=("deepep-nvshmem",),
              note="EP32"),
    Reference("ep_combine", "p5.48xlarge", 4, 46.0, _DEEPEP, backends=("deepep-nvshmem",),
              note="EP32"),
    # DeepEP V2 over NCCL GIN has no published EFA figure of its own; the V1 numbers are the
    # closest yardstick, so falling short of them warns.
    Reference("ep_dispatch", "p5en.48xlarge", 2, 63.0, _DEEPEP, backends=("deepep-gin",),
              strict=False, note="EP16; a DeepEP V1 figure used as a yardstick for V2/GIN"),
    Reference("ep_combine", "p5en.48xlarge", 2, 59.0, _DEEPEP, backends=("deepep-gin",),
              strict=False, note="EP16; a DeepEP V1 figure used as a yardstick for V2/GIN"),
    # nccl-tests alltoall_perf bus bandwidth at 64 MiB on 8x p5. The kit's EP benchmark moves
    # token-shaped messages with torch all_to_all_single, a related but different measurement.
    Reference("ep_dispatch", "p5.48xlarge", 8, 40.0, "nccl-tests alltoall_perf at 64 MiB "
              "[design.md]", backends=("nccl",), strict=False,
              note="EP64; nccl-tests all-to-all busbw, a yardstick for the NCCL EP path"),
    Reference("ep_combine", "p5.48xlarge", 8, 40.0, "nccl-tests alltoall_perf at 64 MiB "
              "[design.md]", backends=("nccl",), strict=False,
              note="EP64; nccl-tests all-to-all busbw, a yardstick for the NCCL EP path"),
)


def allreduce_references(instance_type: str, nodes: int) -> list[Reference]:
    """All-reduce figures for this instance type (busbw holds across node counts >= 2)."""
    if nodes < 2:
        return []
    return [r for r in REFERENCES
            if r.metric == "allreduce_busbw" and r.instance_type == instance_type]


def ep_references(instance_type: str, nodes: int, backend: str) -> list[Reference]:
    """Dispatch/combine figures for exactly this instance type, node count and EP backend."""
    return [r for r in REFERENCES
            if r.metric in ("ep_dispatch", "ep_combine") and r.instance_type == instance_type
            and r.nodes == nodes and backend in r.backends]


def socket_suspect_GBps(instance_type: str, network_gbps: int) -> float:
    """All-reduce busbw below which NCCL has most likely fallen back to TCP sockets."""
    refs = [r for r in REFERENCES
            if r.metric == "allreduce_busbw" and r.instance_type == instance_type]
    if refs:
        return round(min(r.published_GBps for r in refs) * SOCKET_SUSPECT_FRACTION, 2)
    return round(network_gbps / 8 * SOCKET_SUSPECT_NETWORK_FRACTION, 2)

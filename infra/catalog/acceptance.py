"""Fabric acceptance thresholds per instance type: what `rlkit gate` compares measurements with.

Every figure is a published measurement [../shared/design.md, "Acceptance numbers to gate on",
collected from awslabs/awsome-distributed-ai (nccl-tests, micro-benchmarks/expert-parallelism)
and the megatron-bridge README], listed with its source, the tool that measured it, its shape and
instance type. The kit passes a run at ``pass_fraction`` of the figure: a fabric that is 10 %
below the published number works; one that is 50 % below has a problem.

Rules the gate follows (``ops/gate.py``), so that a comparison is always like with like:

- all-reduce bus bandwidth (nccl-tests ``all_reduce_perf`` busbw at one message size) is
  normalised for the rank count, so a figure published on 2 nodes applies to any node count >= 2
  of the same instance type;
- expert-parallel figures are DeepEP ``tests/test_internode.py`` RDMA bandwidths (bytes per
  (token, destination node) over the dispatch/combine kernel time) at DeepEP's shape: hidden
  7168, 256 experts, top-8, 4096 tokens per rank, bf16. The gate compares them only with the
  benchmark's ``acceptance`` rows (same accounting, same shape), for the same instance type,
  node count and backend (DeepEP V1 over NVSHMEM/libfabric);
- anything without such a figure (an instance type, node count, backend or shape) is reported
  as "no published threshold: recorded only", a warning, never a silent pass. Its numbers stay
  in gate.json, and `rlkit gate --compare` puts runs side by side.

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

    metric: str  # "allreduce_busbw" | "ep_dispatch" | "ep_combine" (EP: RDMA GB/s, DeepEP accounting)
    instance_type: str
    nodes: int  # node count of the published run
    published_GBps: float
    source: str
    tool: str = ""  # what measured it
    size_bytes: int | None = None  # all-reduce message size of the figure
    ep_shape: tuple[int, int, int, int] | None = None  # (tokens_per_rank, hidden, topk, experts)
    backends: tuple[str, ...] = ()  # EP backends (config names) the figure applies to
    pass_fraction: float = DEFAULT_PASS_FRACTION
    strict: bool = True
    note: str = ""

    @property
    def shape(self) -> str:
        """The shape in words, for the docs and the gate's table."""
        if self.size_bytes is not None:
            return f"{self.size_bytes // GIB} GiB message, {self.nodes} nodes"
        if self.ep_shape is not None:
            t, h, k, e = self.ep_shape
            return f"{t} tokens/rank, hidden {h}, top-{k} of {e} experts, bf16, {self.nodes} nodes"
        return f"{self.nodes} nodes"

    @property
    def required_GBps(self) -> float:
        return round(self.published_GBps * self.pass_fraction, 2)


# All-reduce: the newest published run per instance type in awslabs/awsome-distributed-ai (read at
# 95b939c, 2026-07-23), in-place busbw (torch's all-reduce is in-place), time averaged over ranks
# (nccl-tests' default, as the kit's benchmark reports it). Each figure keeps the node count it was
# measured on (Reference.nodes); busbw is normalised for the rank count, so it applies to any node
# count >= 2.
_NCCL_TESTS = ("awslabs/awsome-distributed-ai micro-benchmarks/nccl-tests/README.md, 2x p5.48xlarge "
               "8 B-16 GiB run (commit 88c2e71b, 2024-04-19), in-place busbw")
_PCS_TESTS = ("awslabs/awsome-distributed-ai architectures/aws-pcs/tests/compute-test.md "
              "(commit 7bad1987, 2026-06-19)")
_NCCL_TOOL = "nccl-tests all_reduce_perf, bus bandwidth (busbw)"
_DEEPEP = "awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism (DeepEP V1 over EFA) [design.md]"
_DEEPEP_TOOL = ("DeepEP tests/test_internode.py (567632d + EFA host-proxy patch, NVSHMEM libfabric): "
                "RDMA GB/s, best tuned BF16 line")
DEEPEP_SHAPE = (4096, 7168, 8, 256)  # tokens_per_rank, hidden, topk, experts: test_internode.py defaults

REFERENCES: tuple[Reference, ...] = (
    Reference("allreduce_busbw", "p5.48xlarge", 2, 442.06, _NCCL_TESTS, _NCCL_TOOL, size_bytes=2 * GIB),
    Reference("allreduce_busbw", "p5.48xlarge", 2, 487.26, _NCCL_TESTS, _NCCL_TOOL, size_bytes=16 * GIB),
    # 4x p6-b200 (32 GPUs), NICs auto-selected, "not a peak-tuned number" says the source: a floor.
    Reference("allreduce_busbw", "p6-b200.48xlarge", 4, 377.0, _PCS_TESTS + ", 4x p6-b200 run",
              _NCCL_TOOL, size_bytes=16 * GIB, note="4 nodes; not peak-tuned"),
    # 2x p6-b300 "~654 GB/s at 16 GiB" (the source rounds it): recorded, warned, never failed.
    Reference("allreduce_busbw", "p6-b300.48xlarge", 2, 654.0, _PCS_TESTS + ", 2x p6-b300 run",
              _NCCL_TOOL, size_bytes=16 * GIB, strict=False, note="2 nodes; approximate (~654)"),
    # Published range 63-72 GB/s for dispatch; the low end is the reference.
    Reference("ep_dispatch", "p5en.48xlarge", 2, 63.0, _DEEPEP, _DEEPEP_TOOL, ep_shape=DEEPEP_SHAPE,
              backends=("deepep-nvshmem",), note="EP16; published range 63-72 GB/s"),
    Reference("ep_combine", "p5en.48xlarge", 2, 59.0, _DEEPEP, _DEEPEP_TOOL, ep_shape=DEEPEP_SHAPE,
              backends=("deepep-nvshmem",), note="EP16"),
    Reference("ep_dispatch", "p5.48xlarge", 4, 44.0, _DEEPEP, _DEEPEP_TOOL, ep_shape=DEEPEP_SHAPE,
              backends=("deepep-nvshmem",), note="EP32"),
    Reference("ep_combine", "p5.48xlarge", 4, 46.0, _DEEPEP, _DEEPEP_TOOL, ep_shape=DEEPEP_SHAPE,
              backends=("deepep-nvshmem",), note="EP32"),
)

# Published figures that are NOT like anything the gate measures, kept so nobody gates on them by
# mistake: nccl-tests alltoall_perf busbw counts bytes differently from DeepEP's accounting, and
# DeepEP V2 over NCCL GIN has no published EFA figure (its V1 numbers are a different kernel).
CONTEXT_ONLY: tuple[tuple[str, str], ...] = (
    ("NCCL all-to-all bus bandwidth, 8x p5.48xlarge, 64 MiB: ~40 GB/s",
     "nccl-tests alltoall_perf busbw [design.md]; not DeepEP's accounting, so the gate records the "
     "NCCL EP backend's numbers only"),
    ("DeepEP V2 over NCCL GIN on EFA", "no published figure: the gate records deepep-gin's numbers only"),
)


def allreduce_references(instance_type: str, nodes: int) -> list[Reference]:
    """All-reduce figures for this instance type (busbw holds across node counts >= 2)."""
    if nodes < 2:
        return []
    return [r for r in REFERENCES
            if r.metric == "allreduce_busbw" and r.instance_type == instance_type]


def ep_references(instance_type: str, nodes: int, backend: str,
                  shape: tuple[int, int, int, int] | None = None) -> list[Reference]:
    """Dispatch/combine figures for exactly this instance type, node count, EP backend and (when
    given) benchmark shape (tokens_per_rank, hidden, topk, experts)."""
    return [r for r in REFERENCES
            if r.metric in ("ep_dispatch", "ep_combine") and r.instance_type == instance_type
            and r.nodes == nodes and backend in r.backends
            and (shape is None or r.ep_shape == tuple(shape))]


def socket_suspect_GBps(instance_type: str, network_gbps: int) -> float:
    """All-reduce busbw below which NCCL has most likely fallen back to TCP sockets."""
    refs = [r for r in REFERENCES
            if r.metric == "allreduce_busbw" and r.instance_type == instance_type]
    if refs:
        return round(min(r.published_GBps for r in refs) * SOCKET_SUSPECT_FRACTION, 2)
    return round(network_gbps / 8 * SOCKET_SUSPECT_NETWORK_FRACTION, 2)

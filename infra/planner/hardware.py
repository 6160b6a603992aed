"""The planner's systems: an EC2 instance type (from the catalogs) plus its fabric model, or a
reference InfiniBand system used only to validate the model against published runs.

GPU peaks and achievable fractions come from ``infra.catalog.gpus``, instance facts and prices
from ``infra.catalog.instances``. A system is built when asked for, so an instance type whose GPU
model has no record is a ``PlannerError`` for that type, never an import-time failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog.gpus import GPUS, Efficiency, GpuSpec
from infra.catalog.instances import INSTANCE_TYPES, PRICE_DATE
from infra.planner.errors import PlannerError

GB = 1e9
GIB = 1024**3

__all__ = ["GB", "GIB", "PRICE_DATE", "Fabric", "REFERENCE_SYSTEMS", "System", "get_system",
           "plannable_systems"]


# --- expert all-to-all over the scale-out fabric ------------------------------------------------


@dataclass(frozen=True)
class Fabric:
    """Inter-node all-to-all model: time = latency(nodes) + inter-node bytes / rate per GPU.

    ``a2a_gbps`` is the asymptotic rate at which one GPU's inter-node all-to-all bytes leave it;
    ``a2a_latency_ms`` + ``a2a_latency_per_node_ms`` * (nodes - 1) is the fixed part of one
    all-to-all call spanning ``nodes`` nodes.
    """

    kind: str  # "efa" or "infiniband"
    line_rate_gbps: float  # GB/s per GPU (network bandwidth of the node / GPUs)
    a2a_gbps: float
    a2a_latency_ms: float
    a2a_latency_per_node_ms: float
    source: str


# p5 (EFA, NCCL all-to-all), from awslabs/awsome-distributed-ai
# micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS-p5.md (2026-06-22):
#   8 nodes (64 ranks): busbw 40.4 GB/s at the ~64 MiB EP payload, 51.1 GB/s asymptotic;
#   4 nodes (32 ranks): busbw 45.1 GB/s at ~64 MiB, 53.9 GB/s asymptotic.
# nccl-tests reports busbw = (S/t) * (n-1)/n for an all-to-all of S bytes per rank, so
# t = S*(n-1)/(n*busbw). The inter-node share of S is (n-8)/n. Asymptotic inter-node rates:
# 51.1*(64/63)*(56/64) = 45.4 GB/s (8 nodes) and 53.9*(32/31)*(24/32) = 41.7 GB/s (4 nodes):
# mean 43.5 GB/s, 87% of the 50 GB/s per-GPU line rate (3,200 Gbps / 8 GPUs). The gap between
# matched-size and asymptotic times is the fixed cost: 0.34 ms at 8 nodes, 0.235 ms at 4 nodes,
# i.e. 0.156 ms + 0.026 ms per extra node.
_EFA_P5_SOURCE = ("awslabs/awsome-distributed-ai ep-backend-comparison RESULTS-p5.md: NCCL "
                  "all_to_all busbw 45.1/53.9 GB/s (4 nodes), 40.4/51.1 GB/s (8 nodes)")


def _efa_fabric(efa_bandwidth_gbps: int, gpus: int) -> Fabric:
    line = efa_bandwidth_gbps / 8 / gpus  # Gbit/s per node -> GB/s per GPU
    # The p5 fractions are applied to every EFA instance by line rate. p5en and p6-b200 have
    # the same 3,200 Gbps as p5; p6-b300 has 6,400 Gbps. Assumption until measured per type.
    return Fabric("efa", line, 0.87 * line, 0.156, 0.026, _EFA_P5_SOURCE)


@dataclass(frozen=True)
class System:
    """A node type the planner can size: GPUs, memory, fabric, price."""

    name: str
    gpu: GpuSpec
    gpus_per_node: int
    gpu_memory_gib: float  # usable per GPU: what layouts must fit (GpuSpec.usable_memory_gib)
    fabric: Fabric
    price_per_hour: float | None  # on-demand USD per node-hour; None = no public on-demand price
    price_source: str
    plannable: bool = True  # False: a validation reference, not an EC2 instance type
    # GPUs one NVLink domain holds (catalog InstanceType.nvlink_domain_gpus); 0 = one node
    nvlink_domain_gpus: int = 0
    # the UltraServer type that NVLink domain is (catalog InstanceType.ultraservers); "" for none
    ultraserver: str = ""
    # the nominal size per GPU (EC2's GpuInfo, or the reference system's datasheet), for display;
    # 0 = gpu_memory_gib
    gpu_nominal_memory_gib: float = 0.0

    @property
    def nominal_memory_gib(self) -> float:
        return self.gpu_nominal_memory_gib or self.gpu_memory_gib

    @property
    def efficiency(self) -> Efficiency:
        return self.gpu.efficiency

    @property
    def nvlink_busbw_gbps(self) -> float:
        """Achievable one-direction NVLink bandwidth per GPU inside a node (GB/s)."""
        return self.gpu.nvlink_gbps_bidir / 2 * self.efficiency.nvlink

    @property
    def nvlink_gpus(self) -> int:
        """GPUs reachable over NVLink from one GPU: the node for HGX types, the whole NVLink
        domain (up to 72 GPUs) for an NVL72 UltraServer. Tensor and expert parallel groups are
        placed inside it first; only what does not fit crosses the scale-out fabric."""
        return self.nvlink_domain_gpus or self.gpus_per_node

    @property
    def domain_instances(self) -> int:
        """Instances one NVLink domain spans: 1 for HGX types, the UltraServer's size else."""
        return max(1, self.nvlink_domain_gpus // self.gpus_per_node)

    def describe_domain(self) -> str:
        """'u-p6e-gb200x72, 18 instances' (from the catalog), for messages."""
        name = f"{self.ultraserver}, " if self.ultraserver else ""
        return f"{name}{self.domain_instances} instances"

    @property
    def max_run_nodes(self) -> int | None:
        """The most nodes one kit run may use: a run on a multi-node NVLink type stays inside
        one domain (its workers claim one ComputeDomain; infra/config/ultraserver.py refuses
        more). None where nodes are not capped (HGX types, reference systems)."""
        return self.domain_instances if self.plannable and self.domain_instances > 1 else None

    def domain_cap_problem(self, nodes: int) -> str | None:
        """Why ``nodes`` is too many for one run on this system (see ``max_run_nodes``)."""
        cap = self.max_run_nodes
        if cap is None or nodes <= cap:
            return None
        return (f"a run on {self.name} stays inside one NVLink domain ({self.describe_domain()}): "
                "its workers claim one ComputeDomain, and the kit does not run across domains")

    @property
    def family(self) -> str:
        return self.name.split(".")[0]


def _ec2_system(name: str, ultraserver_type: str | None = None) -> System:
    """The system of catalog instance type ``name`` (prices and source from its entry). On a type
    sold as UltraServers the NVLink domain is ``ultraserver_type``'s (catalog
    ``InstanceType.ultraservers``), by default the catalog's ``nvlink_domain_instances``."""
    it = INSTANCE_TYPES[name]
    gpu = GPUS.get(it.gpu_model)
    if gpu is None:
        raise PlannerError(
            f"cannot plan for {name}: its GPU model {it.gpu_model!r} has no record in the GPU "
            f"catalog (infra/catalog/gpus.py; known: {', '.join(GPUS)}); add one")
    kinds = dict(it.ultraservers)
    if ultraserver_type is not None and ultraserver_type not in kinds:
        raise PlannerError(
            f"ultraserver type {ultraserver_type!r}: {name} is not sold as it; "
            + (f"use one of {', '.join(kinds)}" if kinds else "it is no UltraServer type"))
    instances = kinds[ultraserver_type] if ultraserver_type else it.nvlink_domain_instances
    ultraserver = ultraserver_type or next((k for k, n in it.ultraservers if n == instances), "")
    return System(
        name=name, gpu=gpu, gpus_per_node=it.gpu_count,
        gpu_memory_gib=gpu.usable_memory_gib, gpu_nominal_memory_gib=it.gpu_memory_gib,
        fabric=_efa_fabric(it.efa_bandwidth_gbps, it.gpu_count),
        price_per_hour=it.on_demand_usd_per_hour, price_source=it.price_source,
        nvlink_domain_gpus=it.gpu_count * instances, ultraserver=ultraserver,
    )


# Reference InfiniBand systems, for validation only:
# - dgx-h100-ib: DGX H100, 8x H100 80 GB, 8x 400 Gb/s ConnectX-7 (50 GB/s per GPU), the system of
#   the Megatron-LM MoE README ("8xH100 80GB HBM3, NVLink 4th Generation, InfiniBand 8x400
#   Gbit/s") and of the Megatron-Bridge performance summary (DGX-H100).
# - h800-ib: DeepSeek-V3 report section 3.1: 8x H800 per node, NVLink 160 GB/s, one 400 Gb/s IB
#   NIC per GPU (50 GB/s).
# Rates: DeepEP README (normal kernels, H800 + CX7 IB, 4096 tokens, hidden 7168, top-8): internode
# dispatch/combine reach 43-58 GB/s "RDMA bandwidth" at EP16-64; we take 45 GB/s (90% of line).
# IB latency per call is lower than EFA's: we take half the EFA fixed cost (assumption).
_IB = Fabric("infiniband", 50.0, 45.0, 0.08, 0.013,
             "DeepEP README normal-kernel internode bandwidth on H800 + CX7 400 Gb/s IB")
# - dgx-b200-ib / dgx-b300-ib: the DGX-B200 and DGX-B300 of the Megatron-Bridge performance
#   summary. DGX B200: 8x B200 (180 GB), 8x 400 Gb/s ConnectX-7 (50 GB/s per GPU), the same
#   compute network as DGX H100, so the same IB rates. DGX B300: 8x B300 (288 GB) with 800 Gb/s
#   ConnectX-8 per GPU (100 GB/s; eight 800G ports per the NVIDIA DGX B300 User Guide, as shown at
#   vengineer.hatenablog.com/entry/2025/12/06/080000, read 2026-11-30): rates scaled by line rate
#   (assumption, as for EFA types).
_IB_800 = Fabric("infiniband", 100.0, 90.0, 0.08, 0.013,
                 "DeepEP README IB rates scaled to 800 Gb/s ConnectX-8 per GPU (assumption)")
# - dgx-gb200-nvl72: the "DGX-GB200" of the Megatron-Bridge summary and the "GB200-NVL72" of
#   NeMo-RL's: GB200 NVL72 racks, 4 GPUs per compute tray, NVLink across the rack's 72 GPUs
#   (1.8 TB/s per GPU; ../shared/upstream/ultraservers.md section 7). GPU memory per GPU as the
#   catalog's p6e-gb200 (same GPU). Between racks the IB rates of DGX H100/B200 (50 GB/s per GPU):
#   an assumption, no source for the rack's scale-out network was read; runs of <= 72 GPUs never
#   use it.
# GPU memory: the GPU record's usable size, as for the EC2 types; the nominal size, for display,
# is the EC2 catalog's for the same GPU (p5 80, p6-b200 179, p6-b300 268, p6e-gb200 185 GiB; H800
# has the H100's 80 GB).
def _reference(name: str, gpu: str, gpus: int, nominal: float, fabric: Fabric,
               nvlink_domain_gpus: int = 0) -> System:
    return System(name, GPUS[gpu], gpus, GPUS[gpu].usable_memory_gib, fabric, None,
                  "reference system, no price", plannable=False,
                  nvlink_domain_gpus=nvlink_domain_gpus, gpu_nominal_memory_gib=nominal)


REFERENCE_SYSTEMS: dict[str, System] = {
    "dgx-h100-ib": _reference("dgx-h100-ib", "H100", 8, 80, _IB),
    "h800-ib": _reference("h800-ib", "H800", 8, 80, _IB),
    "dgx-b200-ib": _reference("dgx-b200-ib", "B200", 8, 179, _IB),
    "dgx-b300-ib": _reference("dgx-b300-ib", "B300", 8, 268, _IB_800),
    "dgx-gb200-nvl72": _reference("dgx-gb200-nvl72", "GB200", 4,
                                  INSTANCE_TYPES["p6e-gb200.36xlarge"].gpu_memory_gib, _IB,
                                  nvlink_domain_gpus=72),
}


def plannable_systems() -> dict[str, System]:
    """A system for every catalog instance type whose GPU model has a record, built now (the
    catalog is read when asked, so an entry added later, or in a test, is seen)."""
    return {name: _ec2_system(name) for name, it in INSTANCE_TYPES.items()
            if it.gpu_model in GPUS}


def get_system(name: str, allow_reference: bool = False,
               ultraserver_type: str | None = None) -> System:
    """The plannable system for an EC2 instance type (or a reference system if allowed);
    ``ultraserver_type`` picks the NVLink domain of a type sold as UltraServers."""
    if name in INSTANCE_TYPES:
        return _ec2_system(name, ultraserver_type)
    if allow_reference and name in REFERENCE_SYSTEMS:
        return REFERENCE_SYSTEMS[name]
    raise PlannerError(f"unknown instance type {name!r}; known: {', '.join(INSTANCE_TYPES)}")

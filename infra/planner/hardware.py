"""GPU peaks, achievable fractions, fabrics and prices: every hardware number the planner uses.

Three kinds of numbers live here, kept apart on purpose:

1. Datasheet peaks (``GPU_SPECS``): dense tensor-core TFLOPS (no 2:4 sparsity), HBM and NVLink
   bandwidth. Sources:
   - [h100]  NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 989 TFLOPS, FP8 1,979 TFLOPS dense
             (the datasheet's 1,979/3,958 figures are "with sparsity"), HBM3 3.35 TB/s,
             NVLink 900 GB/s (bidirectional).
   - [h800]  H800 SXM5: same GH100 die and clocks as H100 SXM5, NVLink cut to 400 GB/s; the
             DeepSeek-V3 report (arXiv 2412.19437, section 3.1) quotes 160 GB/s achievable NVLink.
   - [h200]  NVIDIA H200 datasheet: same compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
   - [b200]  HGX B200 (1,000 W) per GPU: BF16 2,250 / FP8 4,500 TFLOPS dense, HBM3e 8 TB/s,
             NVLink 5 1.8 TB/s (NVIDIA HGX platform page; tabulated per GPU at
             glennklockwood.com/garden/processors/B200).
   - [b300]  HGX B300: BF16 2,250 / FP8 4,500 TFLOPS dense (FP4 is what grew), HBM3e 8 TB/s,
             NVLink 5 1.8 TB/s (glennklockwood.com/garden/processors/B300).

2. Achievable fractions (``EFFICIENCY``): one small set of calibrated constants per GPU type,
   documented below and in docs/planner.md. They are not fitted per data point: Hopper
   (H100/H800/H200, one die) shares one set; Blackwell (B200/B300) has its own GEMM fractions,
   calibrated on Megatron-Bridge's published DGX-B200/DGX-B300 MXFP8 runs, and Hopper's others.

3. Fabric and price per system (``SYSTEMS``): EC2 instance types come from ``infra.catalog``
   (GPU model, count, memory, EFA bandwidth) plus measured all-to-all rates; four reference
   InfiniBand systems (DGX H100, DeepSeek's H800 cluster, DGX B200, DGX B300) exist only to
   validate the model against published runs and cannot be planned for.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog import INSTANCE_TYPES
from infra.planner.errors import PlannerError

GB = 1e9
GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense
    hbm_tbps: float
    nvlink_gbps_bidir: float  # GB/s, both directions together, per GPU
    sms: int


GPU_SPECS: dict[str, GpuSpec] = {
    "H100": GpuSpec("H100", 989.4, 1978.9, 3.35, 900, 132),  # [h100]
    "H800": GpuSpec("H800", 989.4, 1978.9, 3.35, 400, 132),  # [h800]
    "H200": GpuSpec("H200", 989.4, 1978.9, 4.8, 900, 132),  # [h200]
    "B200": GpuSpec("B200", 2250.0, 4500.0, 8.0, 1800, 148),  # [b200]
    "B300": GpuSpec("B300", 2250.0, 4500.0, 8.0, 1800, 160),  # [b300]
}


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks, per GPU type (see module docstring).

    gemm_bf16 / gemm_fp8: fraction of dense peak a large GEMM sustains inside a training step
        (cuBLAS/TE grouped GEMMs, including the FP8 quantise/scale kernels' share for fp8).
    attention: fraction of BF16 peak for fused flash attention (forward and backward together).
    hbm: fraction of HBM bandwidth reached by memory-bound kernels (norms, SwiGLU, permutes).
    nvlink: fraction of one-direction NVLink bandwidth an all-gather / reduce-scatter /
        all-to-all inside a node sustains (bus bandwidth).
    layer_overhead_us: fixed host/launch cost per transformer layer per microbatch, forward and
        backward together (dozens of small kernels per MoE layer whose launch latency does not
        shrink with the layer).
    """

    gemm_bf16: float
    gemm_fp8: float
    attention: float
    hbm: float
    nvlink: float
    layer_overhead_us: float
    gemm_mxfp8: float | None = None  # None: no hardware microscaling (Hopper)

    @property
    def supports_mxfp8(self) -> bool:
        return self.gemm_mxfp8 is not None


# Calibration, stated once (docs/planner.md "Calibration"). One Hopper set, chosen from the
# published runs in tests/test_planner_validation.py and kept round; none is per data point:
# - gemm_bf16 0.66 (653 TFLOPS on H100): BF16 GEMMs at MoE shapes. cuBLAS measures 650-750
#   TFLOPS on H100 at these sizes; Mixtral 8x7B (large experts, all-to-all on NVLink) reaching
#   468 model TFLOPS needs about this once attention, memory-bound kernels and the bubble are
#   counted separately.
# - gemm_fp8 0.45 (890 TFLOPS): FP8 GEMMs including the scaling/quantisation work TE or
#   DeepSeek's tile-wise kernels add. Both FP8 DeepSeek-V3 runs (Megatron-Bridge on H100,
#   DeepSeek on H800) sit at 340-400 model TFLOPS, far below 2x their BF16 equivalent.
# - attention 0.45: flash attention forward+backward at head dims 128-192 on H100 (FA2/cuDNN).
# - hbm 0.70 and nvlink 0.80: typical bus efficiencies (nccl-tests all_gather on 8x H100 reaches
#   ~360 of 450 GB/s; DeepEP reports 153-158 of 160 GB/s NVLink on H800).
# - layer_overhead_us 1200: fixed host-side cost per layer per micro-batch (forward+backward).
#   Megatron's all-to-all dispatcher synchronises with the host in every MoE layer to size its
#   all-to-all, and each MoE layer launches dozens of small kernels (router, top-k, permute,
#   grouped GEMM setup, unpermute) whose launch latency is exposed after the sync. Calibrated on
#   the two Qwen3-30B-A3B runs on 8x p5 (48 thin layers, where it is ~40% of the step); it moves
#   Mixtral by ~4% and the DeepSeek-V3 runs by 3-5%.
# Blackwell GEMM fractions. gemm_mxfp8 0.29 (1,305 of 4,500 TFLOPS) is the one fitted number: the
# round value that keeps the five in-sample Megatron-Bridge DGX-B200/B300 MXFP8 points within 30%
# (median 12%; the four out-of-sample points: median 4%). Blackwell MoE training sits lower
# against its peak than Hopper does (DeepSeek-V3: 699 of 4,500 model TFLOPS on B200 vs 338 of
# 1,979 on H100). No BF16 or FP8 (non-MX) Blackwell
# MoE point for a catalog model exists on an 8-GPU DGX, so gemm_fp8 takes the MXFP8 value (same
# tensor-core rate) and gemm_bf16 scales Hopper's 0.66 by the same Blackwell/Hopper ratio
# (0.29/0.45): 0.42. Both are assumptions, marked as such in docs/planner.md.
BLACKWELL_GEMM_MXFP8 = 0.29
BLACKWELL_GEMM_FP8 = 0.29
BLACKWELL_GEMM_BF16 = 0.42
_HOPPER = Efficiency(gemm_bf16=0.66, gemm_fp8=0.45, attention=0.45, hbm=0.70, nvlink=0.80,
                     layer_overhead_us=1200.0)
# Blackwell (B200, B300: one die family), calibrated on the in-sample Megatron-Bridge DGX-B200 /
# DGX-B300 points of tests/test_planner_validation.py (docs/planner.md "Calibration"):
# - gemm_bf16 / gemm_fp8 / gemm_mxfp8: BLACKWELL_GEMM_* above.
# - attention, hbm, nvlink: Hopper's values (cuDNN flash attention and NCCL reach similar
#   fractions; nothing published separates them on Blackwell).
# - layer_overhead_us: launch and host-sync costs per layer do not shrink with a faster GPU;
#   kept at the Hopper value.
_BLACKWELL = Efficiency(gemm_bf16=BLACKWELL_GEMM_BF16, gemm_fp8=BLACKWELL_GEMM_FP8,
                        attention=0.45, hbm=0.70, nvlink=0.80, layer_overhead_us=1200.0,
                        gemm_mxfp8=BLACKWELL_GEMM_MXFP8)
EFFICIENCY: dict[str, Efficiency] = {
    "H100": _HOPPER,
    "H800": _HOPPER,
    "H200": _HOPPER,
    "B200": _BLACKWELL,
    "B300": _BLACKWELL,
}


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
    gpu_memory_gib: float
    fabric: Fabric
    price_per_hour: float | None  # on-demand USD per node-hour; None = no public on-demand price
    price_source: str
    plannable: bool = True  # False: a validation reference, not an EC2 instance type

    @property
    def efficiency(self) -> Efficiency:
        return EFFICIENCY[self.gpu.name]

    @property
    def nvlink_busbw_gbps(self) -> float:
        """Achievable one-direction NVLink bandwidth per GPU inside a node (GB/s)."""
        return self.gpu.nvlink_gbps_bidir / 2 * self.efficiency.nvlink

    @property
    def family(self) -> str:
        return self.name.split(".")[0]


# On-demand Linux prices, US East (N. Virginia), USD per instance-hour, as listed on the Amazon EC2
# On-Demand pricing page after AWS's June 2025 GPU price reduction ("up to 45% price reduction for
# P5 and P5en", AWS What's New, 2025-06-05). Dated 2025-06; prices change: verify with
#   aws pricing get-products --service-code AmazonEC2 --filters Type=TERM_MATCH,Field=instanceType,Value=<type>
# p5e.48xlarge and p6-b300.48xlarge are sold through Capacity Blocks / reservations and have no
# public on-demand price we could verify: pass --price-per-hour for them.
PRICE_DATE = "2025-06"
ON_DEMAND_USD_PER_HOUR: dict[str, float | None] = {
    "p5.48xlarge": 55.04,
    "p5e.48xlarge": None,
    "p5en.48xlarge": 63.296,
    "p6-b200.48xlarge": 113.9328,
    "p6-b300.48xlarge": None,
}
# Not re-read from the AWS price list (no AWS access from the build environment, and no copy of
# the price list for these types in the sources we could search on 2026-11-30): flagged verify.
_PRICE_SOURCE = (f"Amazon EC2 On-Demand pricing, us-east-1, Linux, after the 2025-06-05 GPU price "
                 f"reduction (as of {PRICE_DATE}; unverified: check with aws pricing "
                 f"get-products or pass --price-per-hour)")


def _ec2_system(name: str) -> System:
    it = INSTANCE_TYPES[name]
    return System(
        name=name, gpu=GPU_SPECS[it.gpu_model], gpus_per_node=it.gpu_count,
        gpu_memory_gib=it.gpu_memory_gib, fabric=_efa_fabric(it.efa_bandwidth_gbps, it.gpu_count),
        price_per_hour=ON_DEMAND_USD_PER_HOUR.get(name), price_source=_PRICE_SOURCE,
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
REFERENCE_SYSTEMS: dict[str, System] = {
    "dgx-h100-ib": System("dgx-h100-ib", GPU_SPECS["H100"], 8, 80, _IB, None,
                          "reference system, no price", plannable=False),
    "h800-ib": System("h800-ib", GPU_SPECS["H800"], 8, 80, _IB, None,
                      "reference system, no price", plannable=False),
    "dgx-b200-ib": System("dgx-b200-ib", GPU_SPECS["B200"], 8, 179, _IB, None,
                          "reference system, no price", plannable=False),
    "dgx-b300-ib": System("dgx-b300-ib", GPU_SPECS["B300"], 8, 268, _IB_800, None,
                          "reference system, no price", plannable=False),
}

SYSTEMS: dict[str, System] = {name: _ec2_system(name) for name in INSTANCE_TYPES}


def get_system(name: str, allow_reference: bool = False) -> System:
    """The plannable system for an EC2 instance type (or a reference system if allowed)."""
    if name in SYSTEMS:
        return SYSTEMS[name]
    if allow_reference and name in REFERENCE_SYSTEMS:
        return REFERENCE_SYSTEMS[name]
    raise PlannerError(f"unknown instance type {name!r}; known: {', '.join(SYSTEMS)}")

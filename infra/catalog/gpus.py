"""The GPU catalog: one record per GPU model (datasheet peaks, achievable fractions, CUDA arch).

An instance type in ``infra/catalog/instances.py`` names its GPU model; that model needs one
record here (``GPUS``). Config validation reports an instance type whose GPU has no record; the
planner reads the record to size layouts; a test checks that the trainer image's
``TORCH_CUDA_ARCH_LIST`` covers every record's ``cuda_arch``.

Two kinds of numbers live here, kept apart on purpose:

1. Datasheet peaks: dense tensor-core TFLOPS (no 2:4 sparsity), HBM and NVLink bandwidth.
   Sources:
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
   - [gb200] The Blackwell GPU of a GB200 NVL72 (up to 1,200 W): BF16 2,500 / FP8 5,000 TFLOPS
             dense (NVIDIA's GB200 NVL72 table gives 5 / 10 PFLOPS per GPU "with sparsity"; dense
             values tabulated at glennklockwood.com/garden/processors/B200, "GB200 variant of B200
             when configured to 1,200 W"), HBM3e 8 TB/s, NVLink 5 1.8 TB/s per GPU (also the
             NVIDIA DRA driver docs: "1.8 TB/s chip-to-chip", ../shared/upstream/ultraservers.md
             section 7). SMs: B200's 148 (same die; no separate GB200 count was read). Compute
             capability 10.0 (sm_100, the B200 die; ADT's GB200 nccl-tests image targets sm_100).
             Its NVLink reaches the whole UltraServer (72 GPUs), which the instance catalog's
             ``nvlink_domain_instances`` carries, not this record.
   - [cuda]  CUDA compute capability per GPU (NVIDIA "CUDA GPUs" table): Hopper 9.0, B200 10.0,
             B300 10.3.
   - [mem]   Usable memory (``usable_memory_gib``): what CUDA reports as the device's total
             (cudaMemGetInfo / totalGlobalMem). It is below nvidia-smi's total, which is itself
             about the nominal size EC2 and the datasheets give or below it (the driver keeps part
             of the HBM). The planner fits layouts against it; the CUDA context and workspaces
             come out of it as the planner's runtime reserve. Read 2026-12-02; every source
             below is a public printout, none a datasheet (NVIDIA publishes only the nominal
             size):
             H100: CUDA total 85,045,477,376 B = 79.21 GiB, nvidia-smi 81,559 MiB on the same
               8x H100 SXM node, driver 565.57.01 (thamada/nvidia-smi@c4c8a463a61e,
               gls/H100SXMx8_deviceQuery.py and gls/H100SXMx8_smi.py, 2024-11-15); nvidia-smi
               81,559 MiB also in NVIDIA/nccl#1264 (driver 550.54.15). H800 has the same 80 GB
               HBM3 and takes the H100 value (no printout read).
             B200: CUDA "Total Global Memory" 178.35 (printed as GB; read as GiB, since 178.35e9
               bytes would be 14 GiB under nvidia-smi's total) in pytorch/ao#4002 (2026-03-05);
               nvidia-smi 183,359 MiB in NVIDIA/TensorRT-LLM#10278 (driver 580.95.05,
               2025-12-24), the same figure as EC2's GpuInfo.
             H200, B300, GB200: no public CUDA total was found, so nvidia-smi's total less 0.75
               GiB, the larger of the two gaps measured above (H100 0.44 GiB, B200 0.71 GiB): an
               estimate. nvidia-smi totals: B300 275,040 MiB and GB200 189,471 MiB, both "reported
               by nvidia-smi" in NVIDIA's ai-dynamo/aiconfigurator@095f58a51c4c (2026-08-21,
               aic-core/src/aiconfigurator_core/systems/b300_sxm.yaml, gb200.yaml; B300 also
               EC2's GpuInfo); H200 143,771 MiB from public nvidia-smi printouts only (the weakest
               source here: no first-party or attributable page was found).

2. Achievable fractions (``Efficiency``): one small set of calibrated constants per GPU family,
   documented below and in docs/planner.md. They are not fitted per data point: Hopper
   (H100/H800/H200, one die) shares one set; Blackwell (B200/B300) has its own GEMM fractions,
   calibrated on Megatron-Bridge's published DGX-B200/DGX-B300 MXFP8 runs, and Hopper's others.
   GB200 has its own GEMM fractions, calibrated on Megatron-Bridge's DGX-GB200 runs (below).

Part of the ground layer: no CDK, nothing from the planner (which reads this module).
"""

from __future__ import annotations

from dataclasses import dataclass

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
# published runs in tests/planner/test_planner_validation.py and kept round; none is per data point:
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
# DGX-B300 points of tests/planner/test_planner_validation.py (docs/planner.md "Calibration"):
# - gemm_bf16 / gemm_fp8 / gemm_mxfp8: BLACKWELL_GEMM_* above.
# - attention, hbm, nvlink: Hopper's values (cuDNN flash attention and NCCL reach similar
#   fractions; nothing published separates them on Blackwell).
# - layer_overhead_us: launch and host-sync costs per layer do not shrink with a faster GPU;
#   kept at the Hopper value.
_BLACKWELL = Efficiency(gemm_bf16=BLACKWELL_GEMM_BF16, gemm_fp8=BLACKWELL_GEMM_FP8,
                        attention=0.45, hbm=0.70, nvlink=0.80, layer_overhead_us=1200.0,
                        gemm_mxfp8=BLACKWELL_GEMM_MXFP8)

# GB200 (NVL72), calibrated on the three 26.02 DGX-GB200 points of
# tests/planner/test_planner_gb200_validation.py (Megatron-Bridge docs/performance-summary-
# archive.md @ 067f987). GB200 MoE training sits higher against its peak than DGX-B200 does:
# the same table's DeepSeek-V3 MXFP8 rows give 1,028 model TFLOPS of 5,000 on GB200 (20.6%) and
# 699 of 4,500 on B200 (15.5%), and with Blackwell's 0.29 the three points came out 6-26% slow.
# gemm_mxfp8 0.35 is the round value that brings their median under 15% (14.1%, max 19.1%); the
# five held-out points (25.11, and 26.06 with release mb-26.06): median 9.9%, max 20.7%.
# gemm_fp8 takes the same value, gemm_bf16 the Hopper ratio (0.66 x 0.35 / 0.45 = 0.51), as for
# B200/B300; attention, HBM, NVLink and the per-layer overhead are Blackwell's (not fitted).
GB200_GEMM_MXFP8 = 0.35
_GB200 = Efficiency(gemm_bf16=0.51, gemm_fp8=GB200_GEMM_MXFP8, attention=0.45, hbm=0.70,
                    nvlink=0.80, layer_overhead_us=1200.0, gemm_mxfp8=GB200_GEMM_MXFP8)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: what the planner sizes with and what the image must be compiled for."""

    name: str
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense
    hbm_tbps: float
    nvlink_gbps_bidir: float  # GB/s, both directions together, per GPU
    sms: int
    efficiency: Efficiency
    cuda_arch: str  # compute capability as TORCH_CUDA_ARCH_LIST writes it [cuda]
    # GiB per GPU that CUDA can hand out [mem]: what the planner fits layouts against. The
    # instance catalog's gpu_memory_gib is the nominal size EC2 gives, for display only.
    usable_memory_gib: float


_MIB = 1 / 1024  # GiB per MiB
_NVSMI_TO_CUDA_GIB = 0.75  # nvidia-smi total less this, where no CUDA total was read [mem]


# One record per GPU model. H800 is no EC2 GPU: the DeepSeek-V3 report's reference system uses it.
GPUS: dict[str, GpuSpec] = {
    "H100": GpuSpec("H100", 989.4, 1978.9, 3.35, 900, 132, _HOPPER, "9.0",  # [h100]
                    usable_memory_gib=85_045_477_376 / 2**30),  # [mem] CUDA total
    "H800": GpuSpec("H800", 989.4, 1978.9, 3.35, 400, 132, _HOPPER, "9.0",  # [h800]
                    usable_memory_gib=85_045_477_376 / 2**30),  # [mem] as H100
    "H200": GpuSpec("H200", 989.4, 1978.9, 4.8, 900, 132, _HOPPER, "9.0",  # [h200]
                    usable_memory_gib=143_771 * _MIB - _NVSMI_TO_CUDA_GIB),  # [mem] estimate
    "B200": GpuSpec("B200", 2250.0, 4500.0, 8.0, 1800, 148, _BLACKWELL, "10.0",  # [b200]
                    usable_memory_gib=178.35),  # [mem] CUDA total
    "B300": GpuSpec("B300", 2250.0, 4500.0, 8.0, 1800, 160, _BLACKWELL, "10.3",  # [b300]
                    usable_memory_gib=275_040 * _MIB - _NVSMI_TO_CUDA_GIB),  # [mem] estimate
    # own GEMM fractions, calibrated on published DGX-GB200 runs (_GB200 above)
    "GB200": GpuSpec("GB200", 2500.0, 5000.0, 8.0, 1800, 148, _GB200, "10.0",  # [gb200]
                     usable_memory_gib=189_471 * _MIB - _NVSMI_TO_CUDA_GIB),  # [mem] estimate
}
GPU_SPECS = GPUS  # the planner's name for the same table

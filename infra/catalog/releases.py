"""Software releases the planner's training-step model can assume, and what each changes.

The GPU fractions in ``infra/catalog/gpus.py`` were calibrated on runs of one software era:
Megatron-Core MoE with the expert all-to-all exposed, no full-iteration CUDA graphs (a host
synchronisation and dozens of kernel launches per MoE layer) and separate permute / grouped GEMM
/ SwiGLU / unpermute kernels. That is ``BASELINE``, the planner's default, and what the kit's
launcher runs (Miles v0.1.0's train.py arguments set none of the features below).

Published Megatron-Bridge throughput for Qwen3-30B-A3B on one 8-GPU DGX-B300 node (MXFP8, EP8,
MBS 8, GBS 512) stayed at 29,454-30,720 tokens/s/GPU from the 26.02 to the 26.04.01 container
and rose to 40,769 in 26.06 (docs/performance-summary-archive.md, NVIDIA-NeMo/Megatron-Bridge @
067f987). The recipe is what moved: scripts/performance/configs/qwen/
qwen3_workload_base_configs.py sets ``QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1`` to the FP8
current-scaling preset (HybridEP dispatcher, CUDA graphs of the router and preprocessing only)
at c76eae6 (the last change before 2026-04-20), and adds ``moe_a2a_overlap=True``,
``cuda_graph_impl="full_iteration"``, ``cutedsl_fused_grouped_mlp=True`` and
``fp8_dot_product_attention=True`` at 63b08b3 (the "26.06 perf summary" commit, 2026-06-15).
Those four switches are the regime small MoE models on one NVLink domain are bound by: thin
per-expert GEMMs wrapped in memory-bound kernels, per-layer launch costs, and an all-to-all that
is a large share of a short layer. ``MB_2606`` models each one; nothing in it is fitted except
``GRAPHED_LAYER_OVERHEAD_US``, an estimate.

Part of the ground layer: no CDK, nothing from the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per layer and micro-batch under a full-iteration CUDA graph: replay leaves no host launch or
# synchronisation per kernel, only the graph's own scheduling gaps. An estimate (no published
# per-layer figure); the eager cost is the GPU family's Efficiency.layer_overhead_us.
GRAPHED_LAYER_OVERHEAD_US = 100.0


@dataclass(frozen=True)
class SoftwareRelease:
    """What a software release changes in the training-step model (see the module docstring).

    cuda_graphs: full-iteration CUDA graphs; the per-layer host cost drops to
        GRAPHED_LAYER_OVERHEAD_US.
    a2a_overlap: the expert all-to-all overlaps the other micro-batch's compute (Megatron
        ``--overlap-moe-expert-parallel-comm``), as the ``a2a-overlap`` schedule models it.
    fused_grouped_mlp: permute, both grouped GEMMs, SwiGLU and unpermute run as one kernel
        (Transformer Engine's cuteDSL fused grouped MLP), so their intermediate tensors never
        make a round trip through HBM.
    fp8_attention: under FP8/MXFP8 training the attention core runs at the FP8 rate.
    """

    key: str
    name: str
    source: str
    cuda_graphs: bool = False
    a2a_overlap: bool = False
    fused_grouped_mlp: bool = False
    fp8_attention: bool = False


BASELINE = SoftwareRelease(
    "baseline", "Megatron-Core MoE as calibrated (Megatron-Bridge containers 25.09 to 26.04.01; "
    "the kit's Miles v0.1.0 launcher)",
    "the calibration points of tests/planner/test_planner_validation.py (each names its release)")
MB_2606 = SoftwareRelease(
    "mb-26.06", "Megatron-Bridge 26.06 Blackwell MXFP8 MoE recipe",
    "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py "
    "@ 63b08b3 (QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1)",
    cuda_graphs=True, a2a_overlap=True, fused_grouped_mlp=True, fp8_attention=True)
RELEASES: dict[str, SoftwareRelease] = {r.key: r for r in (BASELINE, MB_2606)}

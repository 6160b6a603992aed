"""Time of one training step for one layout: compute, communication, pipeline bubble.

The step is built bottom-up for one GPU of the most loaded pipeline stage:

1. Per micro-batch and layer, on one GPU:
   - GEMMs: 2*M*K*N FLOPs at ``peak * gemm_eff`` plus their operand traffic at ``HBM * hbm_eff``
     (an additive roofline, so thin GEMMs such as small experts cost more per FLOP). Backward
     costs twice the forward. Routed experts run as grouped GEMMs with
     M = ep*etp*tokens*top_k/experts rows per local expert (balanced routing, times
     ``moe_imbalance`` for the slowest rank).
   - Attention core (flash attention, causal): heads*(d_qk+d_v)*seq FLOPs per token forward, 3x
     for forward+backward, at ``BF16 peak * attention_eff`` (attention stays BF16 under FP8).
   - Memory-bound kernels (norms, residual adds, SwiGLU, RoPE, MoE permute/unpermute, FP8 casts):
     bytes counted per token, at ``HBM * hbm_eff``.
   - A fixed per-layer host/launch cost (``layer_overhead_us``).
   - Tensor-parallel all-gather/reduce-scatter (sequence parallel) on NVLink: forward, backward.
   - Expert all-to-all: dispatch + combine forward, their transposes backward. Per call
     ``latency(nodes) + max(inter-node bytes / EFA or IB rate, intra-node bytes / NVLink rate)``.
     NCCL sends one copy per (token, expert) pair; DeepEP sends one copy per (token, remote
     node) and fans out over NVLink (DeepEP README), bounded by node-limited routing when the
     model uses it (DeepSeek-V3: at most 4 of 8 groups).
2. Overlap (explicit): schedule "1f1b" exposes all-to-all; "a2a-overlap" and "dualpipe" hide it
   behind another micro-batch's compute (exposed = max(0, a2a - compute)) and pay
   ``COMM_SMS`` streaming multiprocessors for it (DeepSeek-V3 report 3.2.2: 20 of 132 SMs).
   Tensor-parallel collectives are not overlapped. Pipeline send/receive is hidden with
   interleaving (vpp > 1) and exposed without. Data-parallel reduce-scatter / all-gather overlap
   the last micro-batch's backward / first micro-batch's forward (Megatron --overlap-grad-reduce /
   --overlap-param-gather); only the excess is exposed.
3. Step = micro-batches * stage time + bubble + exposed data-parallel traffic + optimizer.
   Bubble (1F1B, Narayanan et al. 2021): (pp-1)/vpp stage times; DualPipe: (pp/2-1). The
   micro-batches are the launcher's (``micro_batching``): token-capped under dynamic batching.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

from infra.planner.hardware import GB, System
from infra.planner.layout import Layout, TrainingSetup, fullest_stage_layers, is_fp8
from infra.planner.memory import stage_params
from infra.catalog.models import MoEModel
from infra.catalog.releases import GRAPHED_LAYER_OVERHEAD_US, RELEASES

COMM_SMS = 20  # SMs given to communication kernels when they overlap compute (DeepSeek-V3 3.2.2)
INTRA_NODE_A2A_LATENCY_MS = 0.03  # one all-to-all call inside a node over NVLink; estimate
P2P_LATENCY_MS = 0.02


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step and where they go (per GPU, most loaded stage)."""

    step: float
    compute: float  # GEMMs + attention + memory-bound kernels + per-layer overhead
    tp_comm: float
    ep_comm: float  # all-to-all time before overlap
    ep_comm_exposed: float
    pp_bubble: float
    pp_comm_exposed: float
    dp_comm_exposed: float
    optimizer: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float  # model TFLOPS / dense peak of the precision used
    micro_batches: int
    ep_span_nodes: int

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _gemm(system: System, flops_scale: float, M: float, K: float, N: float,
          fp8: str | bool) -> float:
    """Seconds for one forward GEMM M x K x N (times ``flops_scale`` copies); ``fp8`` is False
    for BF16, else the FP8 flavour ("fp8" or "mxfp8")."""
    eff = system.efficiency
    if fp8:
        frac = eff.gemm_mxfp8 if fp8 == "mxfp8" else eff.gemm_fp8
        peak = system.gpu.fp8_tflops * frac
    else:
        peak = system.gpu.bf16_tflops * eff.gemm_bf16
    b = 1 if fp8 else 2
    flops = 2.0 * M * K * N
    traffic = b * (M * K + K * N) + 2 * M * N
    return flops_scale * (flops / (peak * 1e12) + traffic / (system.gpu.hbm_tbps * 1e12 * eff.hbm))


def _hbm(system: System, nbytes: float) -> float:
    return nbytes / (system.gpu.hbm_tbps * 1e12 * system.efficiency.hbm)


def expected_remote_nodes(model: MoEModel, span: int, backend: str) -> float:
    """Copies of one token that cross the node boundary on dispatch (or combine)."""
    if span <= 1:
        return 0.0
    k = model.top_k
    if not backend.startswith("deepep"):
        return k * (span - 1) / span  # one copy per (token, expert) pair
    distinct = span * (1 - (1 - 1 / span) ** k)  # distinct nodes among k uniform picks
    if model.route_groups > 1:
        cap = math.ceil(model.route_group_topk * span / model.route_groups)
        distinct = min(distinct, max(cap, 1))
    return distinct * (span - 1) / span


def ep_span(L: Layout, gpus_per_node: int) -> tuple[int, int]:
    """(EP ranks inside one NVLink reach, reaches one EP group spans): expert groups are laid out
    etp innermost, then ep, on consecutive ranks (Megatron parallel folding), so they fill an
    NVLink domain before crossing the fabric. ``gpus_per_node`` is ``System.nvlink_gpus``: a node
    for HGX types, the NVLink domain for NVL72 (a span of 1 = all-to-all on NVLink only)."""
    local = max(1, min(L.ep, gpus_per_node // L.etp))
    return local, math.ceil(L.ep / local)


def layer_times(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
                backend: str, moe: bool) -> tuple[float, float, float]:
    """(compute, tp_comm, ep_comm) seconds of one layer for one micro-batch, forward+backward
    (+ recomputation), on one GPU."""
    eff = system.efficiency
    release = RELEASES[setup.release]
    fp8 = setup.precision if is_fp8(setup.precision) else False
    h = model.hidden
    tokens = L.mbs * setup.seq_len / L.cp
    t_loc = tokens / L.tp
    full_rc = L.recompute == "full"
    passes = 3.0 + (1.0 if full_rc else 0.0)  # fwd + 2x bwd (+ recomputed fwd)

    # --- GEMMs
    g = 0.0
    for i, o, split in model.attention_gemms():
        g += _gemm(system, passes, tokens, i, o / L.tp, fp8) if split else \
            _gemm(system, passes, t_loc, i, o, fp8)
    if not moe:
        f = model.dense_ffn
        g += _gemm(system, passes, tokens, h, 2 * f / L.tp, fp8)
        g += _gemm(system, passes, tokens, f / L.tp, h, fp8)
    else:
        k, E, fe = model.top_k, model.num_experts, model.expert_ffn
        local_experts = E / L.ep
        rows = L.ep * L.etp * t_loc * k / E * setup.moe_imbalance
        g += _gemm(system, passes * local_experts, rows, h, 2 * fe / L.etp, fp8)
        g += _gemm(system, passes * local_experts, rows, fe / L.etp, h, fp8)
        g += _gemm(system, passes, t_loc, h, E, False)  # router (kept in high precision)
        if model.num_shared_experts:
            fs = model.shared_expert_ffn * model.num_shared_experts
            g += _gemm(system, passes, tokens, h, 2 * fs / L.tp, fp8)
            g += _gemm(system, passes, tokens, fs / L.tp, h, fp8)

    # --- attention core (BF16 flash attention)
    attn_fwd = tokens * model.attention_core_flops_per_token(setup.seq_len) / L.tp
    attn_peak = system.gpu.fp8_tflops if (fp8 and release.fp8_attention) else system.gpu.bf16_tflops
    attn = passes * attn_fwd / (attn_peak * 1e12 * eff.attention)

    # --- memory-bound kernels: bytes per token, forward (backward ~2x)
    el = t_loc * 2 * 10 * h  # 2 RMSNorms (in/out) + 2 residual adds, BF16
    q_dims = model.num_heads * model.qk_head_dim
    kv_dims = model.kv_groups * (model.qk_head_dim + model.v_dim)
    el += tokens * 2 * 2 * (q_dims + kv_dims) / L.tp  # RoPE / layout copies of q, k, v
    if not moe:
        el += tokens * 2 * 3 * model.dense_ffn / L.tp  # SwiGLU: read 2f, write f
        casts = tokens * (2 * h + model.dense_ffn / L.tp)
    else:
        pairs = t_loc * model.top_k * setup.moe_imbalance
        if release.fused_grouped_mlp:  # one kernel: only its input and output cross HBM
            el += pairs * 2 * 2 * h * L.etp
            casts = pairs * h * L.etp + tokens * h
        else:
            el += pairs * 2 * (4 * h + 3 * model.expert_ffn / L.etp) * L.etp  # permute, unpermute, SwiGLU
            casts = pairs * (h * L.etp + model.expert_ffn) + tokens * h
        if model.num_shared_experts:
            fs = model.shared_expert_ffn * model.num_shared_experts
            el += tokens * 2 * 3 * fs / L.tp
    if fp8:  # quantise GEMM inputs: read BF16, write FP8 (+ transposed copy on Hopper)
        el += casts * (2 + 2)
    el_passes = 3.0 + (1.0 if L.recompute != "none" else 0.0)
    mem = _hbm(system, el * el_passes)

    overhead = GRAPHED_LAYER_OVERHEAD_US if release.cuda_graphs else eff.layer_overhead_us
    compute = g + attn + mem + overhead * 1e-6

    # --- tensor parallel (sequence parallel) collectives on NVLink
    tp = 0.0
    if L.tp > 1:
        full = tokens * h * 2  # bytes of the gathered activation
        collectives = 2  # attention: all-gather in, reduce-scatter out
        if not moe or model.num_shared_experts:
            collectives += 2
        per_pass = collectives * full * (L.tp - 1) / L.tp / (system.nvlink_busbw_gbps * GB)
        tp = per_pass * (2 + (1 if full_rc else 0))  # fwd + bwd (+ recompute)

    # --- expert all-to-all
    ep = 0.0
    if moe and L.ep > 1:
        ep = ep_all_to_all_time(model, system, L, setup, backend, t_loc) * (
            1.5 if full_rc else 1.0)
    if moe and L.etp > 1:  # gather / scatter the dispatched tokens across the ETP group
        pairs = t_loc * model.top_k
        ep += 4 * pairs * L.etp * h * 2 * (L.etp - 1) / L.etp / (system.nvlink_busbw_gbps * GB)
    return compute, tp, ep


@lru_cache(maxsize=4096)
def _layer_times_cached(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
                        backend: str, moe: bool) -> tuple[float, float, float]:
    return layer_times(model, system, L, setup, backend, moe)


def ep_all_to_all_time(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
                       backend: str, t_loc: float) -> float:
    """Forward dispatch + combine and their backward counterparts for one MoE layer."""
    h = model.hidden
    local, span = ep_span(L, system.nvlink_gpus)
    pairs = t_loc * model.top_k
    intra_frac = (local - 1) / L.ep
    remote = expected_remote_nodes(model, span, backend)
    fab = system.fabric
    nvl = system.nvlink_busbw_gbps * GB
    if span > 1:
        latency = (fab.a2a_latency_ms + fab.a2a_latency_per_node_ms * (span - 1)) * 1e-3
    else:
        latency = INTRA_NODE_A2A_LATENCY_MS * 1e-3
    fp8_dispatch = is_fp8(setup.precision) and backend.startswith("deepep")
    total = 0.0
    # (bytes per element): fwd dispatch, fwd combine, bwd of combine, bwd of dispatch
    for b in ((1.03 if fp8_dispatch else 2.0), 2.0, 2.0, 2.0):
        inter = t_loc * remote * h * b
        if backend.startswith("deepep") and span > 1:
            intra = pairs * h * b * (L.ep - 1) / L.ep  # NVLink forwarding of received tokens
        else:
            intra = pairs * h * b * intra_frac
        total += latency + max(inter / (fab.a2a_gbps * GB), intra / nvl)
    return total * setup.moe_imbalance


def dp_busbw(system: System, group: int, ranks_per_node: int) -> float:
    """Bytes/s per GPU for reduce-scatter/all-gather over a data-parallel group: NVLink when the
    group fits in a node; otherwise the NICs of the group's ranks in each node work together
    (hierarchical rings), i.e. per-GPU network rate times the group's ranks per node."""
    if group <= ranks_per_node:
        return system.nvlink_busbw_gbps * GB
    return system.fabric.a2a_gbps * GB * max(1, ranks_per_node)


def micro_batching(L: Layout, setup: TrainingSetup) -> tuple[int, float]:
    """(sequences per micro-batch, micro-batches per step per pipeline). Fixed micro-batches:
    mbs, gbs / (dp x mbs). Under Miles' dynamic batching (``setup.max_tokens_per_gpu``, what the
    launcher runs; mbs is then ignored) each data-parallel rank packs its gbs / dp samples into
    micro-batches of at most cap x cp tokens (radixark/miles@78527b9102b3
    miles/backends/training_utils/data.py:490-498): floor(cap x cp / seq_len) sequences of
    seq_len each, at least one (a longer one runs alone); the last one may be partly filled, so
    the count is fractional (the compute is the tokens', not a padded micro-batch's)."""
    if not setup.max_tokens_per_gpu:
        return L.mbs, float(setup.global_batch // (L.dp * L.mbs))
    per = max(1, setup.max_tokens_per_gpu * L.cp // setup.seq_len)
    return per, setup.global_batch / L.dp / per


def step_time(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
              backend: str) -> StepTime:
    """Predict one optimizer step of ``L`` (see the module docstring for the model)."""
    per, micro_f = micro_batching(L, setup)
    micro = math.ceil(micro_f)

    # per-layer times depend on tp, cp, ep, etp, the sequences in a micro-batch and recompute
    # only: cache them for the search
    key = replace(L, pp=1, dp=1, vpp=1, mbs=per)
    c_moe = _layer_times_cached(model, system, key, setup, backend, True) \
        if model.moe_layers else (0, 0, 0)
    c_dense = _layer_times_cached(model, system, key, setup, backend, False) \
        if model.dense_layers else (0, 0, 0)
    n_moe_total = model.moe_layers + model.mtp_layers
    n_dense_total = model.dense_layers
    # Layers spread over pp*vpp chunks; the most loaded stage carries the fullest stage of the
    # trainer's split with vpp 1 (layout.fullest_stage_layers: the split the launcher passes),
    # ceil(layers/chunks) per chunk otherwise. The output head and MTP modules are counted in the
    # total and spread with the layers (Megatron's custom pipeline layouts place them on otherwise
    # lighter stages).
    chunks = L.pp * L.vpp
    if L.pp == 1:
        imbalance = 1.0
    elif L.vpp == 1:
        imbalance = fullest_stage_layers(model, L.pp) * L.pp / model.num_layers
    else:
        imbalance = math.ceil(model.num_layers / chunks) * chunks / model.num_layers

    compute = n_moe_total * c_moe[0] + n_dense_total * c_dense[0]
    tp_comm = n_moe_total * c_moe[1] + n_dense_total * c_dense[1]
    ep_comm = n_moe_total * c_moe[2] + n_dense_total * c_dense[2]
    # output head(s) + loss, and embedding
    fp8 = setup.precision if is_fp8(setup.precision) else False
    tokens = per * setup.seq_len / L.cp
    heads = 1 + model.mtp_layers
    passes = 3.0
    compute += heads * _gemm(system, passes, tokens, model.hidden, model.vocab / L.tp, False)
    compute += _hbm(system, heads * tokens * model.vocab / L.tp * 4 * 3)  # softmax/CE in FP32
    if model.mtp_layers:
        compute += model.mtp_layers * _gemm(system, passes, tokens / L.tp, 2 * model.hidden,
                                            model.hidden, fp8)

    # per stage, per micro-batch
    share = imbalance / L.pp
    c_stage = compute * share
    tp_stage = tp_comm * share
    ep_stage = ep_comm * share

    overlapped = setup.schedule in ("a2a-overlap", "dualpipe") or RELEASES[setup.release].a2a_overlap
    if overlapped and ep_stage > 0:
        c_stage /= 1 - COMM_SMS / system.gpu.sms
        ep_exposed = max(0.0, ep_stage - c_stage)
    else:
        ep_exposed = ep_stage

    # pipeline send/receive of the boundary activation (and its gradient)
    pp_exposed = 0.0
    if L.pp > 1 and L.vpp == 1 and setup.schedule != "dualpipe":
        nbytes = tokens / L.tp * model.hidden * 2
        pp_exposed = 2 * (P2P_LATENCY_MS * 1e-3 + nbytes / (system.fabric.a2a_gbps * GB))

    t_mb = c_stage + tp_stage + ep_exposed + pp_exposed
    if L.pp == 1:
        bubble = 0.0
    elif setup.schedule == "dualpipe":
        bubble = max(0.0, L.pp / 2 - 1) * t_mb
    else:
        bubble = (L.pp - 1) / L.vpp * t_mb

    # data-parallel gradient reduce-scatter (FP32) and parameter all-gather (BF16). Ranks are
    # ordered tp-cp-dp (Megatron), so the dp*cp group of dense parameters strides by tp and has
    # gpn/tp members per node; the expert-data-parallel group strides by ep*etp.
    p = max((stage_params(model, L, w) for w in (("first", "last") if L.pp > 1 else ("first",))),
            key=lambda s: s.dense + s.expert)
    gpn = system.nvlink_gpus  # data-parallel groups inside the NVLink reach run on NVLink
    d_dense = L.dp * L.cp
    ranks_per_node_dense = min(d_dense, max(1, gpn // L.tp))
    t_rs = t_ag = 0.0
    if d_dense > 1:
        bw = dp_busbw(system, d_dense, ranks_per_node_dense)
        t_rs += p.dense * 4 * (d_dense - 1) / d_dense / bw
        t_ag += p.dense * 2 * (d_dense - 1) / d_dense / bw
    if L.edp > 1:
        ranks_per_node_exp = min(L.edp, max(1, gpn // (L.ep * L.etp)))
        bw = dp_busbw(system, L.edp, ranks_per_node_exp)
        t_rs += p.expert * 4 * (L.edp - 1) / L.edp / bw
        t_ag += p.expert * 2 * (L.edp - 1) / L.edp / bw
    window_bwd = (c_stage + tp_stage) * 2 / 3
    window_fwd = (c_stage + tp_stage) / 3
    dp_exposed = max(0.0, t_rs - window_bwd) + max(0.0, t_ag - window_fwd)

    # optimizer: Adam over the local shard, memory-bound (~30 bytes read+written per parameter)
    shard = p.dense / d_dense + p.expert / L.edp
    opt = _hbm(system, 30 * shard)

    step = micro_f * t_mb + bubble + dp_exposed + opt
    tokens_step = setup.global_batch * setup.seq_len
    tps = tokens_step / (step * L.world)
    flops = model.model_flops_per_token(setup.seq_len) * tps
    peak = system.gpu.fp8_tflops if fp8 else system.gpu.bf16_tflops
    _, span = ep_span(L, gpn)
    return StepTime(
        step=step, compute=micro_f * c_stage, tp_comm=micro_f * tp_stage,
        ep_comm=micro_f * ep_stage, ep_comm_exposed=micro_f * ep_exposed, pp_bubble=bubble,
        pp_comm_exposed=micro_f * pp_exposed,
        dp_comm_exposed=dp_exposed, optimizer=opt, tokens_per_s_per_gpu=tps,
        model_tflops_per_gpu=flops / 1e12, mfu=flops / (peak * 1e12), micro_batches=micro,
        ep_span_nodes=span,
    )

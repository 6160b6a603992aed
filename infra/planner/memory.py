"""Per-GPU memory of one layout: weights, gradients, optimizer, activations, buffers, rollout.

Formulas and where they come from:

- Weights, gradients, optimizer states: Megatron-Core distributed optimizer (docs
  "Distributed Optimizer", megatron-core user guide): with BF16 parameters and FP32 gradients a
  parameter costs ``6 + 12/d`` bytes (2 BF16 weight + 4 FP32 gradient, plus FP32 master weight
  and two FP32 Adam moments sharded over the ``d`` data-parallel ranks). With BF16 Adam moments
  (``--use-precision-aware-optimizer``, MCore v0.13) the sharded part is ``8/d``. Dense
  (attention, shared-expert, dense-MLP, embedding) parameters shard over d = dp*cp; routed-expert
  parameters over the expert-data-parallel group d = edp.
- Sharding of the weights themselves: attention and dense/shared MLP by tp (MLA's small
  down-projections replicated), routed experts by ep*etp, layers by pp (the most loaded stage is
  reported: the fullest stage's layers, ceil(layers/pp) or more under the trainer's uneven split
  (``layout.fullest_stage_layers``), plus the embedding on the first stage or the output head and
  MTP modules on the last).
- Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models" (arXiv 2205.05198), section 4: with tensor + sequence parallelism every stored
  activation is divided by tp; their 34*s*b*h per layer is re-derived here term by term for
  SwiGLU MLPs, GQA/MLA attention with flash attention (no s^2 softmax term) and routed experts
  (each routed token-expert pair stores its permuted input, the expert's gate/up output and
  activation output, and the expert output before un-permutation). Recompute: ``selective``
  drops what Megatron's ``--recompute-modules layernorm moe_act`` (and ``mla_up_proj``) discard;
  ``full`` keeps only each layer's input (2*s*b*h/tp bytes) plus one layer's working set.
- Tokens per micro-batch: ``mbs * seq_len / cp`` per GPU with fixed micro-batches; under Miles'
  dynamic batching (``TrainingSetup.max_tokens_per_gpu``, what the kit's launcher runs) the cap per
  GPU whatever mbs is (Miles v0.1.0 packs up to cap x cp tokens over a CP group,
  radixark/miles@78527b9102b3 miles/backends/training_utils/data.py:490-498), or one longer sample
  alone (``micro_batch_tokens``).
- Pipeline in flight: with 1F1B the first stage holds pp micro-batches of its layers; the
  interleaved schedule multiplies this by (1 + (pp-1)/(pp*vpp)) (Korthikanti et al., section 4.2.3;
  Megatron ``theoretical_memory_usage.py``). DualPipe holds pp+1 and keeps two copies of the
  weights (DeepSeek-V3 report, table 2).
- Communication buffers and runtime reserve: estimates, stated as such (NCCL communicators,
  DeepEP's NVLink/RDMA buffers, CUDA context and library workspaces, allocator fragmentation).
- Rollout (RL, colocated): the SGLang engine's weights (BF16, sharded over the engine's GPUs) and
  its KV cache (``MoEModel.kv_cache_bytes_per_token``) either stay resident next to training or are
  released during training (``rollout_offload``, Miles/slime colocate mode), in which case the
  rollout phase must fit beside the trainer's residual instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

from infra.planner.hardware import GIB, System
from infra.planner.layout import Layout, TrainingSetup, fullest_stage_layers, is_fp8
from infra.catalog.models import MoEModel
from infra.config.training_model import RolloutConfig
from infra.trainer_contract import engine_heads_fit

NCCL_BUFFERS_GIB = 1.5  # all NCCL communicators of a rank (TP, CP, DP, EP, PP groups); estimate
DEEPEP_BUFFERS_GIB = 2.0  # DeepEP normal-mode NVLink + RDMA buffers (~1 GB each); estimate
RUNTIME_RESERVE_GIB = 2.0  # CUDA context (~0.6 GiB on Hopper), cuBLAS/cuDNN/TE workspaces; estimate
FRAGMENTATION = 0.05  # caching-allocator slack on activations with expandable_segments; estimate
ROLLOUT_RESIDUAL_GIB = 1.0  # engine context/graphs kept while offloaded; estimate
TRAIN_RESIDUAL_GIB = 2.0  # trainer context kept while it is offloaded for rollout; estimate


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU on the most loaded pipeline stage."""

    weights: float
    gradients: float
    optimizer: float
    fp8_weight_cache: float
    activations: float
    comm_buffers: float
    runtime_reserve: float
    rollout_weights: float
    rollout_kv_cache: float
    training_peak: float  # what must fit while training
    rollout_peak: float  # what must fit while generating (colocated only; else 0)
    capacity: float  # usable GiB per GPU (catalog GpuSpec.usable_memory_gib)
    stage: str  # "first" or "last"
    micro_batch_tokens: float = 0.0  # tokens one micro-batch puts on one GPU (activations)
    max_tokens_per_gpu: int = 0  # the dynamic-batching cap they were sized for (0: fixed mbs)

    @property
    def peak(self) -> float:
        return max(self.training_peak, self.rollout_peak)

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    def to_dict(self) -> dict:
        d = asdict(self)
        d["peak"] = self.peak
        d["fits"] = self.fits
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in d.items()}


def _end_stage_layers(model: MoEModel, L: Layout) -> int:
    """Layers counted on the first and last stage: the fullest stage's (an upper bound; the ends
    hold fewer where the trainer's split gives them the remainder), ceil(layers/pp) with vpp."""
    return fullest_stage_layers(model, L.pp) if L.vpp == 1 else math.ceil(model.num_layers / L.pp)


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage, split by how they shard over data parallelism."""

    dense: float  # sharded over dp*cp by the distributed optimizer
    expert: float  # sharded over edp


@lru_cache(maxsize=65536)  # the search asks for the same stage many times (pure function)
def stage_params(model: MoEModel, L: Layout, which: str) -> StageParams:
    """Parameters per GPU on the first or last pipeline stage."""
    n = _end_stage_layers(model, L)
    if which == "first":
        n_dense = min(model.dense_layers, n)
    else:  # last stage: the dense layers sit at the front of the model
        n_dense = max(0, model.dense_layers - (model.num_layers - n))
    n_moe = n - n_dense
    attn_split = sum(i * o for i, o, split in model.attention_gemms() if split)
    attn_repl = model.attention_params - attn_split
    per_layer_attn = attn_split / L.tp + attn_repl
    dense = n * per_layer_attn
    dense += n_dense * model.dense_mlp_params / L.tp
    dense += n_moe * (model.shared_params / L.tp + model.router_params)
    expert = n_moe * model.num_experts * model.expert_params / (L.ep * L.etp)
    if which == "first" or L.pp == 1:
        dense += model.embedding_params / L.tp
    if which == "last" or L.pp == 1:
        dense += model.head_params / L.tp
        if model.mtp_layers:
            m = model.mtp_layers
            dense += m * (per_layer_attn + model.shared_params / L.tp + model.router_params
                          + model.mtp_extra_params / L.tp)
            expert += m * model.num_experts * model.expert_params / (L.ep * L.etp)
    return StageParams(dense, expert)


def micro_batch_tokens(L: Layout, setup: TrainingSetup) -> float:
    """Tokens one micro-batch puts on one GPU: mbs sequences of seq_len split over cp, or under
    dynamic batching the cap, unless one sample is longer than the cap x cp (it then runs alone:
    Miles' first fit opens a micro-batch for it, radixark/miles@78527b9102b3
    miles/utils/data.py:277-288)."""
    if setup.max_tokens_per_gpu:
        longest = setup.longest_sample or setup.seq_len
        return float(max(setup.max_tokens_per_gpu, math.ceil(longest / L.cp)))
    return L.mbs * setup.seq_len / L.cp


def _micro_batches(L: Layout, setup: TrainingSetup) -> int:
    """Micro-batches per step per pipeline, as far as memory cares (how many can be in flight):
    gbs / (dp*mbs) fixed; with dynamic batching at most one per sample, gbs / dp."""
    return setup.global_batch // (L.dp * (1 if setup.max_tokens_per_gpu else L.mbs))


@lru_cache(maxsize=65536)
def activation_bytes_per_layer(model: MoEModel, L: Layout, setup: TrainingSetup,
                               moe: bool) -> float:
    """Stored activation bytes of one layer for one micro-batch on one GPU (Korthikanti et al.).

    Each saved tensor is listed with its width per token, whether tensor parallelism splits it
    (sequence-parallel tensors are split too), whether it is only a GEMM input (then FP8 training
    saves it in 1 byte, as Transformer Engine does), and whether selective recompute discards it.
    """
    tokens = micro_batch_tokens(L, setup)  # tokens of this CP shard
    if L.recompute == "full":
        return 2.0 * model.hidden * tokens / L.tp  # the layer input only
    h = model.hidden
    sel = L.recompute == "selective"
    fp8 = is_fp8(setup.precision)
    # (width per token, split by tp, GEMM-input only, dropped by selective recompute)
    saved: list[tuple[float, bool, bool, bool]] = [
        (h, True, False, False),  # attention norm input (residual stream)
        (h, True, True, True),  # attention norm output = QKV input
        (h, True, False, False),  # MLP norm input
        (h, True, True, True),  # MLP norm output = router / MLP input
    ]
    if model.attention == "gqa":
        q = model.num_heads * model.head_dim
        kv = 2 * model.num_kv_heads * model.head_dim
        saved += [(q + kv, True, False, False),  # Q, K, V for the flash-attention backward
                  (q, True, False, False)]  # attention output (also the O-projection input)
    else:
        heads = model.num_heads
        lat = (model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_rope_head_dim
        saved += [
            (2 * lat, False, False, False),  # compressed latents before/after their norms
            (heads * (model.qk_head_dim + model.qk_nope_head_dim + model.v_head_dim),
             True, False, True),  # up-projection outputs (mla_up_proj recompute drops them)
            (heads * (2 * model.qk_head_dim + model.v_head_dim), True, False, True),  # Q, K, V
            (heads * model.v_head_dim, True, False, False),  # attention output
        ]
    if not moe:
        f = model.dense_ffn
        saved += [(2 * f, True, False, False),  # gate/up output (SwiGLU backward)
                  (f, True, True, True)]  # activation output = down-projection input
    else:
        if model.num_shared_experts:
            fs = model.shared_expert_ffn * model.num_shared_experts
            saved += [(2 * fs, True, False, False), (fs, True, True, True)]
    total = 0.0
    for width, split, gemm_in, drop in saved:
        if sel and drop:
            continue
        per_elem = 1 if (fp8 and gemm_in) else 2
        total += tokens * width * per_elem / (L.tp if split else 1)
    if moe:
        t_loc = tokens / L.tp
        total += t_loc * model.num_experts * 4  # router probabilities (FP32)
        pairs = t_loc * model.top_k * setup.moe_imbalance
        fe = model.expert_ffn
        b_in = 1 if fp8 else 2
        total += pairs * L.etp * h * b_in  # permuted expert input (grouped GEMM input)
        total += pairs * 2 * fe * 2  # gate/up output
        if not sel:
            total += pairs * fe * b_in  # activation output (moe_act recompute drops it)
    return total


def _in_flight(L: Layout, setup: TrainingSetup, which: str) -> float:
    micro = _micro_batches(L, setup)
    if L.pp == 1:
        return 1.0
    if which == "last":
        return 1.0
    if setup.schedule == "dualpipe":
        return float(min(L.pp + 1, micro))
    base = float(min(L.pp, micro))
    if L.vpp > 1:
        base *= 1 + (L.pp - 1) / (L.pp * L.vpp)
    return base


def estimate_memory(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
                    ep_backend: str) -> MemoryBreakdown:
    """Memory of the most loaded stage (first or last) of one GPU."""
    results = [_stage_memory(model, system, L, setup, ep_backend, w)
               for w in (("first", "last") if L.pp > 1 else ("first",))]
    return max(results, key=lambda m: m.peak)


def static_memory_gib(model: MoEModel, L: Layout, setup: TrainingSetup) -> float:
    """Weights + gradients + optimizer of the most loaded stage: a cheap lower bound used to
    reject layouts before the activation model runs."""
    best = 0.0
    for which in (("first", "last") if L.pp > 1 else ("first",)):
        p = stage_params(model, L, which)
        w, g, o, _ = _static(p, L, setup)
        best = max(best, (w + g + o) / GIB)
    return best


def _static(p: StageParams, L: Layout, setup: TrainingSetup) -> tuple[float, float, float, float]:
    d_dense = L.dp * L.cp
    d_exp = L.edp
    sharded = 8 if setup.optimizer_bf16_moments else 12
    total = p.dense + p.expert
    weights = 2 * total * (2 if setup.schedule == "dualpipe" else 1)
    grads = 4 * total
    optim = sharded * (p.dense / d_dense + p.expert / d_exp)
    fp8_cache = 2 * total if is_fp8(setup.precision) else 0.0  # FP8 copy + transpose (Hopper)
    return weights, grads, optim, fp8_cache


# GPUs per SGLang engine the planners consider, and the engine rule both planners apply (the
# GRPO search, rl.engine_layouts; a training plan beside a colocated engine, colocated.py): the
# engine's BF16 weights take at most 90% of its memory share, leaving at least a tenth for KV
ENGINE_SIZES = (1, 2, 4, 8, 16, 32, 64)
ENGINE_WEIGHTS_SHARE = 0.9


def engine_weights_gib(model: MoEModel, gpus: int) -> float:
    """BF16 engine weights per GPU of an engine of ``gpus`` GPUs."""
    return 2.0 * (model.total_params + model.mtp_params) / gpus / GIB


def engine_weights_fit(model: MoEModel, share_gib: float, gpus: int) -> bool:
    """The engine rule: weights per GPU at most ``ENGINE_WEIGHTS_SHARE`` of the share."""
    return engine_weights_gib(model, gpus) <= ENGINE_WEIGHTS_SHARE * share_gib


def rollout_engine_gpus(model: MoEModel, system: System, setup: TrainingSetup,
                        world: int) -> int:
    """GPUs one colocated rollout engine spans on a run of ``world`` GPUs: as given, else the
    launcher's default engine (training.rollout.gpus_per_engine) when the engine rule accepts it,
    else the smallest size that divides the run, splits the attention heads (SGLang) and passes
    the rule: what a new config runs (colocated.colocated_engine). 0 when no size passes (the
    search rejects such a run, as the GRPO search has no engine for it)."""
    if setup.rollout_engine_gpus:
        return setup.rollout_engine_gpus
    share = setup.rollout_mem_fraction * system.gpu_memory_gib
    kv = model.num_kv_heads if model.attention == "gqa" else None
    sizes = [g for g in ENGINE_SIZES if world % g == 0 and engine_heads_fit(g, model.num_heads, kv)]
    default = RolloutConfig.model_fields["gpus_per_engine"].default
    for g in ([default] if default in sizes else []) + sizes:
        if engine_weights_fit(model, share, g):
            return g
    return 0


def _stage_memory(model: MoEModel, system: System, L: Layout, setup: TrainingSetup,
                  ep_backend: str, which: str) -> MemoryBreakdown:
    p = stage_params(model, L, which)
    weights, grads, optim, fp8_cache = _static(p, L, setup)

    n = _end_stage_layers(model, L)
    n_dense = min(model.dense_layers, n) if which == "first" else max(
        0, model.dense_layers - (model.num_layers - n))
    n_moe = n - n_dense
    if which == "last" and model.mtp_layers:
        n_moe += model.mtp_layers
    per_dense = activation_bytes_per_layer(model, L, setup, moe=False) if n_dense else 0.0
    per_moe = activation_bytes_per_layer(model, L, setup, moe=True) if n_moe else 0.0
    acts = (n_dense * per_dense + n_moe * per_moe) * _in_flight(L, setup, which)
    if L.recompute == "full":  # working set of the layer being recomputed
        full = replace(L, recompute="none")
        acts += activation_bytes_per_layer(model, full, setup, moe=n_moe > 0)
    tokens = micro_batch_tokens(L, setup)
    if which == "last" or L.pp == 1:
        # logits in FP32 for the loss, per head (main + MTP), vocabulary split over tp
        acts += (1 + model.mtp_layers) * tokens * model.vocab * 4 / L.tp
    acts *= 1 + FRAGMENTATION

    comm = NCCL_BUFFERS_GIB + (DEEPEP_BUFFERS_GIB if ep_backend.startswith("deepep") else 0.0)
    train_peak = (weights + grads + optim + fp8_cache + acts) / GIB + comm + RUNTIME_RESERVE_GIB

    cap = system.gpu_memory_gib
    ro_w = ro_kv = 0.0
    rollout_peak = 0.0
    if setup.colocate_rollout:
        # no engine passing the rule (evaluate() of such a run): the whole run, KV the rule's tenth
        engine = rollout_engine_gpus(model, system, setup, L.world) or L.world
        ro_w = engine_weights_gib(model, engine)
        if setup.rollout_tokens_per_gpu:
            ro_kv = setup.rollout_tokens_per_gpu * model.kv_cache_bytes_per_token / GIB
        else:  # the share less the weights; at least the tenth the engine rule leaves
            share = setup.rollout_mem_fraction * cap
            ro_kv = max(share - ro_w, (1 - ENGINE_WEIGHTS_SHARE) * share)
        if setup.rollout_offload:
            train_peak += ROLLOUT_RESIDUAL_GIB
            rollout_peak = ro_w + ro_kv + TRAIN_RESIDUAL_GIB + RUNTIME_RESERVE_GIB
        else:
            train_peak += ro_w + ro_kv
    return MemoryBreakdown(
        weights=weights / GIB, gradients=grads / GIB, optimizer=optim / GIB,
        fp8_weight_cache=fp8_cache / GIB, activations=acts / GIB, comm_buffers=comm,
        runtime_reserve=RUNTIME_RESERVE_GIB, rollout_weights=ro_w, rollout_kv_cache=ro_kv,
        training_peak=train_peak, rollout_peak=rollout_peak, capacity=cap, stage=which,
        micro_batch_tokens=tokens, max_tokens_per_gpu=setup.max_tokens_per_gpu,
    )

"""One GRPO step = rollout generation + weight sync + training, per placement and engine layout.

A synchronous GRPO step (Miles/slime ``train.py``, NeMo-RL on-policy) runs three phases in turn:

1. Rollout: SGLang engines of ``engine_gpus`` GPUs each (attention tensor-parallel over the
   engine, experts split over ``engine_ep``) generate ``prompts x samples_per_prompt`` responses.
   One decode iteration of one engine with ``B`` running sequences of mean context ``c`` costs
       fixed + layers * per_layer + max(HBM bytes / (HBM * hbm_eff), FLOPs / (BF16 * gemm_bf16))
   where the bytes are the weights the batch touches (dense weights, plus the distinct experts
   ``E * (1 - (1 - k/E)^B)`` of each MoE layer) and the KV cache it reads, shared over the
   engine's GPUs; ``per_layer`` is the decode-time floor of one layer (kernel minimum times under
   CUDA graphs plus the engine's tensor-parallel all-reduces, more when the engine spans nodes,
   or DeepEP low-latency dispatch/combine with ``deepep``). An engine runs
   ``max(max_response, samples_per_engine * mean_response / max_batch)`` iterations (the longest
   response bounds the phase; a batch bigger than the KV cache or the scheduler's running-request
   cap, ``RLSetup.max_running``, allows runs in waves), with the mean running batch over those
   iterations. Prefill of the prompts is added at GEMM rate.
2. Weight sync (Megatron to SGLang): the BF16 weights gathered from the training layout and
   loaded into every engine. Colocated: CUDA IPC inside each node, ``SYNC_COLOCATED_GBPS`` per
   node, plus the engine's release/resume of its memory (``OFFLOAD_FIXED_S``). Disaggregated:
   NCCL broadcast over the fabric at the per-node line rate times ``SYNC_FABRIC_EFF``.
3. Training: the training step of ``timing.step_time`` for the packed mean sequence, once per
   optimizer step of the rollout, plus ``logprob_passes`` forward-only passes (old-policy and,
   with a KL term, reference log-probs), each a third of a forward+backward (a quarter of a
   step under full recompute, whose recomputed forward a log-prob pass does not run).

Placement: ``colocated`` runs rollout and training on the same nodes, one after the other (the
kit's launcher uses Miles ``--colocate``); ``disaggregated`` gives rollout its own nodes. How the
phases combine (on-policy, batch overlap, streaming k-step off-policy) and the engines' memory
share per placement are in ``infra.planner.rl_modes``; an overlapped mode is disaggregated only
(Miles refuses ``--colocate`` with it).

Constants are calibrated in tests/planner/test_planner_rl_validation.py; docs/planner.md lists sources.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

from infra.planner.errors import PlannerError, field as named
from infra.planner.hardware import GB, GIB, System, get_system
from infra.planner.models import MoEModel, get_model
from infra.planner.layout import TrainingSetup
from infra.planner.request import Pins, Placement, PlanRequest, RLPlanRequest, RLSetup
from infra.trainer_contract import (
    DEFAULT_MAX_TOKENS_PER_GPU, engine_heads_fit, engine_sizes_for_heads,
)
from infra.planner.rl_modes import (
    compose_step, engine_mem_fraction, iterations_for, miles_mode_args, stream_batch,
)
from infra.planner.memory import ENGINE_SIZES, engine_weights_fit as _weights_fit, estimate_memory
from infra.planner.search import (
    Candidate, check_domain, check_node_counts, check_pins, check_precision, plan,
)

# --- decode constants (see module docstring; calibration in docs/planner.md) ------------------
DECODE_FIXED_MS = 1.0  # per iteration: scheduler, sampling, graph launch; estimate
DECODE_HBM_EFF = 0.5  # HBM share decode MoE kernels reach at small M; calibrated (RL runs)
DECODE_LAYER_US = 30.0  # per layer per iteration, kernel floor; calibrated (SGLang B200 TPOT)
TP_ALLREDUCE_US = 8.0  # one NVLink all-reduce of a decode batch (SGLang custom all-reduce)
TP_ALLREDUCE_NET_US = 80.0  # one all-reduce across 2 nodes over EFA/IB; calibrated (RL runs)
TP_ALLREDUCE_NET_PER_NODE_US = 80.0  # and per further node; calibrated (RL runs)
DEEPEP_LL_US = 40.0  # one DeepEP low-latency dispatch or combine inside a node; estimate
DEEPEP_LL_NET_US = 120.0  # the same across nodes over EFA; estimate
MAX_RUNNING = 1024  # SGLang max running requests per engine (CUDA-graph batch cap); assumption;
# RLSetup.max_running overrides it (an engine with another scheduler cap)
# --- weight sync ---------------------------------------------------------------------------
SYNC_COLOCATED_GBPS = 60.0  # GB/s per node, gather + IPC hand-over of BF16 weights; estimate
SYNC_FABRIC_EFF = 0.5  # share of the line rate an NCCL broadcast of weights reaches; estimate
OFFLOAD_FIXED_S = 10.0  # colocated: release/resume of engine and trainer memory; calibrated (RL)
DEFAULT_RL_MAX_NODES = 16  # search range without --nodes / --max-nodes
EVERY_POOL_UP_TO = 16  # disaggregated: every training pool size up to this (train_pool_sizes)


@dataclass(frozen=True)
class EngineLayout:
    gpus: int  # GPUs per SGLang engine (--rollout-num-gpus-per-engine, SGLang tp)
    ep: int  # expert-parallel size inside the engine (--sglang-ep-size)
    engines: int

    def label(self) -> str:
        return f"{self.engines}x SGLang TP{self.gpus} EP{self.ep}"


@dataclass(frozen=True)
class RLStep:
    rollout: float
    sync: float
    train: float
    step: float
    decode_iterations: int
    mean_batch: float
    iteration_ms: float
    bound: str = "rollout"  # the phase that bounds the step: rollout, train or sync
    mode: str = "on-policy"  # on-policy, batch or stream (RLSetup.mode)
    mem_fraction: float = 0.7  # the engines' SGLang mem_fraction_static

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class RLCandidate:
    placement: Placement
    nodes: int  # all nodes of the job
    train_nodes: int
    rollout_nodes: int
    engine: EngineLayout
    training: Candidate
    time: RLStep
    samples_per_s: float
    dollars_per_step: float | None
    dollars_per_million_tokens: float | None  # per million trained tokens

    def miles_args(self, rl: RLSetup, gpus_per_node: int) -> list[str]:
        """Miles v0.1.0 entry point and arguments for this candidate's mode and placement."""
        return miles_mode_args(rl, placement=self.placement, train_nodes=self.train_nodes,
                               gpus_per_node=gpus_per_node,
                               rollout_gpus=self.rollout_nodes * gpus_per_node,
                               engine_gpus=self.engine.gpus, mem_fraction=self.time.mem_fraction)

    def to_dict(self) -> dict:
        return {
            "placement": self.placement, "nodes": self.nodes, "train_nodes": self.train_nodes,
            "rollout_nodes": self.rollout_nodes, "engine": asdict(self.engine),
            "engine_label": self.engine.label(), "training": self.training.to_dict(),
            "time": self.time.to_dict(), "samples_per_s": round(self.samples_per_s, 3),
            "dollars_per_step": self.dollars_per_step,
            "dollars_per_million_tokens": self.dollars_per_million_tokens,
        }


@dataclass(frozen=True)
class RLPlan:
    model: MoEModel
    system: System
    rl: RLSetup
    precision: str
    candidates: tuple[RLCandidate, ...]  # ranked, best first
    best_per_nodes: tuple[RLCandidate, ...]  # best candidate at each node count, by nodes
    search_seconds: float
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> RLCandidate:
        return self.candidates[0]

    def to_dict(self) -> dict:
        return {
            "model": self.model.key, "instance_type": self.system.name, "rl": asdict(self.rl),
            "precision": self.precision, "search_seconds": round(self.search_seconds, 4),
            "candidates": [c.to_dict() for c in self.candidates],
            "best_per_nodes": [c.to_dict() for c in self.best_per_nodes],
            "mode": self.rl.mode, "off_policy_steps": self.rl.staleness,
            "miles_args": self.best.miles_args(self.rl, self.system.gpus_per_node),
            "warnings": list(self.warnings),
        }


# --- rollout ---------------------------------------------------------------------------------


def _weights_bytes(model: MoEModel) -> float:
    return 2.0 * (model.total_params + model.mtp_params)  # BF16 engine weights


def _dense_bytes(model: MoEModel) -> float:
    routed = model.moe_layers * model.num_experts * model.expert_params
    return 2.0 * (model.total_params - routed)


def kv_bytes_per_token_per_gpu(model: MoEModel, gpus: int) -> float:
    """KV cache of one token on one GPU of a ``gpus``-way tensor-parallel engine: GQA splits
    KV heads up to their count (replicated beyond); MLA's latent is replicated under TP."""
    if model.attention == "gqa":
        return model.kv_cache_bytes_per_token / min(gpus, model.num_kv_heads)
    return float(model.kv_cache_bytes_per_token)


def decode_iteration_s(model: MoEModel, system: System, *, engine_gpus: int, engine_ep: int,
                       backend: str, batch: float, context: float) -> float:
    """Seconds of one decode iteration of one engine (see the module docstring)."""
    g = engine_gpus
    eff = system.efficiency
    E, k = model.num_experts, model.top_k
    touched = E * (1 - (1 - k / E) ** max(batch, 1.0)) if E else 0.0
    expert_bytes = model.moe_layers * touched * model.expert_params * 2.0
    weight_bytes = (_dense_bytes(model) + expert_bytes) / g
    kv = batch * context * kv_bytes_per_token_per_gpu(model, g)
    t_mem = (weight_bytes + kv) / (system.gpu.hbm_tbps * 1e12 * DECODE_HBM_EFF)
    flops = 2.0 * model.active_params * batch / g
    flops += batch * model.num_layers * 4 * model.num_heads * model.qk_head_dim * context / g
    t_compute = flops / (system.gpu.bf16_tflops * 1e12 * eff.gemm_bf16)
    # The engines' custom all-reduce works inside one host; beyond it NCCL all-reduce, whose
    # per-node latency the RL rows fix, NVLink domain or not (the GB200 NVL72 rows of
    # tests/planner/test_planner_gb200_validation.py agree: TP32 there is as slow as on H100)
    spans_nodes = g > system.gpus_per_node
    per_layer = DECODE_LAYER_US
    if g > 1:
        span = math.ceil(g / system.gpus_per_node)
        ar = (TP_ALLREDUCE_NET_US + TP_ALLREDUCE_NET_PER_NODE_US * (span - 2) if spans_nodes
              else TP_ALLREDUCE_US)
        ar += batch * model.hidden * 2 / (system.nvlink_busbw_gbps * GB) * 1e6
        if backend.startswith("deepep") and engine_ep > 1:
            a2a = DEEPEP_LL_NET_US if spans_nodes else DEEPEP_LL_US
            per_layer += ar + 2 * a2a  # attention all-reduce; MoE dispatch + combine
        else:
            per_layer += 2 * ar  # attention and MoE all-reduce
    fixed = DECODE_FIXED_MS * 1e-3 + model.num_layers * per_layer * 1e-6
    return fixed + max(t_mem, t_compute)


def engine_kv_tokens(model: MoEModel, system: System, *, engine_gpus: int,
                     mem_fraction: float) -> float:
    """Tokens of KV cache one engine holds: its memory share minus its weights."""
    free = mem_fraction * system.gpu_memory_gib * GIB - _weights_bytes(model) / engine_gpus
    return max(0.0, free) / kv_bytes_per_token_per_gpu(model, engine_gpus)


def rollout_time(model: MoEModel, system: System, *, rl: RLSetup, engine: EngineLayout,
                 backend: str, mem_fraction: float = 0.7,
                 stream: bool = False) -> tuple[float, int, float, float]:
    """(seconds, decode iterations, mean running batch, seconds per iteration) of one rollout.

    ``stream``: one batch's worth of tokens at steady continuous-batching throughput (the engine
    stays as full as its KV cache allows; no wait for the longest response), for the streaming
    mode of ``rl_modes``; otherwise one batch bounded by its longest response."""
    per_engine = rl.samples / engine.engines
    seq_max = rl.prompt_len + rl.max_response_len
    cap = engine_kv_tokens(model, system, engine_gpus=engine.gpus,
                           mem_fraction=mem_fraction) / seq_max
    tokens = per_engine * rl.mean_response
    max_running = rl.max_running or MAX_RUNNING
    if stream:
        # a running sequence holds its mean context, not the maximum, in KV cache on average;
        # the longest response still needs max_response iterations, now spread over K steps
        mean_cap = cap * seq_max / (rl.prompt_len + rl.mean_response)
        batch = stream_batch(per_engine, mean_cap, max_running, rl.staleness)
        iterations = max(iterations_for(tokens, batch),
                         math.ceil(rl.max_response_len / rl.staleness))
        batch = tokens / iterations
    else:
        max_batch = max(1.0, min(per_engine, cap, max_running))
        iterations = max(rl.max_response_len, math.ceil(tokens / max_batch))
        batch = tokens / iterations
    context = rl.prompt_len + rl.mean_response / 2
    t_iter = decode_iteration_s(model, system, engine_gpus=engine.gpus, engine_ep=engine.ep,
                                backend=backend, batch=batch, context=context)
    prefill = (per_engine * rl.prompt_len * 2 * model.active_params / engine.gpus
               / (system.gpu.bf16_tflops * 1e12 * system.efficiency.gemm_bf16))
    return iterations * t_iter + prefill, iterations, batch, t_iter


def sync_time(model: MoEModel, system: System, *, placement: Placement, train_nodes: int) -> float:
    """Seconds to move the trained BF16 weights into every engine."""
    nbytes = _weights_bytes(model)
    if placement == "colocated":
        return OFFLOAD_FIXED_S + nbytes / (train_nodes * SYNC_COLOCATED_GBPS * GB)
    line = system.fabric.line_rate_gbps * system.gpus_per_node * GB  # bytes/s per node
    return nbytes / (line * SYNC_FABRIC_EFF)


def train_time(candidate: Candidate, *, rl: RLSetup) -> float:
    """Training seconds per rollout: the optimizer steps plus the forward-only log-prob passes."""
    # a training step is forward + 2x backward (+ a recomputed forward under full recompute);
    # a log-prob pass is one forward, which never recomputes
    forwards = 4 if candidate.layout.recompute == "full" else 3
    return candidate.time.step * rl.steps_per_rollout * (1 + rl.logprob_passes / forwards)


def _kv_heads(model: MoEModel) -> int | None:
    """The KV heads SGLang splits besides the query heads (None for MLA, which checks the heads only)."""
    return model.num_kv_heads if model.attention == "gqa" else None


def engine_fits_heads(model: MoEModel, gpus: int) -> bool:
    """Whether SGLang can split the model's attention over an engine of ``gpus`` (its TP size; the
    kit enables no dp-attention): the trainer's rule, rltrainer.contract.heads (SGLang 0.5.16
    qwen3_moe.py:458-468, mixtral.py:137-147, deepseek_v2.py:1603)."""
    return engine_heads_fit(gpus, model.num_heads, _kv_heads(model))


def engine_weights_fit(model: MoEModel, system: System, rl: RLSetup, placement: Placement,
                       gpus: int) -> bool:
    """Whether an engine of ``gpus`` GPUs leaves at least a tenth of its memory share for KV
    cache after its BF16 weights (the engine rule, ``memory.engine_weights_fit``)."""
    share = engine_mem_fraction(rl, system, placement, gpus) * system.gpu_memory_gib
    return _weights_fit(model, share, gpus)


def engine_layouts(model: MoEModel, system: System, *, rl: RLSetup, gpus: int, backend: str,
                   pinned: tuple[int, int] | None = None,
                   placement: Placement = "colocated") -> list[EngineLayout]:
    """Engine sizes that divide ``gpus``, fit the model's attention heads (``engine_fits_heads``)
    and leave at least a tenth of the engine's memory share for KV cache; ep = engine size (SGLang forces it with DeepEP; with NCCL too when the experts
    divide), else 1 (pure TP). A pinned (gpus, ep) is checked the same way."""
    out = []
    sizes = [pinned[0]] if pinned else [s for s in ENGINE_SIZES if s <= gpus]
    for g in sizes:
        if gpus % g or not engine_fits_heads(model, g):
            continue
        if not engine_weights_fit(model, system, rl, placement, g):
            continue
        if pinned:
            eps = [pinned[1]]
        elif backend.startswith("deepep"):  # SGLang's DeepEP path forces ep = engine size
            eps = [g]
        else:  # SGLang's usual MoE layout: experts spread over the whole engine (ep = tp);
            # the decode model does not tell ep from tp apart under NCCL, so one is enough
            eps = [g] if model.num_experts % g == 0 else [1]
        for ep in eps:
            if model.num_experts % ep == 0 and g % ep == 0:
                out.append(EngineLayout(g, ep, gpus // g))
    return out


def evaluate_rl(model: MoEModel, system: System, *, rl: RLSetup, placement: Placement,
                training: Candidate, rollout_nodes: int, engine: EngineLayout,
                price_per_hour: float | None = None) -> RLCandidate:
    """Predict one GRPO step for a given training candidate, rollout pool and engine layout."""
    backend = training.backend.backend
    train_nodes = training.nodes
    frac = engine_mem_fraction(rl, system, placement, engine.gpus)
    ro, iters, batch, t_iter = rollout_time(model, system, rl=rl, engine=engine, backend=backend,
                                            mem_fraction=frac)
    if rl.mode == "stream":
        ro_s, iters, batch, t_iter = rollout_time(model, system, rl=rl, engine=engine,
                                                  backend=backend, mem_fraction=frac, stream=True)
    else:
        ro_s = ro
    sync = sync_time(model, system, placement=placement, train_nodes=train_nodes)
    tr = train_time(training, rl=rl)
    step, bound, ro = compose_step(rl, rollout=ro, stream_rollout=ro_s, sync=sync, train=tr)
    nodes = train_nodes if placement == "colocated" else train_nodes + rollout_nodes
    price = price_per_hour if price_per_hour is not None else system.price_per_hour
    per_step = None if price is None else price * nodes * step / 3600
    per_m = None if per_step is None else per_step / (rl.samples * rl.mean_sequence) * 1e6
    return RLCandidate(placement, nodes, train_nodes, rollout_nodes, engine, training,
                       RLStep(ro, sync, tr, step, iters, batch, t_iter * 1e3, bound, rl.mode,
                              frac),
                       rl.samples / step, per_step, per_m)


def train_pool_sizes(top_n: int) -> list[int]:
    """Training pool sizes the disaggregated search tries for jobs of up to ``top_n`` nodes:
    every size up to ``EVERY_POOL_UP_TO``, then 4 per doubling (20, 24, 28, 32, 40, 48, ...; at
    most 25% apart; quarters of a power-of-two job among them). The set never depends on
    ``top_n`` beyond cutting it at ``top_n - 1``, so a bigger quota only adds sizes: its best
    plan is never worse (a set taken from the maximum, such as its quarters, would drop the
    small pools a smaller quota keeps). One training search per size beyond the first run,
    which keeps the search under a second at 1,024 GPUs (benchmarks/plan_search.py)."""
    sizes = list(range(1, min(top_n, EVERY_POOL_UP_TO + 1)))
    step = EVERY_POOL_UP_TO // 4
    size = EVERY_POOL_UP_TO + step
    while size < top_n:
        sizes.append(size)
        if size % (4 * step) == 0:  # a doubling reached: coarser steps
            step *= 2
        size += step
    return sizes


def _seq_len(rl: RLSetup) -> int:
    return int(math.ceil(rl.mean_sequence / 256) * 256)


def _best_training(model, system, base: TrainingSetup, counts, pins, ep_backend, price_per_hour,
                   errors: dict[int, PlannerError] | None = None) -> dict[int, Candidate]:
    """Best training layout per node count in ``counts``: one search over 1..k for a leading
    run of counts 1..k, one search per count beyond it. A search that finds nothing leaves its
    error in ``errors``, under the most nodes it searched."""
    counts = sorted(set(counts))
    run = 0  # the leading run 1..run is one search over a range, the rest one search each
    while run < len(counts) and counts[run] == run + 1:
        run += 1
    head = run if run > 1 else 0
    groups = ([dict(max_nodes=head)] if head else []) + [dict(nodes=n) for n in counts[head:]]
    best: dict[int, Candidate] = {}
    for where in groups:
        try:
            best.update(_search_training(model, system, base, where, pins, ep_backend,
                                         price_per_hour))
        except PlannerError as err:  # nothing fits this pool; the others may
            if errors is not None:
                errors[where.get("nodes") or where["max_nodes"]] = err
    return best


def training_setup(rl: RLSetup, system: System, colocate: bool, *, precision: str = "bf16",
                   max_tokens_per_gpu: int = DEFAULT_MAX_TOKENS_PER_GPU,
                   **how) -> TrainingSetup:
    """What a GRPO step trains: mean-length sequences for the step time; for the memory, the
    launcher's micro-batches (its token cap, or the longest sample alone) and, colocated, the
    engine's share. ``how``: release, schedule, optimizer_bf16_moments (the request's)."""
    return TrainingSetup(seq_len=_seq_len(rl), global_batch=rl.train_batch, precision=precision,
                         max_tokens_per_gpu=max_tokens_per_gpu,
                         longest_sample=rl.prompt_len + rl.max_response_len,
                         colocate_rollout=colocate, rollout_offload=True,
                         rollout_mem_fraction=(engine_mem_fraction(rl, system, "colocated", 8)
                                               if colocate else 0.0), **how)


def _search_training(model, system, setup: TrainingSetup, where, pins, ep_backend,
                     price_per_hour) -> dict[int, Candidate]:
    result = plan(PlanRequest(model, system.name, **where, setup=setup,
                              pins=pins or Pins(), ep_backend=ep_backend, top=10**9,
                              price_per_hour=price_per_hour,
                              ultraserver_type=system.ultraserver or None))
    best: dict[int, Candidate] = {}
    for c in result.candidates:  # ranked best first
        best.setdefault(c.nodes, c)
    return best


def _check_engine(model: MoEModel, system: System, rl: RLSetup, engine: tuple[int, int],
                  placements: tuple[str, ...], counts: list[int]) -> None:
    """The rules ``engine_layouts`` applies to a pinned (GPUs, ep) engine, each refused naming
    the pin (the search would drop it silently and blame the node count)."""
    g, ep = engine
    ge, ee = named("engine_gpus"), named("engine_ep")
    if g < 1 or ep < 1:
        raise PlannerError(f"{ge} {g} and {ee} {ep} must be at least 1")
    if g % ep:
        fits = [d for d in range(1, g + 1) if g % d == 0]
        raise PlannerError(f"{ee} {ep} does not divide {ge} {g}: SGLang splits an engine's "
                           f"experts over ep of its GPUs; use one of {', '.join(map(str, fits))}")
    if model.num_experts % ep:
        raise PlannerError(f"{ee} {ep} does not divide the {model.num_experts} routed experts of "
                           f"{model.key}; use an ep that divides both them and {ge} {g}")
    gpn = system.gpus_per_node
    if all(n * gpn % g for n in counts):
        where = (f"{counts[0]} node(s)" if len(counts) == 1
                 else f"{counts[0]} to {counts[-1]} nodes")
        raise PlannerError(f"{ge} {g} divides none of the GPU counts searched ({gpn} per node, "
                           f"{where}): engines tile their GPUs; use a divisor of {gpn} or a "
                           "multiple of it")
    if not engine_fits_heads(model, g):
        kv = _kv_heads(model)
        fits = ", ".join(map(str, engine_sizes_for_heads(model.num_heads, kv)))
        heads = f"{model.num_heads} attention heads" + (f" and {kv} KV heads" if kv else "")
        kv_rule = f", and divide {kv} or be a multiple of it" if kv else ""
        raise PlannerError(f"{ge} {g} does not fit the {heads} of {model.key}: SGLang splits "
                           f"attention over the engine's GPUs, which must divide the heads{kv_rule} "
                           "(SGLang 0.5.16 qwen3_moe.py:458-468, mixtral.py:137-147, "
                           f"deepseek_v2.py:1603); use one of {fits}")
    weights = _weights_bytes(model) / g / GIB
    shares = {p: engine_mem_fraction(rl, system, p, g) * system.gpu_memory_gib for p in placements}
    if all(weights > 0.9 * share for share in shares.values()):
        best = max(shares.values())
        raise PlannerError(f"{ge} {g}: an engine of {g} GPU(s) holds {weights:.0f} GiB of BF16 "
                           f"weights per GPU, more than 90% of its memory share ({best:.0f} GiB "
                           f"of {system.name}'s {system.gpu_memory_gib:.1f} usable), so no KV "
                           "cache fits; pin more GPUs per engine")


def _nothing_fits(m: MoEModel, system: System, nodes: int | None, max_nodes: int, pins: Pins,
                  engine: tuple[int, int] | None, trained: bool,
                  train_errors: dict[int, PlannerError]) -> None:
    """Raise the reason no GRPO layout was found: the training search's own error (that of the
    biggest pool searched) when no training layout fits anywhere, else the engines; the fix
    names what the request left free (a fixed node count is not a quota)."""
    where = f"{nodes} node(s)" if nodes else f"1 to {max_nodes} nodes"
    pinned = [f"{named(k)} {v}" for k, v in pins.fixed().items()]
    if engine is not None:
        pinned += [f"{named('engine_gpus')} {engine[0]}", f"{named('engine_ep')} {engine[1]}"]
    more = (f"plan more nodes ({named('nodes')})" if nodes else
            f"allow more nodes ({named('max_nodes')})")
    also = f", or change the pinned {', '.join(pinned)}" if pinned else ""
    head = f"no GRPO layout for {m.key} fits on {where} of {system.name}"
    if not trained and train_errors:
        why = train_errors[max(train_errors)].template
        raise PlannerError(f"{head}: no training layout fits ({why}); {more}{also}")
    raise PlannerError(f"{head}: training fits, but no SGLang engine size that divides the rollout "
                       f"GPUs leaves room for KV cache beside the model's weights; {more}{also}")


def plan_rl(request: RLPlanRequest) -> RLPlan:
    """Rank colocated and disaggregated GRPO layouts by cost per step (or step time); see
    :class:`RLPlanRequest`. Raises PlannerError, naming the request's fields, with the fix when
    nothing fits.
    """
    started = time.perf_counter()
    req = request
    m = get_model(req.model) if isinstance(req.model, str) else req.model
    system = get_system(req.instance_type, ultraserver_type=req.ultraserver_type)
    rl, nodes, precision, placements = req.rl, req.nodes, req.precision, req.placements
    objective, pins, engine, ep_backend = req.objective, req.pins, req.engine, req.ep_backend
    price_per_hour = req.price_per_hour
    cap = req.max_tokens_per_gpu
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise PlannerError(f"{named('max_tokens_per_gpu')} {cap!r} must be a whole number >= 1 "
                           "(tokens per GPU in one training micro-batch, as the launcher runs it)")
    check_precision(system, precision)
    if nodes is not None and nodes < 1:
        check_node_counts(nodes, None)
    if objective not in ("cost", "throughput"):
        raise PlannerError(f"objective must be cost or throughput, got {objective!r}")
    for p in placements:
        if p not in ("colocated", "disaggregated"):
            raise PlannerError(f"placement {p!r} is not one of colocated, disaggregated")
    check_node_counts(nodes, req.max_nodes)
    capped = check_domain(system, nodes, req.max_nodes, DEFAULT_RL_MAX_NODES)
    warnings = [capped] if capped else []
    if rl.mode != "on-policy" and "colocated" in placements:
        if placements == ("colocated",):
            raise PlannerError(
                f"an overlapped GRPO step ({rl.mode}, {rl.staleness} step(s) off-policy) needs "
                "rollout on its own GPUs: Miles refuses --colocate with train_async.py and "
                f"--fully-async; use placement disaggregated, or {named('off_policy_steps')} 0 "
                "without overlap")
        placements = tuple(p for p in placements if p != "colocated")
        warnings.append(f"{rl.mode} overlap runs disaggregated only (Miles refuses --colocate "
                        "with it): colocated layouts were not ranked")
    max_nodes = req.max_nodes
    max_nodes = min(max_nodes or DEFAULT_RL_MAX_NODES, system.max_run_nodes or 10**9)
    top_n = nodes or max_nodes
    counts = [nodes] if nodes else list(range(1, max_nodes + 1))
    if placements == ("disaggregated",) and top_n < 2:
        given = f"{named('nodes')} {nodes}" if nodes else f"{named('max_nodes')} {top_n}"
        raise PlannerError(f"a disaggregated GRPO step needs at least 2 nodes (one for "
                           f"training, one for rollout), got {given}; plan 2 or more nodes")
    # a pinned part of the training layout or of the engines is checked on its own first, so
    # its problem is reported naming it (the search below drops what does not fit silently)
    how = dict(precision=precision, max_tokens_per_gpu=cap, release=req.release,
               schedule=req.schedule, optimizer_bf16_moments=req.optimizer_bf16_moments)
    colocated_setup = training_setup(rl, system, True, **how)
    check_pins(m, system, pins, (), training_setup(rl, system, False, **how),
               ep_backend=ep_backend)
    if engine is not None:
        _check_engine(m, system, rl, engine, placements, counts)
    gpn = system.gpus_per_node
    cands: list[RLCandidate] = []
    train_errors: dict[int, PlannerError] = {}  # why no training layout fits, by pool searched
    trained = False  # some training layout fits some pool
    if "colocated" in placements:
        best = _best_training(m, system, colocated_setup, counts, pins, ep_backend,
                              price_per_hour, train_errors)
        trained |= bool(best)
        for n in counts:
            tc = best.get(n)
            if tc is None:
                continue
            for eng in engine_layouts(m, system, rl=rl, gpus=n * gpn,
                                      backend=tc.backend.backend, pinned=engine,
                                      placement="colocated"):
                # the training memory beside this engine (the search sized it for the rule's
                # default engine; both pass the rule, so the fit is the same)
                mem = estimate_memory(m, system, tc.layout, replace(
                    colocated_setup, rollout_engine_gpus=eng.gpus), tc.backend.backend)
                if mem.peak > mem.capacity:
                    continue
                cands.append(evaluate_rl(m, system, rl=rl, placement="colocated",
                                         training=replace(tc, memory=mem), rollout_nodes=n,
                                         engine=eng, price_per_hour=price_per_hour))
    if "disaggregated" in placements and top_n > 1:
        best = _best_training(m, system, training_setup(rl, system, False, **how),
                              train_pool_sizes(top_n), pins, ep_backend, price_per_hour,
                              train_errors)
        trained |= bool(best)
        for n in counts:
            for t, tc in best.items():
                r = n - t
                if r < 1:
                    continue
                for eng in engine_layouts(m, system, rl=rl, gpus=r * gpn,
                                          backend=tc.backend.backend, pinned=engine,
                                          placement="disaggregated"):
                    cands.append(evaluate_rl(m, system, rl=rl, placement="disaggregated",
                                             training=tc, rollout_nodes=r, engine=eng,
                                             price_per_hour=price_per_hour))
    if not cands:
        _nothing_fits(m, system, nodes, max_nodes, pins, engine, trained, train_errors)

    def key(c: RLCandidate):
        if objective == "cost" and c.dollars_per_step is not None:
            return (c.dollars_per_step, c.time.step, c.nodes)
        return (c.time.step, c.nodes)

    cands.sort(key=key)
    per_nodes: dict[int, RLCandidate] = {}
    for c in cands:
        per_nodes.setdefault(c.nodes, c)
    if cands[0].dollars_per_step is None:
        warnings.append(f"no public on-demand price for {system.name}; pass --price-per-hour "
                        "(ranked by step time)")
    if cands[0].placement == "colocated":
        warnings.append("colocated rollout assumes the engine's weights and KV cache are released "
                        "while training (Miles/slime offload)")
    return RLPlan(m, system, rl, precision, tuple(cands[:max(1, req.top)]),
                  tuple(per_nodes[n] for n in sorted(per_nodes)),
                  time.perf_counter() - started, tuple(warnings))

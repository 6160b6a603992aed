"""Parallel layouts, the training setup they run, and the rules a layout must obey.

Terms follow Megatron-Core (``megatron/core/parallel_state.py``):

- tp, cp, pp, dp: tensor, context, pipeline and data parallel sizes; world = tp*cp*pp*dp.
- ep, etp: expert parallel and expert tensor parallel sizes. With "MoE parallel folding" the
  expert layers regroup the tp*cp*dp GPUs of one pipeline stage as etp*ep*edp, so etp*ep must
  divide tp*cp*dp; edp (expert data parallel) = tp*cp*dp / (etp*ep).
- vpp: virtual pipeline (interleaved) chunks per pipeline rank.
- mbs: micro-batch size (sequences); a step runs gbs / (dp*mbs) micro-batches per pipeline. Under
  Miles' dynamic batching (``TrainingSetup.max_tokens_per_gpu``, what the kit's launcher runs)
  micro-batches are packed up to that token cap and mbs is ignored: memory and step time count
  token-capped micro-batches (``timing.micro_batching``), and the search's layouts are
  ``token_capped`` (mbs 1, not shown in the label).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, get_args

from infra.planner.errors import PlannerError
from infra.catalog.models import MoEModel
from infra.catalog.releases import RELEASES
from infra.trainer_contract import pipeline_split

# "fp8": per-tensor / block-scaled FP8 (Transformer Engine delayed or current scaling, DeepSeek's
# 1x128/128x128 tiles). "mxfp8": OCP microscaling FP8 (one E8M0 scale per 32 elements), which
# Blackwell tensor cores run natively at the FP8 rate and Megatron-Bridge's Blackwell recipes use.
Precision = Literal["bf16", "fp8", "mxfp8"]
Recompute = Literal["none", "selective", "full"]
# "1f1b": Megatron's (interleaved) 1F1B, expert all-to-all exposed.
# "a2a-overlap": 1F1B with Megatron's batch-level EP overlap (--overlap-moe-expert-parallel-comm):
#     one micro-batch's all-to-all hides behind another's compute.
# "dualpipe": DeepSeek's DualPipe (DeepSeek-V3 report, section 3.2.1): all-to-all and pipeline
#     traffic hidden behind compute, at the price of SMs reserved for communication.
Schedule = Literal["1f1b", "a2a-overlap", "dualpipe"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
SCHEDULES: tuple[str, ...] = get_args(Schedule)


def is_fp8(precision: str) -> bool:
    """True for both FP8 flavours: GEMMs at the FP8 rate, GEMM inputs stored in one byte."""
    return precision in ("fp8", "mxfp8")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    cp: int = 1
    etp: int = 1
    vpp: int = 1
    mbs: int = 1
    recompute: Recompute = "none"
    # micro-batches packed up to the setup's token cap (Miles' dynamic batching): mbs means
    # nothing to the launcher, so the label leaves it out
    token_capped: bool = False

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def edp(self) -> int:
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def label(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.vpp > 1:
            parts.append(f"VPP{self.vpp}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        parts += [f"EP{self.ep}"]
        if self.etp > 1:
            parts.append(f"ETP{self.etp}")
        parts += [f"DP{self.dp}"] + ([] if self.token_capped else [f"MBS{self.mbs}"])
        return " ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainingSetup:
    """What is being trained and how, independent of the layout."""

    seq_len: int = 4096
    global_batch: int = 256  # sequences per optimizer step
    precision: Precision = "bf16"
    optimizer_bf16_moments: bool = False  # Megatron --use-precision-aware-optimizer, bf16 Adam moments
    schedule: Schedule = "1f1b"
    moe_imbalance: float = 1.0  # slowest EP rank's load / mean (1.0 = balanced routing)
    # RL: rollout engine sharing the training GPUs (colocated)
    colocate_rollout: bool = False
    rollout_offload: bool = True  # engine weights and KV cache released during training (Miles/slime)
    rollout_tokens_per_gpu: int = 0  # KV-cache tokens the engine keeps resident per GPU
    rollout_mem_fraction: float = 0.0  # or: a static fraction of GPU memory (SGLang mem_fraction_static)
    rollout_engine_gpus: int = 0  # GPUs one rollout engine spans (0: the engine rule's choice,
    #                               memory.rollout_engine_gpus)
    release: str = "baseline"  # software release the step model assumes (infra/catalog/releases.py)
    # 0: fixed micro-batches of mbs sequences of seq_len (Megatron's own batching, as the
    # published runs the step model is validated on). N: Miles' dynamic batching, which the kit's
    # launcher always runs (rltrainer.contract DEFAULT_MAX_TOKENS_PER_GPU says how it packs):
    # every micro-batch holds up to N tokens per GPU whatever mbs is, and the memory model sizes
    # activations for that (memory.micro_batch_tokens).
    max_tokens_per_gpu: int = 0
    # with max_tokens_per_gpu: the longest single sample (prompt + response), which runs alone in
    # a micro-batch when it exceeds the cap x cp; 0 = seq_len
    longest_sample: int = 0

    def __post_init__(self) -> None:
        problems = setup_problems(self)
        if problems:
            raise PlannerError("invalid training setup: " + "; ".join(problems))


def _choice(field: str, value, allowed: tuple) -> str | None:
    if value in allowed:
        return None
    return f"{field}={value!r} is not one of {', '.join(allowed)}; use one of those"


def setup_problems(s: TrainingSetup) -> list[str]:
    """Every field of ``s`` that breaks its rule, as 'field=value ...; fix' sentences."""
    out: list[str] = []

    def whole(field: str, value, minimum: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            out.append(f"{field}={value!r} must be a whole number >= {minimum}")

    whole("seq_len", s.seq_len, 1)
    whole("global_batch", s.global_batch, 1)
    whole("rollout_tokens_per_gpu", s.rollout_tokens_per_gpu, 0)
    whole("rollout_engine_gpus", s.rollout_engine_gpus, 0)
    whole("max_tokens_per_gpu", s.max_tokens_per_gpu, 0)
    whole("longest_sample", s.longest_sample, 0)
    for field, allowed in (("precision", PRECISIONS), ("schedule", SCHEDULES),
                           ("release", tuple(RELEASES))):
        problem = _choice(field, getattr(s, field), allowed)
        if problem:
            out.append(problem)
    for field in ("optimizer_bf16_moments", "colocate_rollout", "rollout_offload"):
        if not isinstance(getattr(s, field), bool):
            out.append(f"{field}={getattr(s, field)!r} must be true or false")
    imb = s.moe_imbalance
    if isinstance(imb, bool) or not isinstance(imb, (int, float)) or not 1.0 <= imb <= 4.0:
        out.append(f"moe_imbalance={imb!r} must be a number from 1.0 (balanced routing) to 4.0")
    frac = s.rollout_mem_fraction
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 <= frac < 1.0:
        out.append(f"rollout_mem_fraction={frac!r} must be a fraction from 0 to below 1 "
                   f"(SGLang mem_fraction_static, e.g. 0.7)")
    return out


# How the layers split over the pipeline stages is the trainer's rule, imported, not restated:
# ``pipeline_split`` (images/trainer/src/rltrainer/contract/pipeline.py). When pp does not divide
# the layers the launcher passes that split to Megatron (--decoder-first/last-pipeline-num-layers;
# Megatron-LM 37f9161 megatron/training/arguments.py:623-636 refuses such a pp without one), and
# Megatron's middle stages are equal, so the fullest stage can hold more than ceil(layers / pp)
# (48 over 14: 6 + 12 x 3 + 6). The step time and the end stages' memory count that stage.
def fullest_stage_layers(model: MoEModel, pp: int) -> int:
    """Layers on the most loaded of ``pp`` stages (vpp 1) under the trainer's split."""
    split = pipeline_split(model.num_layers, pp)
    return split.fullest if split is not None else math.ceil(model.num_layers / pp)


def pipeline_split_problem(model: MoEModel, pp: int) -> str | None:
    """Why ``pp`` does not split ``model``'s layers evenly, for ``PlanRequest(even_pipeline=True)``
    (a trainer image from before the launcher passed uneven splits); None when it does."""
    if pp <= 1 or model.num_layers % pp == 0:
        return None
    fits = [d for d in range(1, model.num_layers + 1) if model.num_layers % d == 0]
    return (f"pp={pp} does not divide the {model.num_layers} layers of {model.key}, and "
            "even_pipeline keeps to even splits; use a pp that divides "
            f"{model.num_layers} ({', '.join(map(str, fits))})")


def uneven_split_note(model: MoEModel, pp: int) -> str | None:
    """What the launcher passes for a pp that does not divide the layers (vpp 1); None when it does."""
    split = pipeline_split(model.num_layers, pp)
    if split is None or split.even:
        return None
    return (f"{model.num_layers} layers do not split evenly over {pp} pipeline stages: the launcher "
            f"passes {' '.join(split.megatron_args())} ({split.describe()}); the step time charges "
            f"the fullest stage, {split.fullest} layers")


# The trainer's run config (rltrainer.contract TRAINING_SIZE_KEYS: tp, pp, cp, ep, etp) has no
# virtual-pipeline size and its launcher passes neither --num-virtual-stages-per-pipeline-rank
# nor --num-layers-per-virtual-pipeline-stage, so Megatron runs vpp 1 (arguments.py:620-621 at
# 37f9161 sets virtual_pipeline_model_parallel_size None without them).
INTERLEAVING_RULE = ("the kit's launcher runs no interleaved pipeline (the trainer's run config "
                     "has no virtual-pipeline size, so Megatron would run vpp 1)")


def layout_problem(model: MoEModel, layout: Layout, setup: TrainingSetup,
                   gpus_per_node: int) -> str | None:
    """First divisibility rule the layout breaks, as a sentence; None when it is well-formed.
    ``gpus_per_node`` is the NVLink reach (``System.nvlink_gpus``): a node, or an NVLink domain."""
    L = layout
    if L.recompute not in RECOMPUTES:
        return f"recompute={L.recompute!r} is not one of {', '.join(RECOMPUTES)}"
    if min(L.tp, L.pp, L.ep, L.dp, L.cp, L.etp, L.vpp, L.mbs) < 1:
        return "every parallel size must be at least 1"
    if L.tp > gpus_per_node:
        return f"tp={L.tp} exceeds the {gpus_per_node} GPUs of one node (tensor parallelism stays on NVLink)"
    if model.num_heads % L.tp:
        return f"tp={L.tp} does not divide the {model.num_heads} attention heads of {model.key}"
    groups = model.kv_groups
    if groups % L.tp and L.tp % groups:
        return (f"tp={L.tp} neither divides nor is a multiple of the {groups} key/value heads "
                f"of {model.key}")
    if model.num_experts % L.ep:
        return f"ep={L.ep} does not divide the {model.num_experts} routed experts of {model.key}"
    if (L.tp * L.cp * L.dp) % (L.etp * L.ep):
        return (f"etp x ep = {L.etp * L.ep} does not divide the {L.tp * L.cp * L.dp} GPUs of one "
                f"pipeline stage (tp x cp x dp)")
    if L.etp > gpus_per_node:
        return f"etp={L.etp} exceeds the {gpus_per_node} GPUs of one node"
    if model.expert_ffn % L.etp:
        return f"etp={L.etp} does not divide the expert FFN size {model.expert_ffn}"
    chunks = L.pp * L.vpp
    if chunks > model.num_layers:
        return (f"pp x vpp = {chunks} pipeline chunks exceed the {model.num_layers} layers "
                f"of {model.key}")
    if L.vpp > 1 and L.pp == 1:
        return "vpp > 1 needs pp > 1"
    if setup.global_batch % (L.dp * L.mbs):
        return (f"global batch {setup.global_batch} does not divide into dp x mbs = "
                f"{L.dp * L.mbs} sequences per micro-batch round")
    micro = setup.global_batch // (L.dp * L.mbs)
    if L.vpp > 1 and micro % L.pp:
        return (f"interleaved pipelining needs the {micro} micro-batches per step to be a "
                f"multiple of pp={L.pp}")
    seq_split = L.tp * L.cp * (2 if L.cp > 1 else 1)
    if setup.seq_len % seq_split:
        return f"sequence length {setup.seq_len} does not divide by {seq_split} (tp x cp, x2 with cp)"
    return None

"""Which rollout-engine sizes the model's attention heads allow: one rule for the run-config
validator, the launcher (``rltrainer.launch``) and the kit (infra/trainer_contract.py).

Miles v0.1.0 starts each SGLang engine with ``tp_size`` = ``--rollout-num-gpus-per-engine``
(miles/backends/sglang_utils/sglang_engine.py:731). SGLang 0.5.16 splits the attention heads over
``attn_tp_size`` = tp_size / attn_dp_size / attn_cp_size, where attn_dp_size is dp_size only with
``--enable-dp-attention`` (sglang/srt/layers/dp_attention.py:293-297); the launcher passes neither
dp-attention nor attention CP, so attn_tp_size is the engine's GPU count. At model load:

- grouped-query attention (Qwen3-MoE, sglang/srt/models/qwen3_moe.py:458-468; Mixtral, with
  tp_size itself, mixtral.py:137-147): ``num_heads % attn_tp == 0``, and for the KV heads
  ``kv_heads % attn_tp == 0`` when kv_heads >= attn_tp, else ``attn_tp % kv_heads == 0``
  (replicated);
- multi-head latent attention (DeepSeek-V3, Kimi K2: deepseek_v2.py:1603): ``num_heads % attn_tp == 0``.

Megatron's model arguments carry the head counts: ``--num-attention-heads`` and, with
``--group-query-attention``, ``--num-query-groups`` (the KV heads; without the flag Megatron
ignores it, megatron/training/arguments.py:1436-1439).
"""

from __future__ import annotations

from .problems import Problem
from .schema import RolloutParallel, flag_value

HEADS_RULE_SOURCE = "SGLang 0.5.16 qwen3_moe.py:458-468, mixtral.py:137-147, deepseek_v2.py:1603"


def engine_heads_fit(tp: int, num_heads: int, kv_heads: int | None = None) -> bool:
    """Whether SGLang splits ``num_heads`` query heads (and ``kv_heads`` KV heads; None: as many
    as the query heads, or MLA) over an engine of ``tp`` attention-TP GPUs (module docstring)."""
    if tp < 1 or num_heads < 1 or num_heads % tp:
        return False
    if not kv_heads:
        return True
    return kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0


def engine_sizes_for_heads(num_heads: int, kv_heads: int | None = None) -> list[int]:
    """Every engine size the heads allow (all divide ``num_heads``)."""
    return [t for t in range(1, num_heads + 1) if engine_heads_fit(t, num_heads, kv_heads)]


def heads_rule(num_heads: int, kv_heads: int | None = None) -> str:
    """The rule as a sentence, for problem texts."""
    kv = (f" and its {kv_heads} KV heads must split evenly over them or be replicated evenly "
          f"(tp divides {kv_heads}, or {kv_heads} divides tp)") if kv_heads else ""
    return (f"SGLang splits the attention heads over the engine's tensor-parallel GPUs: "
            f"tp must divide the {num_heads} attention heads{kv} ({HEADS_RULE_SOURCE})")


def engine_heads_problem(gpus_per_engine: int, num_heads: int, kv_heads: int | None, source: str,
                         path: str = "parallel.rollout.gpus_per_engine") -> Problem | None:
    """Why an engine of ``gpus_per_engine`` GPUs cannot load the model (None when it can).
    ``source`` says where the head counts come from ("model.megatron_args sets
    --num-attention-heads 32")."""
    if engine_heads_fit(gpus_per_engine, num_heads, kv_heads):
        return None
    fits = engine_sizes_for_heads(num_heads, kv_heads)
    return Problem(
        path,
        gpus_per_engine,
        f"{heads_rule(num_heads, kv_heads)}; {source}, which an engine of {gpus_per_engine} GPUs does not fit",
        f"use gpus_per_engine {', '.join(map(str, fits))} (and a divisor of it as ep)",
    )


def _int_flag(model_args: tuple[str, ...] | list[str], flag: str) -> int | None:
    raw = flag_value(model_args, flag)
    return int(raw) if raw is not None and raw.isdigit() and int(raw) > 0 else None


def engine_heads_problems(ro: RolloutParallel, model_args: tuple[str, ...] | list[str], where: str) -> list[Problem]:
    """The heads problem of ``ro.gpus_per_engine`` for the heads ``model_args`` set: none when they
    set no --num-attention-heads. With --sglang-enable-dp-attention and --sglang-dp-size d there
    (the launcher passes neither) the heads split over gpus_per_engine / d GPUs."""
    heads = _int_flag(model_args, "--num-attention-heads")
    if heads is None:
        return []
    flags = {a.split("=", 1)[0] for a in model_args}
    kv = _int_flag(model_args, "--num-query-groups") if "--group-query-attention" in flags else None
    tp = ro.gpus_per_engine
    dp = _int_flag(model_args, "--sglang-dp-size") if "--sglang-enable-dp-attention" in flags else None
    if dp and dp > 1:
        if tp % dp:
            return []  # SGLang refuses that itself, before loading the model
        tp //= dp
    if engine_heads_fit(tp, heads, kv):
        return []
    source = f"{where} sets --num-attention-heads {heads}" + (f" and --num-query-groups {kv}" if kv else "")
    if tp == ro.gpus_per_engine:
        problem = engine_heads_problem(tp, heads, kv, source)
        return [problem] if problem else []
    fits = ", ".join(map(str, engine_sizes_for_heads(heads, kv)))
    return [Problem(
        "parallel.rollout.gpus_per_engine",
        ro.gpus_per_engine,
        f"{heads_rule(heads, kv)}; with dp-attention tp is gpus_per_engine / --sglang-dp-size {dp} = {tp}, "
        f"and {source}, which {tp} does not fit",
        f"use a gpus_per_engine / --sglang-dp-size of {fits}",
    )]

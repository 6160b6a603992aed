"""How a GRPO step's phases combine, per mode: on-policy, batch overlap, or streaming (async).

The three modes (``RLSetup.mode``):

- ``on-policy``: rollout, weight sync and training run in turn (Miles ``train.py``; NeMo-RL
  on-policy). Step = rollout + sync + train; the longest response bounds the rollout.
- ``batch`` (k-step off-policy by batches; Miles ``train_async.py`` with
  ``--update-weights-interval K``): the engines generate the next whole batch while the trainer
  trains on this one, and weights are pushed every K steps, each push waiting for the batch in
  flight. Step = max(rollout, train) + sync / K; each batch still waits for its longest response.
- ``stream`` (fully asynchronous; Miles ``--fully-async``, NeMo-RL async GRPO with in-flight
  weight updates, verl ``fully_async_policy`` with partial rollouts): the engines never drain.
  A response may be generated under several weight versions; finished groups queue for the
  trainer, at most K steps stale. In steady state the engines stay full (the running batch is
  what the KV cache and the scheduler allow), so the long tail of response lengths is spread
  over steps instead of paid in each. A step costs the slowest of:
      training + its weight-sync stall (the trainer sends the weights),
      generating one batch's worth of tokens at continuous-batching throughput + the engines'
      pause to load the weights,
      the sync itself.
  The engines' pause and the trainer's stall are both the sync here: the kit models the sync as
  one NCCL broadcast both sides take part in (no published source separates them).

Engine memory follows the placement: engines that share GPUs with training keep the colocated
fraction (``request.COLOCATED_MEM_FRACTION``); engines on their own GPUs take SGLang's standalone
default (``standalone_mem_fraction``).
"""

from __future__ import annotations

import math

from infra.planner.hardware import System
from infra.planner.request import COLOCATED_MEM_FRACTION, RLSetup

# SGLang 0.5.16 python/sglang/srt/server_args.py, ServerArgs._handle_gpu_memory_settings (the
# version Miles v0.1.0 builds on; ../shared/upstream/sglang-0.5.16/server_args.py, read
# 2026-12-01): with mem_fraction_static unset, reserved MiB = 512 + 1.5 x chunked_prefill_size
# + tp x pp / 8 x 1024 + 2 x decode CUDA-graph max_bs, at least 10 GiB on GPUs over 60 GiB;
# fraction = (capacity - reserved) / capacity. chunked_prefill_size 8192 below 160 GiB, 16384
# above; max_bs 512 (256 for tp < 4 below 160 GiB). That is 0.82 on an 80 GiB H100 at TP8, 0.90
# on a 141 GiB H200, 0.85 on a 179 GiB B200. vLLM's default gpu_memory_utilization is 0.9
# (vllm/config/cache.py, CacheConfig, vllm-project/vllm @ c1d86421); NeMo-RL's async
# recipes set 0.8 (examples/configs/recipes/llm/performance/*-async-*.yaml @ r0.6.0).
_SGLANG_MIN_RESERVE_MIB = 10 * 1024


def standalone_mem_fraction(system: System, engine_gpus: int) -> float:
    """SGLang's default mem_fraction_static for an engine of ``engine_gpus`` GPUs that has its
    GPUs to itself (see the comment above for the source)."""
    cap_mib = system.gpu_memory_gib * 1024
    big = cap_mib >= 160 * 1024
    chunked = 16384 if big else 8192
    max_bs = 512 if (big or engine_gpus >= 4) else 256
    reserved = 512 + 1.5 * chunked + engine_gpus / 8 * 1024 + 2 * max_bs
    if cap_mib > 60 * 1024:
        reserved = max(reserved, _SGLANG_MIN_RESERVE_MIB)
    return round((cap_mib - reserved) / cap_mib, 3)


def engine_mem_fraction(rl: RLSetup, system: System, placement: str, engine_gpus: int) -> float:
    """The engine's memory share: the setup's when given, else what the placement implies."""
    if rl.mem_fraction is not None:
        return float(rl.mem_fraction)
    if placement == "colocated":
        return COLOCATED_MEM_FRACTION
    return standalone_mem_fraction(system, engine_gpus)


def compose_step(rl: RLSetup, *, rollout: float, stream_rollout: float, sync: float,
                 train: float) -> tuple[float, str, float]:
    """(step seconds, the phase that bounds it, the generation time that counts) for the
    setup's mode. ``rollout`` is one batch bounded by its longest response; ``stream_rollout``
    one batch's worth of tokens at steady continuous-batching throughput."""
    mode = rl.mode
    if mode == "on-policy":
        parts = {"rollout": rollout, "sync": sync, "train": train}
        return rollout + sync + train, max(parts, key=parts.get), rollout
    k = rl.staleness
    if mode == "batch":
        share = sync / k  # one push every K steps
        step = max(rollout, train) + share
        return step, ("rollout" if rollout >= train else "train"), rollout
    bounds = {"train": train + sync, "rollout": stream_rollout + sync, "sync": sync}
    bound = max(bounds, key=bounds.get)
    return bounds[bound], bound, stream_rollout


def stream_batch(per_engine: float, kv_cap: float, max_running: int, staleness: int) -> float:
    """Running batch of one engine in steady streaming generation: as many sequences as the KV
    cache and the scheduler allow, and no more than the K + 1 batches that may be in flight."""
    return max(1.0, min(kv_cap, max_running, per_engine * (staleness + 1)))


def iterations_for(tokens: float, batch: float) -> int:
    return max(1, math.ceil(tokens / batch))


def miles_mode_args(rl: RLSetup, *, placement: str, train_nodes: int, gpus_per_node: int,
                    rollout_gpus: int, engine_gpus: int, mem_fraction: float) -> list[str]:
    """Miles v0.1.0 arguments that select the planned mode (the entry point is the first item:
    ``train.py`` or ``train_async.py``). Checked against Miles' own parser in
    tests/manifests/test_miles_mode_contract.py. Miles refuses ``--colocate`` with
    train_async.py and with ``--fully-async`` (miles/utils/arguments.py), so an overlapped mode
    is always disaggregated."""
    args = ["train.py" if rl.mode == "on-policy" else "train_async.py",
            "--actor-num-nodes", str(train_nodes),
            "--actor-num-gpus-per-node", str(gpus_per_node),
            "--num-gpus-per-node", str(gpus_per_node),
            "--rollout-num-gpus-per-engine", str(engine_gpus),
            "--sglang-mem-fraction-static", f"{mem_fraction:g}"]
    if placement == "colocated":
        args.append("--colocate")
    else:
        args += ["--rollout-num-gpus", str(rollout_gpus)]
    if rl.mode == "batch":
        args += ["--update-weights-interval", str(rl.staleness)]
    elif rl.mode == "stream":
        # groups older than K weight versions go back to the data buffer; in-flight requests
        # keep their KV cache across a weight update ("in_place": partial rollouts)
        args += ["--fully-async", "--max-weight-staleness", str(rl.staleness),
                 "--pause-generation-mode", "in_place"]
    return args

"""How long the planner takes to search the layouts of DeepSeek-V3 on 1,024 GPUs.

    python benchmarks/plan_search.py

Runs the training search for DeepSeek-V3 (671B, FP8, global batch 8192, sequence 4096) on 128
p5.48xlarge (1,024 H100), and the GRPO search (colocated at 128 nodes plus disaggregated
splits of the 128 nodes into training and rollout pools, every engine size) for the same model
on 128 p5en.48xlarge (on-policy, and streaming 2-step off-policy, which ranks the
disaggregated splits only), three times each, cold caches, and prints the best and median wall
time.
Both wall time and CPU time are printed: on a shared machine (other jobs running) wall time
includes waiting for a core, CPU time is the search's own work. The goal is under one second.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.planner import PlanRequest, RLPlanRequest, TrainingSetup, plan  # noqa: E402
from infra.planner import memory, timing  # noqa: E402
from infra.planner.rl import RLSetup, plan_rl  # noqa: E402

RUNS = 3


def _cold() -> None:
    """Empty the planner's memo caches so each run measures a cold search."""
    for cached in (timing._layer_times_cached, memory.stage_params,
                   memory.activation_bytes_per_layer):
        cached.cache_clear()


def main() -> int:
    times, cpu = [], []
    for _ in range(RUNS):
        _cold()  # measure cold searches, not cache hits
        started, cpu0 = time.perf_counter(), time.process_time()
        result = plan(PlanRequest("deepseek-v3", "p5.48xlarge", nodes=128, setup=TrainingSetup(
            global_batch=8192, precision="fp8", seq_len=4096)))
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu0)
    best = result.best
    print(f"DeepSeek-V3 on 128 x p5.48xlarge (1024 GPUs): {result.evaluated} layouts, "
          f"{len(result.candidates)} shown, {len(result.rejected)} rejected")
    print(f"search time: best {min(times) * 1000:.0f} ms, median "
          f"{statistics.median(times) * 1000:.0f} ms over {RUNS} runs (CPU "
          f"{statistics.median(cpu) * 1000:.0f} ms)")
    print(f"best layout: {best.layout.label()} recompute {best.layout.recompute}, "
          f"{best.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {best.memory.peak:.1f} GiB/GPU, "
          f"EP backend {best.backend.backend}")
    for label, setup in (("on-policy", RLSetup()), ("stream 2-off", RLSetup(off_policy_steps=2))):
        rl_times, rl_cpu = [], []
        for _ in range(RUNS):
            _cold()
            started, cpu0 = time.perf_counter(), time.process_time()
            rl = plan_rl(RLPlanRequest("deepseek-v3", "p5en.48xlarge", setup, nodes=128,
                                      precision="fp8"))
            rl_times.append(time.perf_counter() - started)
            rl_cpu.append(time.process_time() - cpu0)
        b = rl.best
        print(f"GRPO search ({label}), DeepSeek-V3 on 128 x p5en.48xlarge (1024 GPUs): best "
              f"{min(rl_times) * 1000:.0f} ms, median {statistics.median(rl_times) * 1000:.0f} ms "
              f"over {RUNS} runs (CPU {statistics.median(rl_cpu) * 1000:.0f} ms)")
        print(f"best GRPO layout: {b.placement}, {b.engine.label()}, training "
              f"{b.training.layout.label()}, step {b.time.step:.0f} s bound by {b.time.bound} "
              f"(rollout {b.time.rollout:.0f}, sync {b.time.sync:.0f}, train {b.time.train:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

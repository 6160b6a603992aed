"""Unit behaviour of the GRPO step model (infra/planner/rl.py): phases, placements, ranking."""

from __future__ import annotations

import pytest

from infra.planner import PlannerError, RLPlanRequest, get_model, get_system
from infra.planner.rl import (
    EngineLayout, RLSetup, decode_iteration_s, engine_kv_tokens, plan_rl, rollout_time,
)

QWEN30 = get_model("qwen3-30b-a3b")
P5EN = get_system("p5en.48xlarge")
SHORT = RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048)


def test_decode_iteration_grows_with_batch_and_context():
    t = lambda b, c: decode_iteration_s(QWEN30, P5EN, engine_gpus=8, engine_ep=8,  # noqa: E731
                                        backend="nccl", batch=b, context=c)
    assert t(1, 1000) < t(64, 1000) < t(512, 1000)
    assert t(64, 1000) < t(64, 8000)


def test_engine_spanning_more_nodes_pays_for_cross_node_all_reduces():
    ds = get_model("deepseek-v3")
    t = lambda g: decode_iteration_s(ds, P5EN, engine_gpus=g, engine_ep=g,  # noqa: E731
                                     backend="nccl", batch=8, context=1000)
    # 32 GPUs (4 nodes) hold half the weights per GPU of 16 (2 nodes), yet at a small batch the
    # two all-reduces per layer across four nodes make each iteration slower
    assert t(32) > 1.3 * t(16)


def test_longest_response_bounds_the_rollout():
    eng = EngineLayout(gpus=8, ep=8, engines=1)
    short = rollout_time(QWEN30, P5EN, rl=RLSetup(prompts=1, samples_per_prompt=1,
                                                  max_response_len=1024), engine=eng,
                         backend="nccl")
    long = rollout_time(QWEN30, P5EN, rl=RLSetup(prompts=1, samples_per_prompt=1,
                                                 max_response_len=8192), engine=eng,
                        backend="nccl")
    assert short[1] == 1024 and long[1] == 8192  # iterations = max response for one sample
    assert long[0] > 7 * short[0]


def test_kv_cache_is_what_the_memory_share_leaves_after_weights():
    assert engine_kv_tokens(QWEN30, P5EN, engine_gpus=8, mem_fraction=0.7) > \
        engine_kv_tokens(QWEN30, P5EN, engine_gpus=2, mem_fraction=0.7) > 0


def test_colocated_step_is_the_sum_and_overlap_takes_the_longer_phase():
    plain = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, nodes=3,
                                  placements=("disaggregated",), top=50))
    over = plan_rl(RLPlanRequest(
        "qwen3-30b-a3b", "p5en.48xlarge",
        RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048, overlap=True),
        nodes=3, placements=("disaggregated",), top=50))
    for c in plain.candidates:
        t = c.time
        assert t.step == pytest.approx(t.rollout + t.sync + t.train)
    for c in over.candidates:
        t = c.time
        assert t.step == pytest.approx(max(t.rollout, t.train) + t.sync)
    assert over.best.time.step < plain.best.time.step


def test_engines_divide_the_rollout_pool_and_cost_follows_nodes():
    result = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, max_nodes=3, top=100))
    for c in result.candidates:
        pool = c.rollout_nodes * P5EN.gpus_per_node
        assert c.engine.gpus * c.engine.engines == pool
        assert c.dollars_per_step == pytest.approx(
            P5EN.price_per_hour * c.nodes * c.time.step / 3600)
    costs = [c.dollars_per_step for c in result.candidates]
    assert costs == sorted(costs)
    assert [c.nodes for c in result.best_per_nodes] == sorted({c.nodes for c in
                                                               result.best_per_nodes})


def test_throughput_objective_ranks_by_step_time():
    result = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, max_nodes=3, top=20,
                                   objective="throughput"))
    steps = [c.time.step for c in result.candidates]
    assert steps == sorted(steps)


def test_mxfp8_rl_plan_is_refused_on_hopper():
    with pytest.raises(PlannerError, match="precision='mxfp8' needs Blackwell"):
        plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, nodes=1, precision="mxfp8"))


def test_nothing_fits_is_one_error_with_the_fix():
    with pytest.raises(PlannerError, match="allow more nodes"):
        plan_rl(RLPlanRequest("kimi-k2", "p5.48xlarge", SHORT, nodes=1))

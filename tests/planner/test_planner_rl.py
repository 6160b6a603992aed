"""Unit behaviour of the GRPO step model (infra/planner/rl.py): phases, placements, ranking."""

from __future__ import annotations

import pytest

from infra.planner import PlannerError, RLPlanRequest, get_model, get_system
from infra.planner.rl import (
    EngineLayout, RLSetup, decode_iteration_s, engine_kv_tokens, engine_layouts, plan_rl, rollout_time,
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


def test_engine_search_proposes_only_sizes_the_attention_heads_allow():
    # SGLang 0.5.16 qwen3_moe.py:458-468: the engine's TP size must divide qwen3-30b-a3b's 32
    # heads (and 4 KV heads, or be a multiple of them); a 64-GPU engine fails at model load
    for backend in ("nccl", "deepep-nvshmem"):
        sizes = {e.gpus for e in engine_layouts(QWEN30, P5EN, rl=SHORT, gpus=64, backend=backend)}
        assert 64 not in sizes and 32 in sizes
    # mixtral-8x22b: 48 heads over 8 KV heads leave 1, 2, 4, 8, 16 of the searched sizes
    mixtral = get_model("mixtral-8x22b")
    assert {e.gpus for e in engine_layouts(mixtral, P5EN, rl=SHORT, gpus=64, backend="nccl")} <= {1, 2, 4, 8, 16}


def test_throughput_objective_ranks_by_step_time():
    result = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, max_nodes=3, top=20,
                                   objective="throughput"))
    steps = [c.time.step for c in result.candidates]
    assert steps == sorted(steps)


def test_mxfp8_rl_plan_is_refused_on_hopper():
    with pytest.raises(PlannerError, match="precision='mxfp8' needs Blackwell"):
        plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", SHORT, nodes=1, precision="mxfp8"))


def test_nothing_fits_is_one_error_with_the_fix():
    # a fixed node count: the fix is more nodes, not a bigger quota
    with pytest.raises(PlannerError, match=r"no training layout fits \(kimi-k2 does not fit on 1 "
                                           r"node\(s\) .*\); plan more nodes \(nodes\)$"):
        plan_rl(RLPlanRequest("kimi-k2", "p5.48xlarge", SHORT, nodes=1))
    with pytest.raises(PlannerError, match=r"allow more nodes \(max_nodes\)$"):
        plan_rl(RLPlanRequest("kimi-k2", "p5.48xlarge", SHORT, max_nodes=2))


# --- asynchronous modes and the engines' memory share (issue #23) -----------------------------

def _disagg(rl: RLSetup, nodes: int = 3):
    return plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", rl, nodes=nodes,
                                 placements=("disaggregated",), top=50))


def test_batch_overlap_takes_the_longer_phase_plus_a_kth_of_the_sync():
    rl = RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048, overlap="batch",
                 off_policy_steps=2)
    for c in _disagg(rl).candidates:
        t = c.time
        assert t.mode == "batch"
        assert t.step == pytest.approx(max(t.rollout, t.train) + t.sync / 2)


def test_stream_step_is_the_slowest_of_train_plus_stall_generation_and_sync():
    rl = RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048, off_policy_steps=4)
    assert rl.mode == "stream" and rl.staleness == 4
    for c in _disagg(rl).candidates:
        t = c.time
        parts = {"train": t.train + t.sync, "rollout": t.rollout + t.sync, "sync": t.sync}
        assert t.step == pytest.approx(max(parts.values()))
        assert t.bound == max(parts, key=parts.get)


def test_staleness_spreads_the_long_tail_over_steps():
    eng = EngineLayout(gpus=8, ep=8, engines=1)
    base = dict(prompts=4, samples_per_prompt=8, max_response_len=8192, mean_response_len=1024)
    tail = rollout_time(QWEN30, P5EN, rl=RLSetup(**base), engine=eng, backend="nccl")
    k1 = rollout_time(QWEN30, P5EN, rl=RLSetup(**base, off_policy_steps=1), engine=eng,
                      backend="nccl", stream=True)
    k8 = rollout_time(QWEN30, P5EN, rl=RLSetup(**base, off_policy_steps=8), engine=eng,
                      backend="nccl", stream=True)
    assert tail[1] == k1[1] == 8192  # one step of slack: the longest response still bounds it
    assert k8[1] == 1024 and k8[0] < tail[0] / 4  # eight steps: only the mean tokens count


def test_engine_scheduler_cap_bounds_the_running_batch():
    # NeMo-RL's async vLLM engines run at most 128 requests (AsyncLLM's default max_num_seqs);
    # 512 samples on one engine then take four times the iterations of an uncapped engine
    eng = EngineLayout(gpus=8, ep=8, engines=1)
    base = dict(prompts=64, samples_per_prompt=8, max_response_len=2048, mean_response_len=1024,
                off_policy_steps=8)
    free = rollout_time(QWEN30, P5EN, rl=RLSetup(**base), engine=eng, backend="nccl",
                        stream=True)
    capped = rollout_time(QWEN30, P5EN, rl=RLSetup(**base, max_running=128), engine=eng,
                          backend="nccl", stream=True)
    assert capped[2] == pytest.approx(128) and free[2] > 128
    assert capped[1] >= 4 * 1024 > free[1] and capped[0] > free[0]
    sync = rollout_time(QWEN30, P5EN, rl=RLSetup(**{**base, "off_policy_steps": 0},
                                                 max_running=128), engine=eng, backend="nccl")
    assert sync[1] >= 512 * 1024 / 128  # on-policy waves are capped the same way


def test_engine_memory_follows_the_placement():
    from infra.planner.rl_modes import engine_mem_fraction, standalone_mem_fraction

    h100 = get_system("p5.48xlarge")
    assert standalone_mem_fraction(h100, 8) == pytest.approx(0.818, abs=0.002)
    assert standalone_mem_fraction(P5EN, 8) == pytest.approx(0.897, abs=0.002)
    assert engine_mem_fraction(RLSetup(), P5EN, "colocated", 8) == 0.7
    assert engine_mem_fraction(RLSetup(mem_fraction=0.6), P5EN, "disaggregated", 8) == 0.6
    # a 235B engine on 8 H100s: 0.7 leaves almost no KV cache, the standalone default 8x more
    q235 = get_model("qwen3-235b-a22b")
    colocated = engine_kv_tokens(q235, h100, engine_gpus=8, mem_fraction=0.7)
    own = engine_kv_tokens(q235, h100, engine_gpus=8, mem_fraction=standalone_mem_fraction(h100, 8))
    assert own > 5 * colocated


def test_overlapped_modes_are_disaggregated_only():
    with pytest.raises(PlannerError, match="needs rollout on its own GPUs"):
        plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", RLSetup(off_policy_steps=1),
                              nodes=2, placements=("colocated",)))
    both = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", RLSetup(off_policy_steps=1),
                                 nodes=2))
    assert {c.placement for c in both.candidates} == {"disaggregated"}
    assert any("colocated layouts were not ranked" in w for w in both.warnings)
    with pytest.raises(PlannerError, match="at least 2 nodes"):
        plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", RLSetup(off_policy_steps=1),
                              nodes=1))


@pytest.mark.parametrize("kwargs,message", [
    (dict(overlap="none", off_policy_steps=2), "off_policy_steps=2 needs generation to overlap"),
    (dict(overlap="sometimes"), "overlap='sometimes' must be one of none, batch, stream"),
    (dict(off_policy_steps=-1), "off_policy_steps=-1 must be a whole number >= 0"),
    (dict(max_running=0), r"max_running=0 must be a whole number >= 1 \(running requests per "
                          r"engine\) or None"),
])
def test_bad_async_setup_is_one_error(kwargs, message):
    with pytest.raises(PlannerError, match=message):
        RLSetup(**kwargs)


def test_long_context_training_uses_context_parallelism_and_can_bound_the_step():
    # ~61k-token sequences (long prompts, short answers): the training pool must split the
    # sequence (CP), and with the generation tail spread over 4 steps the trainer, not the
    # engines, bounds the best step
    rl = RLSetup(prompts=8, samples_per_prompt=8, prompt_len=57344, max_response_len=8192,
                 mean_response_len=4096, off_policy_steps=4)
    result = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", rl, nodes=4,
                                   placements=("disaggregated",), top=200))
    assert all(c.training.layout.cp > 1 for c in result.candidates)
    assert result.best.time.bound == "train"


def test_a_log_prob_pass_is_one_forward_whatever_the_recompute():
    """A forward-only log-prob pass never reruns a forward for recompute: it is a third of a
    plain training step (forward + 2 backward) and a quarter of a full-recompute one."""
    from dataclasses import replace

    from infra.planner import Layout, TrainingSetup, evaluate
    from infra.planner.rl import train_time

    rl = RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048, logprob_passes=2)
    setup = TrainingSetup(seq_len=4096, global_batch=128)
    for rc, forwards in (("none", 3), ("selective", 3), ("full", 4)):
        c = evaluate("qwen3-30b-a3b", "p5en.48xlarge", 1, Layout(ep=8, dp=8, recompute=rc),
                     setup, ep_backend="nccl")
        assert train_time(c, rl=rl) == pytest.approx(c.time.step * (1 + 2 / forwards))
    full = evaluate("qwen3-30b-a3b", "p5en.48xlarge", 1, Layout(ep=8, dp=8, recompute="full"),
                    setup, ep_backend="nccl")
    plain = evaluate("qwen3-30b-a3b", "p5en.48xlarge", 1,
                     replace(full.layout, recompute="none"), setup, ep_backend="nccl")
    # the log-prob passes cost about the same under both: only the optimizer steps recompute
    assert (train_time(full, rl=rl) - full.time.step
            == pytest.approx(train_time(plain, rl=rl) - plain.time.step, rel=0.1))


@pytest.mark.parametrize("model,rl,placements", [
    ("qwen3-235b-a22b", RLSetup(), ("disaggregated",)),
    ("qwen3-30b-a3b", RLSetup(off_policy_steps=1), ("colocated", "disaggregated")),
])
def test_a_bigger_node_quota_never_gives_a_worse_best(model, rl, placements):
    # above 16 nodes the disaggregated search once tried only quarters of the maximum, so a
    # quota of 64 nodes lost the 4 + 1 split a quota of 16 found (3-4x the cost per step)
    def best(max_nodes):
        return plan_rl(RLPlanRequest(model, "p5en.48xlarge", rl, max_nodes=max_nodes,
                                     placements=placements)).best.dollars_per_step
    at16 = best(16)
    assert best(32) <= at16
    assert best(64) <= at16


def test_train_pool_sizes_grow_with_the_quota_only_by_adding_sizes():
    from infra.planner.rl import train_pool_sizes
    assert train_pool_sizes(16) == list(range(1, 16))
    assert train_pool_sizes(129)[15:] == [16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128]
    for top in range(2, 300):
        smaller = set(train_pool_sizes(top))
        assert smaller <= set(train_pool_sizes(top + 1))
        assert max(smaller) < top


def test_a_colocated_training_plan_without_an_engine_for_its_gpus_is_refused():
    # was: planned (13 x p6-b200, 104 GPUs) beside a 32-GPU engine that does not tile them; the
    # GRPO search has no engine there (16 GPUs needed for deepseek-v3's weights, not dividing 104)
    from infra.planner import PlannerError, PlanRequest, TrainingSetup, plan

    setup = TrainingSetup(colocate_rollout=True, rollout_mem_fraction=0.7)
    with pytest.raises(PlannerError, match="training fits on 13 node.s., but no colocated SGLang "
                                           "engine of 1, 2, 4, 8, 16, 32, 64 GPUs divides the 104"):
        plan(PlanRequest("deepseek-v3", "p6-b200.48xlarge", nodes=13, setup=setup))
    fits = plan(PlanRequest("deepseek-v3", "p6-b200.48xlarge", nodes=16, setup=setup))
    assert fits.best.memory.rollout_weights == pytest.approx(
        2 * (fits.model.total_params + fits.model.mtp_params) / 16 / 2**30)


def test_a_colocated_grpo_plan_sizes_training_memory_beside_its_own_engine():
    # was: every colocated candidate's training memory was sized for memory.py's own engine
    # (a whole node for qwen3-30b-a3b), whatever engine the candidate ran (4x TP2, 2x TP4, ...)
    from infra.planner.request import RLPlanRequest
    from infra.planner.rl import plan_rl

    r = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge", nodes=1,
                              placements=("colocated",), top=10))
    assert len({c.engine.gpus for c in r.candidates}) > 1
    weights = 2 * (r.model.total_params + r.model.mtp_params) / 2**30
    for c in r.candidates:
        assert c.training.memory.rollout_weights == pytest.approx(weights / c.engine.gpus)

"""`rlkit plan` errors blame the cause: the part of memory that does not fit, the rule a pinned
layout breaks, and a fix the request can make."""

from __future__ import annotations

import pytest

from ops.cli import main


def error(capsys, *argv: str) -> str:
    rc = main(["plan", *argv])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert err.count("\n") == 1, err  # one line
    return err


QWEN_P5 = ("--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2")


def test_headroom_that_leaves_no_room_is_named_as_the_cause(capsys):
    # was: "the closest layout ... weights, gradients and optimizer alone need 32 GiB per GPU,
    # p5.48xlarge has 80": 32 < 80, and the headroom that made it not fit was not mentioned
    err = error(capsys, *QWEN_P5, "--headroom-gib", "79")
    assert "p5.48xlarge has 79.2 usable less the 79 GiB --headroom-gib keeps free; keep less free " \
           "(--headroom-gib)" in err
    assert "alone need" not in err


def test_a_sequence_too_long_blames_activations_not_weights(capsys):
    # was: "weights, gradients and optimizer alone need 103 GiB": a weights-only lower bound
    # ranked closer than layouts estimated in full
    err = error(capsys, *QWEN_P5, "--seq-len", "100000000")
    assert "are the largest part: train shorter sequences (--seq-len 100000000)" in err
    assert "activations (" in err and "weights, gradients and optimizer" not in err


def test_a_model_too_big_blames_its_weights_and_optimizer(capsys):
    err = error(capsys, "--model", "deepseek-v3", "--instance", "p5.48xlarge", "--nodes", "2")
    assert "weights, gradients and optimizer (" in err
    assert "GiB) are the largest part: spread them over more nodes" in err


def test_a_grpo_plan_with_a_pinned_layout_that_does_not_divide_says_so(capsys):
    # was: "no training layout fits, or no engine size leaves room for KV cache; allow more
    # nodes (--max-nodes) ...", though --nodes was fixed and 32 does not divide 24 GPUs
    err = error(capsys, "--rl", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                "--nodes", "3", "--tp", "8", "--pp", "4")
    assert ("no training layout fits (requested layout does not divide: tp x cp x pp = 32 does "
            "not divide the 24 GPUs of 3 x p5.48xlarge); plan more nodes (--nodes), or change "
            "the pinned --tp 8, --pp 4") in err
    assert "--max-nodes" not in err and "KV cache" not in err


def test_a_grpo_plan_too_big_for_its_quota_gives_the_training_search_s_reason(capsys):
    err = error(capsys, "--rl", "--model", "deepseek-v3", "--instance", "p5.48xlarge",
                "--max-nodes", "3")
    assert "no training layout fits (deepseek-v3 does not fit on 1 to 3 nodes" in err
    assert err.rstrip().endswith("allow more nodes (--max-nodes)")


FLEX = ("expert-parallel backend deepep-nvshmem runs Megatron's flex token dispatcher, which "
        "needs expert-TP x EP > 1 (megatron-lm 37f9161 megatron/core/transformer/moe/"
        "token_dispatcher.py:1354), but etp 1 x ep 1 = 1")


def test_deepep_with_neither_expert_tp_nor_ep_is_refused(capsys):
    # was: planned, though Megatron's flex dispatcher asserts tp x ep > 1 at start-up
    for rl in ((), ("--rl",)):
        err = error(capsys, *rl, *QWEN_P5, "--ep-backend", "deepep-nvshmem", "--ep", "1",
                    "--tp", "1")
        assert f"requested layout: {FLEX}; raise --ep (or --etp), or use --ep-backend nccl" in err


def test_a_deepep_search_keeps_only_layouts_the_flex_dispatcher_runs():
    from infra.planner import Pins, PlanRequest, plan
    result = plan(PlanRequest("qwen3-30b-a3b", "p5.48xlarge", nodes=1, pins=Pins(ep=1),
                              ep_backend="deepep-nvshmem", top=10**9))
    assert result.candidates
    assert all(c.layout.etp * c.layout.ep > 1 for c in result.candidates)
    assert any(r.reason == FLEX for r in result.rejected)


def test_evaluating_a_deepep_layout_without_expert_parallelism_is_refused():
    from infra.planner import Layout, PlannerError, TrainingSetup, evaluate
    with pytest.raises(PlannerError, match="flex token dispatcher, which needs expert-TP x EP > 1"):
        evaluate("qwen3-30b-a3b", "p5.48xlarge", 1, Layout(tp=1, pp=8, ep=1, dp=1),
                 TrainingSetup(), ep_backend="deepep-nvshmem")


def test_rejections_shown_are_ranked_by_whole_estimates_not_weights_only_bounds():
    # was: the plan table and the JSON's rejected_examples sorted weights-only lower bounds
    # (140 GiB, activations never estimated) before layouts estimated in full at 142 GiB, though
    # the former need more in all; only the error message compared like with like
    from dataclasses import replace

    from infra.planner import PlanRequest, TrainingSetup, plan
    from infra.planner.backend import recommend_backend
    from infra.planner.memory import estimate_memory
    from infra.planner.timing import ep_span

    result = plan(PlanRequest("deepseek-v3", "p5en.48xlarge", nodes=16,
                              setup=TrainingSetup(seq_len=8192)))
    s = result.system

    def whole(r) -> float:  # the whole estimate, with full recompute for a weights-only one
        L = replace(r.layout, recompute="full") if r.static_only else r.layout
        backend = recommend_backend(s.name, r.nodes, ep_span(L, s.nvlink_gpus)[1], None,
                                    s.nvlink_gpus, s.describe_domain()).backend
        return estimate_memory(result.model, s, L, result.setup, backend).peak

    shown = [r for r in result.closest_rejections(10) if r.needed_gib is not None]
    assert shown
    figures = [whole(r) for r in shown]
    assert figures == sorted(figures)
    estimated = [whole(r) for r in result.rejected if r.needed_gib is not None
                 and not r.static_only]
    assert figures[0] == pytest.approx(min(estimated), abs=0.01) or figures[0] < min(estimated)
    examples = result.to_dict()["rejected_examples"]
    assert examples[0]["whole_estimate_gib"] == pytest.approx(figures[0])

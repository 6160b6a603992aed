"""The planner on GB200 NVL72 (issue #24, section 4): training and GRPO step time against published
GB200 runs, calibration and held-out points apart.

Training: Megatron-Bridge performance summary, DGX-GB200 rows (GB200 NVL72 racks: 4 GPUs per
compute tray, NVLink across 72 GPUs; ``dgx-gb200-nvl72`` in infra/planner/hardware.py), read from
NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @ 067f987 (the "26.02 NeMo
Container" and "25.11 NeMo Container" tables) and docs/performance-summary.md history for 26.06.
MXFP8/FP8-MX unless stated, sequence 4096, TP1, forced expert balance, dropless; recompute not
published (the lightest that fits is used). Each point names its release; the recipes of 26.02
and 25.11 (scripts/performance/configs/*/..._workload_base_configs.py @ 0ec1df7, the last change
before 2026-02-28) set none of the four switches of release ``mb-26.06``, so they are
``baseline``; the 26.06 Qwen3-30B-A3B GB200 MXFP8 recipe (@ 63b08b3) sets all four.

Calibration (26.02): DeepSeek-V3 256 GPUs GBS 4096 MBS1 PP4 VP4 EP64 3,955; Qwen3-30B-A3B 8 GPUs
GBS 512 MBS4 EP8 26,084; Qwen3-235B-A22B 256 GPUs GBS 8192 MBS1 PP8 EP32 5,448.
Held out (25.11): DeepSeek-V3 FP8-MX PP8 VP4 EP32 4,018; DeepSeek-V3 BF16 PP4 VP4 EP64 3,139;
Qwen3-30B-A3B FP8-MX MBS4 23,766; Qwen3-235B-A22B BF16 PP8 VP3 EP32 4,916; and (26.06, release
mb-26.06) Qwen3-30B-A3B MXFP8 MBS4 40,706.

GRPO: NeMo-RL performance summary "NeMo RL v0.6", "GB200 BF16 Benchmarks" (GB200-NVL72), on-policy
rows (colocated; the recipes examples/configs/recipes/llm/performance/grpo-*-{16,32,64}n4g.yaml @
NVIDIA-NeMo/RL@5fb588932bf8 (tag v0.6.0) give vLLM gpu_memory_utilization 0.3 / 0.4 / 0.6, used as
the engines' memory share) and 1-step-off rows (tests/planner/test_planner_rl_validation.py holds
those, as held-out async rows). Same assumptions as the H100 rows (256-token prompts, two log-prob
passes, engines without EP), and the same sequence packing (grpo_math_1B.yaml:239-244 @ 5fb5889:
packs of up to the max sequence a data-parallel rank, the planner's token cap max sequence / cp). Recompute is each recipe's
``policy.megatron_cfg.activation_checkpointing`` @ 5fb588932bf8 through its ``defaults:`` chain:
true (Megatron full, uniform, one layer: the planner's "full") for DeepSeek-V3 (->
grpo-deepseek-v3-32n8g.yaml, line 28) and Qwen3-235B-A22B (-> grpo-qwen3-235b-16n8g.yaml, line 31),
grpo_math_1B.yaml's false ("none") for Qwen3-30B-A3B. Calibration: DeepSeek-V3 on 128 GPUs; held
out: DeepSeek-V3 on 256, Qwen3-235B-A22B on 64 and 128, Qwen3-30B-A3B on 16.

Goals (ours, the same as the DGX points' and the RL issue's): training median |error| <= 15%,
max <= 30% over all GB200 points; GRPO held-out median <= 25%, max <= 40%.

Token dispatchers (read 2026-12-01): every Megatron-Bridge GB200 recipe above runs flex +
HybridEP (``moe_flex_dispatcher_backend="hybridep"`` in the ``*_PRETRAIN_CONFIG_GB200_*``
presets @ 0ec1df7 and 63b08b3), so the planner's ``nccl`` EP backend on an NVL72 domain is
calibrated on HybridEP; every NeMo-RL row ran NCCL AlltoAll (``moe_token_dispatcher_type:
"alltoall"``, grpo_math_1B.yaml:156's default at 5fb588932bf8, overridden by none of these recipes).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import pytest

from infra.planner import Layout, TrainingSetup, evaluate, get_model, get_system
from infra.planner.layout import Recompute
from infra.planner.rl import EngineLayout, RLSetup, evaluate_rl
from tests.support.planner import recipe_training

SYSTEM = "dgx-gb200-nvl72"
TRAIN_MEDIAN_GOAL, TRAIN_MAX_GOAL = 0.15, 0.30
RL_HELD_OUT_MEDIAN, RL_HELD_OUT_MAX = 0.25, 0.40
_2602, _2511, _2606 = ("Megatron-Bridge 26.02", "Megatron-Bridge 25.11",
                       "Megatron-Bridge 26.06, release mb-26.06")


@dataclass(frozen=True)
class TrainPoint:
    name: str
    model: str
    gpus: int
    layout: Layout
    setup: TrainingSetup
    published: float  # tokens/s/GPU
    release: str
    held_out: bool = False


def _s(gbs: int, precision: str = "mxfp8", release: str = "baseline") -> TrainingSetup:
    return TrainingSetup(seq_len=4096, global_batch=gbs, precision=precision, release=release)


TRAIN_POINTS = [
    TrainPoint("DeepSeek-V3 256xGB200 PP4 VP4 EP64", "deepseek-v3", 256,
               Layout(pp=4, vpp=4, ep=64, dp=64), _s(4096), 3955.0, _2602),
    TrainPoint("Qwen3-30B 8xGB200 MBS4", "qwen3-30b-a3b", 8, Layout(ep=8, dp=8, mbs=4),
               _s(512), 26084.0, _2602),
    TrainPoint("Qwen3-235B 256xGB200 PP8 EP32", "qwen3-235b-a22b", 256,
               Layout(pp=8, ep=32, dp=32), _s(8192), 5448.0, _2602),
    TrainPoint("DeepSeek-V3 256xGB200 PP8 VP4 EP32", "deepseek-v3", 256,
               Layout(pp=8, vpp=4, ep=32, dp=32), _s(4096), 4018.0, _2511, True),
    TrainPoint("DeepSeek-V3 256xGB200 BF16", "deepseek-v3", 256,
               Layout(pp=4, vpp=4, ep=64, dp=64), _s(4096, "bf16"), 3139.0, _2511, True),
    TrainPoint("Qwen3-30B 8xGB200 MBS4 25.11", "qwen3-30b-a3b", 8, Layout(ep=8, dp=8, mbs=4),
               _s(512), 23766.0, _2511, True),
    TrainPoint("Qwen3-235B 256xGB200 BF16", "qwen3-235b-a22b", 256,
               Layout(pp=8, vpp=3, ep=32, dp=32), _s(8192, "bf16"), 4916.0, _2511, True),
    TrainPoint("Qwen3-30B 8xGB200 26.06", "qwen3-30b-a3b", 8, Layout(ep=8, dp=8, mbs=4),
               _s(512, release="mb-26.06"), 40706.0, _2606, True),
]


def predict_training(p: TrainPoint):
    nodes = p.gpus // 4
    for rc in ("none", "selective", "full"):  # recompute not published: lightest that fits
        c = evaluate(p.model, SYSTEM, nodes, replace(p.layout, recompute=rc), p.setup,
                     ep_backend="nccl", allow_reference_systems=True)
        if c.memory.fits:
            break
    return c, (c.time.tokens_per_s_per_gpu - p.published) / p.published


@pytest.fixture(scope="module")
def training():
    return [(p, *predict_training(p)) for p in TRAIN_POINTS]


def _summary(label: str, errs: list[float]) -> str:
    return (f"{label}: median |error| {statistics.median(errs) * 100:.1f}%, "
            f"max {max(errs) * 100:.1f}%")


def test_gb200_training_table(training, capsys):
    lines = [f"{'published GB200 training point':36s} {'published':>9s} {'pred':>9s} "
             f"{'error':>7s}  release"]
    for p, c, e in training:
        lines.append(f"{p.name:36s} {p.published:9,.0f} {c.time.tokens_per_s_per_gpu:9,.0f} "
                     f"{e * 100:+6.1f}%  {p.release}{' (held out)' if p.held_out else ''}")
    cal = [abs(e) for p, _, e in training if not p.held_out]
    held = [abs(e) for p, _, e in training if p.held_out]
    lines += [_summary("calibration", cal), _summary("held out", held)]
    table = "\n".join(lines)
    with capsys.disabled():
        print("\n" + table)
    errs = cal + held
    assert statistics.median(errs) <= TRAIN_MEDIAN_GOAL, table
    assert max(errs) <= TRAIN_MAX_GOAL, table
    assert all(c.memory.fits for _, c, _ in training), table


def test_expert_groups_of_these_runs_stay_on_nvlink(training):
    for p, c, _ in training:
        assert c.time.ep_span_nodes == 1, p.name  # EP <= 72: one NVLink domain


@dataclass(frozen=True)
class RLPoint:
    name: str
    model: str
    gpus: int
    layout: Layout
    samples: int
    train_batch: int
    max_seq: int
    mean_seq: int
    engine_tp: int
    mem_fraction: float
    published_step_s: float
    held_out: bool = False
    # the recipe's policy.megatron_cfg.activation_checkpointing (module docstring); None: the
    # recipe states nothing, so the lightest that fits is used
    recompute: Recompute | None = None


RL_POINTS = [
    # grpo-deepseek-v3-32n4g.yaml @ 5fb5889 (defaults: 32n8g, line 28): checkpointing true
    RLPoint("DeepSeek-V3 128xGB200", "deepseek-v3", 128, Layout(ep=16, pp=8, dp=16), 512, 512,
            1536, 711, 32, 0.3, 108.0, recompute="full"),
    # grpo-deepseek-v3-64n4g.yaml @ 5fb5889 (-> 32n4g -> 32n8g): true
    RLPoint("DeepSeek-V3 256xGB200", "deepseek-v3", 256, Layout(ep=16, pp=8, dp=32), 512, 512,
            1536, 700, 32, 0.3, 98.7, True, recompute="full"),
    # grpo-qwen3-235b-16n4g.yaml @ 5fb5889 (defaults: 16n8g, line 31): true
    RLPoint("Qwen3-235B 64xGB200", "qwen3-235b-a22b", 64, Layout(tp=2, cp=2, ep=16, pp=4, dp=4),
            512, 512, 8192, 5709, 8, 0.4, 286.0, True, recompute="full"),
    # grpo-qwen3-235b-32n4g.yaml @ 5fb5889 (-> 16n4g -> 16n8g): true
    RLPoint("Qwen3-235B 128xGB200", "qwen3-235b-a22b", 128,
            Layout(tp=2, cp=2, ep=16, pp=4, dp=8), 512, 512, 8192, 5693, 8, 0.6, 345.0, True,
            recompute="full"),
    # grpo-qwen3-30ba3b-4n4g.yaml @ 5fb5889 sets none: grpo_math_1B.yaml's false
    RLPoint("Qwen3-30B-A3B 16xGB200", "qwen3-30b-a3b", 16, Layout(ep=16, dp=16), 2048, 512,
            4096, 3199, 1, 0.6, 221.0, True, recompute="none"),
]


def predict_rl(p: RLPoint):
    rl = RLSetup(prompts=p.samples, samples_per_prompt=1, prompt_len=256,
                 max_response_len=p.max_seq - 256, mean_response_len=p.mean_seq - 256,
                 steps_per_rollout=p.samples // p.train_batch, logprob_passes=2,
                 mem_fraction=p.mem_fraction)
    nodes = p.gpus // 4
    c = recipe_training(p.model, SYSTEM, nodes, p.layout, p.recompute, rl, p.max_seq)
    system = get_system(SYSTEM, allow_reference=True)
    r = evaluate_rl(get_model(p.model), system, rl=rl, placement="colocated", training=c,
                    rollout_nodes=nodes, engine=EngineLayout(p.engine_tp, 1,
                                                             p.gpus // p.engine_tp))
    return r, (r.time.step - p.published_step_s) / p.published_step_s


def test_gb200_grpo_table(capsys):
    rows = [(p, *predict_rl(p)) for p in RL_POINTS]
    lines = [f"{'published GB200 GRPO run':28s} {'step s':>7s} {'pred':>7s} {'error':>7s}  "
             f"rollout / sync / train (s)"]
    for p, r, e in rows:
        t = r.time
        lines.append(f"{p.name:28s} {p.published_step_s:7.1f} {t.step:7.1f} {e * 100:+6.1f}%  "
                     f"{t.rollout:.1f} / {t.sync:.1f} / {t.train:.1f}"
                     f"{' (held out)' if p.held_out else ''}")
    held = [abs(e) for p, _, e in rows if p.held_out]
    lines += [_summary("calibration", [abs(e) for p, _, e in rows if not p.held_out]),
              _summary("held out", held)]
    table = "\n".join(lines) + "\nsource: NeMo-RL perf summary v0.6 (GB200 BF16) @ v0.6.0"
    with capsys.disabled():
        print("\n" + table)
    assert statistics.median(held) <= RL_HELD_OUT_MEDIAN, table
    assert max(held) <= RL_HELD_OUT_MAX, table
    assert all(r.training.memory.fits for _, r, _ in rows), table  # with the recipe's recompute
    # with the recipe's sequence packing: packs of up to max_seq tokens per data-parallel rank
    assert [r.training.memory.max_tokens_per_gpu for _, r, _ in rows] == \
        [p.max_seq // p.layout.cp for p in RL_POINTS]


def test_gb200_qwen3_30b_on_policy_row_leaves_its_trainer_a_gap_like_the_known_miss():
    """The on-policy Qwen3-30B-A3B row ran the same NCCL AlltoAll dispatcher as the 1-step-off
    known miss (tests/planner/test_planner_rl_validation.py, 3.8x its modelled training): after
    the modelled rollout and refit, its published step leaves its trainer 3.2x the modelled
    training, where the H100 rows leave at most 2.1x. Keeps docs/planner.md's known-miss text
    true; the model is not fitted to it."""
    p = next(x for x in RL_POINTS if x.model == "qwen3-30b-a3b")
    t = predict_rl(p)[0].time
    assert t.step == pytest.approx(t.rollout + t.sync + t.train, rel=0.01)  # on-policy: in series
    trainer_multiple = (p.published_step_s - t.rollout - t.sync) / t.train
    assert trainer_multiple == pytest.approx(3.2, abs=0.1)


# --- rlkit plan on p6e-gb200.36xlarge (issue #24: "plans training and GRPO") ---------------------

def test_rlkit_plan_plans_training_and_grpo_on_p6e_gb200(capsys):
    import json

    from ops.cli import main

    rc = main(["plan", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-235b-a22b",
               "--nodes", "16", "--precision", "mxfp8", "--price-per-hour", "100", "--json",
               "--top", "1"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    best = json.loads(out)["candidates"][0]
    # 64 GPUs in one NVL72 domain: expert groups on NVLink, NCCL (DeepEP cannot address 72 peers)
    assert best["time"]["ep_span_nodes"] == 1 and best["ep_backend"]["backend"] == "nccl"
    rc = main(["plan", "--rl", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-30b-a3b",
               "--max-nodes", "4", "--price-per-hour", "100", "--json", "--top", "1",
               "--max-response-len", "2048"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    assert d["instance_type"] == "p6e-gb200.36xlarge" and d["candidates"][0]["time"]["step"] > 0
    assert "--num-gpus-per-node" in d["miles_args"]
    assert d["miles_args"][d["miles_args"].index("--num-gpus-per-node") + 1] == "4"


def test_deepep_on_an_nvl72_domain_is_one_clear_error(capsys):
    from ops.cli import main

    rc = main(["plan", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-30b-a3b", "--nodes",
               "2", "--ep-backend", "deepep-nvshmem", "--price-per-hour", "100"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.strip() == (
        "rlkit plan: error: expert-parallel backend 'deepep-nvshmem' cannot run on "
        "p6e-gb200.36xlarge: its NVLink domain (u-p6e-gb200x72, 18 instances) holds 72 GPUs and "
        "the pinned DeepEP (567632d) "
        "addresses at most 8 NVLink peers (NUM_MAX_NVL_PEERS); use nccl (all-to-all over "
        "multi-node NVLink)")

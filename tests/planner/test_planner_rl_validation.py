"""The GRPO step model against published RL runs, and its decode model against SGLang.

RL runs: NeMo-RL performance summary, "NeMo RL v0.7", "H100 BF16 Benchmarks" (GRPO on
OpenMathInstruct-2, DGX-H100, on-policy, training and generation BF16, Megatron-Core training,
colocated generation), read from NVIDIA-NeMo/RL docs/about/performance-summary.md as mirrored at
svcnemo-autobot/RL @ ad3472a83d4842abc7f5dacf43daea63e1ad6930. Each row gives the GPU count,
samples per step (G-GBS), training batch (T-GBS), generation TP, training TP/CP/EP/PP, the
maximum sequence length, the mean generated sequence length and the step time (generation, policy
log-probs, refit and training together).

Read from each row's recipe at tag v0.7.0 (81aa43d, the tree the summary links to),
examples/configs/recipes/llm/performance/grpo-{qwen3-30ba3b-4n8g, qwen3-235b-16n8g,
qwen3-235b-32n8g (defaults: 16n8g), deepseek-v3-32n8g, deepseek-v3-64n8g (defaults: 32n8g)}.yaml
over examples/configs/grpo_math_1B.yaml: every one sets ``loss_fn.force_on_policy_ratio: true``
and none sets ``grpo.seq_logprob_error_threshold``, so nemo_rl/algorithms/grpo.py skips the
previous-policy log-prob pass (``opd._skip_prev_logprobs``); the base's
``reference_policy_kl_penalty: 0.01`` keeps the reference pass: one forward-only log-prob pass.
T-GBS equals G-GBS in every row (2,048 set by the 30B recipe; 512 from the base), as
force_on_policy_ratio requires: one optimizer step per rollout.

Activation recompute, read from the same recipes (each row's ``recompute``, no longer the
lightest that fits): grpo-qwen3-235b-16n8g.yaml (line 33) and grpo-deepseek-v3-32n8g.yaml (line
28) set ``policy.megatron_cfg.activation_checkpointing: true`` (32n8g / 64n8g inherit it) and
no recipe sets ``recompute_granularity``, so the base's "full" holds; _apply_performance_config
in nemo_rl/models/megatron/setup.py @ 81aa43d (@ 5fb5889 for the v0.6.0 rows below, where it is
hard-coded) makes that Megatron's full, uniform, one-layer recompute: every layer keeps its
input and reruns its forward, the planner's "full". The Qwen3-30B-A3B recipes set nothing, so
the base's ``activation_checkpointing: false`` holds: "none". Every row's recipe states it.

Sequence packing, read from the same recipes (and at 5fb5889 for the v0.6.0 rows below): every
row trains with grpo_math_1B.yaml's ``policy.sequence_packing.enabled: True`` (lines 275-281 @
81aa43d, 239-244 @ 5fb5889; no recipe turns it off), micro-batches of up to train_mb_tokens =
max_total_sequence_length x train_micro_batch_size (1 in every recipe) tokens a data-parallel
rank, split over its CP group: the planner's token cap, max sequence / cp
(tests/support/planner.py).

Assumptions (not in the source): prompts of 256 tokens (so max response = max sequence - 256 and
mean response = mean sequence - 256); generation engines without expert parallelism (vLLM TP);
no overlap (on-policy). NeMo-RL generates with vLLM, not SGLang: the
decode model is the same for both engines here, which is itself an assumption.

In sample (they chose DECODE_HBM_EFF, TP_ALLREDUCE_NET_US, TP_ALLREDUCE_NET_PER_NODE_US and
OFFLOAD_FIXED_S; DECODE_LAYER_US comes from the SGLang decode check below):
Qwen3-30B-A3B on 32, Qwen3-235B-A22B on 128, DeepSeek-V3 on 256 H100.
Out of sample: Qwen3-235B-A22B on 256 and DeepSeek-V3 on 512 H100 (same table).

Decode check: SGLang v0.5.8.post1 on 8x B200 (BenHamm's public gist "SGLang B200 Benchmark Sweep
- 9 Models on 8xB200", 2026-02-16): Qwen3-235B-A22B BF16, TP8, time per output token at
concurrency 1: 6.70 ms.

Goal: median |step-time error| <= 25% over all RL runs (and, our guard, none above 35%; since the
asynchronous model, none above 25%); decode within 15%.

Asynchronous runs: NeMo-RL performance summary "NeMo RL v0.6", "H100 BF16 Benchmarks", the "1-step
Off" and "8-step Off" GRPO rows, read from NVIDIA-NeMo/RL docs/about/performance-summary.md at tag
v0.6.0 (5fb588932bf8) and their recipes examples/configs/recipes/llm/performance/
grpo-*-async-*off.yaml at the same tag, which give what the table does not: separate training and
generation pools (colocated.enabled: false, generation num_nodes), async_grpo with
max_trajectory_age_steps K and in_flight_weight_updates: true (the planner's "stream" mode), vLLM
gpu_memory_utilization 0.8 (used as the engines' memory share). Same assumptions as above (256-token
prompts, engines without expert parallelism), with two log-prob passes: no performance recipe at
that commit sets force_on_policy_ratio, and the base keeps the KL term. Recompute as above, read at
that commit through each recipe's ``defaults:`` chain: full for the DeepSeek-V3 and Qwen3-235B rows
(they inherit grpo-deepseek-v3-32n8g.yaml line 28 and grpo-qwen3-235b-16n8g.yaml line 31), none for
the Qwen3-30B-A3B rows.

Calibration (they chose the one new modelling decision, that the longest response is spread over
K steps: the 1-step DeepSeek-V3 row is bounded by its tail, the 8-step Qwen3-30B row by
throughput): DeepSeek-V3 1-step off on 512 H100, Qwen3-30B-A3B 8-step off on 192 H100.
Held out (chose nothing; they were computed with the same code before the split was fixed, so
they are not blind): Qwen3-235B-A22B 1-step off on 256 H100, Qwen3-30B-A3B 1-step off on 32 H100.
Left out: the H100 FP8 row (FP8 generation is not modelled), the Nemotron-3-Nano SWE row (not a
catalog model); verl's fully_async_policy Qwen3-30B-A3B report (recipe/fully_async_policy/README.md)
runs on H20 and publishes no mean response length; no Miles async step time with its setup was
found.

GB200 NVL72 held-out rows (issue #24): the same table's "GB200 BF16" 1-step-off rows and their
grpo-*-{64,32,4}n4g-async-1off.yaml recipes, computed only after every modelling decision was
fixed (blind).

Engine scheduler cap (read, not fitted): NeMo-RL's async engines are vLLM ``AsyncLLM``s built by
``AsyncLLM.from_engine_args`` with no ``max_num_seqs`` (NVIDIA-NeMo/RL@5fb588932bf8, tag v0.6.0,
nemo_rl/models/generation/vllm/vllm_worker_async.py:184; no recipe of these rows sets it: the one
that does, grpo-deepseek-v3-64n8g-fp8-async-1off.yaml:24 ``vllm_kwargs.max_num_seqs: 32``, is the
FP8 row left out above; pyproject.toml:81 pins vllm==0.17.1). That entry point
passes ``UsageContext.ENGINE_CONTEXT`` (vllm/v1/engine/async_llm.py, vllm-project/vllm @ 00080ee,
a v0.17-era commit), which is not a key of ``EngineArgs.get_batch_defaults``, so
``_set_default_max_num_seqs_and_batched_tokens_args`` falls back to
``SchedulerConfig.DEFAULT_MAX_NUM_SEQS = 128`` (vllm/engine/arg_utils.py, vllm/config/
scheduler.py @ 01230b4): at most 128 running requests per engine, so ``max_running=128`` for
every asynchronous row. The on-policy rows use ``vllm.LLM`` (``LLM_CLASS``: 1,024 on GPUs of 70
GiB or more), the model's default. Added after the GB200 rows were first computed; it moved
the Qwen3-30B-A3B rows only (the others run fewer than 128 requests per engine).

Goal (issue #23): held-out asynchronous runs median |error| <= 20%, none beyond 40%. The median
is asserted over every held-out run; the max over all but one, the GB200 Qwen3-30B-A3B row, a
known miss (printed with its reason): that goal is not met for it. Its recipe (like every
NeMo-RL GB200 row here, v0.6.0 and v0.7.0) dispatches tokens with NCCL AlltoAll; the
Megatron-Bridge GB200 training points the model fits ran flex + HybridEP. NeMo-RL PR #4118
(2026-09-12) measured this recipe with both, but its figures could not be read, so no rate is
modelled (docs/planner.md, "Known miss").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import pytest

from infra.planner import Layout, get_model, get_system
from infra.planner.layout import Recompute
from infra.planner.rl import EngineLayout, RLSetup, decode_iteration_s, evaluate_rl
from tests.support.planner import recipe_training

SOURCE = "NeMo-RL perf summary v0.7 (H100 BF16)"
PROMPT = 256


@dataclass(frozen=True)
class RLPoint:
    name: str
    model: str
    nodes: int
    layout: Layout
    samples: int
    train_batch: int
    max_seq: int
    mean_seq: int
    engine_tp: int
    published_step_s: float
    out_of_sample: bool = False
    # force_on_policy_ratio in every v0.7.0 on-policy H100 recipe: only the reference (KL) pass
    logprob_passes: int = 1
    # the recipe's activation recompute (module docstring); None: it states nothing, so the
    # lightest that fits is used
    recompute: Recompute | None = None


POINTS = [
    # grpo-qwen3-30ba3b-4n8g.yaml @ 81aa43d sets no activation_checkpointing: the base's false
    RLPoint("Qwen3-30B-A3B 32xH100", "qwen3-30b-a3b", 4, Layout(ep=8, dp=32), 2048, 2048,
            4096, 3198, 2, 171.0, recompute="none"),
    # grpo-qwen3-235b-16n8g.yaml:33 @ 81aa43d: activation_checkpointing: true
    RLPoint("Qwen3-235B-A22B 128xH100", "qwen3-235b-a22b", 16,
            Layout(tp=2, cp=2, ep=16, pp=8, dp=4), 512, 512, 8192, 5719, 16, 367.0,
            recompute="full"),
    # grpo-deepseek-v3-32n8g.yaml:28 @ 81aa43d: activation_checkpointing: true
    RLPoint("DeepSeek-V3 256xH100", "deepseek-v3", 32, Layout(ep=16, pp=16, dp=16), 512, 512,
            1536, 722, 32, 93.0, recompute="full"),
    # grpo-qwen3-235b-32n8g.yaml @ 81aa43d: inherits 16n8g's activation_checkpointing: true
    RLPoint("Qwen3-235B-A22B 256xH100", "qwen3-235b-a22b", 32,
            Layout(tp=2, cp=2, ep=16, pp=8, dp=8), 512, 512, 8192, 5698, 16, 285.0, True,
            recompute="full"),
    # grpo-deepseek-v3-64n8g.yaml @ 81aa43d: inherits 32n8g's activation_checkpointing: true
    RLPoint("DeepSeek-V3 512xH100", "deepseek-v3", 64, Layout(ep=32, pp=16, dp=32), 512, 512,
            1536, 724, 32, 81.2, True, recompute="full"),
]
MEDIAN_GOAL = 0.25  # the goal
MAX_GUARD = 0.25  # issue #23: no on-policy error grows past 25% (it was 35%, our own guard)
ASYNC_HELD_OUT_MEDIAN = 0.20
ASYNC_HELD_OUT_MAX = 0.40
ASYNC_SOURCE = "NeMo-RL perf summary v0.6 (H100 and GB200 BF16, off-policy rows) @ v0.6.0"
# vLLM AsyncLLM's running-request cap with max_num_seqs unset (ENGINE_CONTEXT falls back to
# SchedulerConfig.DEFAULT_MAX_NUM_SEQS; see the module docstring)
VLLM_ASYNC_MAX_RUNNING = 128


@dataclass(frozen=True)
class AsyncPoint:
    """An off-policy run: ``nodes`` train, ``rollout_nodes`` generate, K steps off."""

    name: str
    model: str
    nodes: int
    rollout_nodes: int
    layout: Layout
    samples: int
    train_batch: int
    max_seq: int
    mean_seq: int
    engine_tp: int
    off_policy_steps: int
    published_step_s: float
    out_of_sample: bool = False
    system: str = "dgx-h100-ib"
    mem_fraction: float = 0.8  # the recipes' vLLM gpu_memory_utilization
    max_running: int = VLLM_ASYNC_MAX_RUNNING  # vLLM AsyncLLM's default max_num_seqs
    known_miss: str = ""  # why this held-out run is outside the max goal (printed, documented)
    # the v0.6.0 recipes set no force_on_policy_ratio: previous-policy and reference (KL) passes
    logprob_passes: int = 2
    recompute: Recompute | None = None  # as RLPoint.recompute


ASYNC_POINTS = [
    # grpo-deepseek-v3-64n8g-async-1off.yaml @ 5fb5889: inherits 32n8g's (line 28) true
    AsyncPoint("DeepSeek-V3 1-off 512xH100", "deepseek-v3", 32, 32, Layout(ep=16, pp=16, dp=16),
               512, 512, 1536, 710, 32, 1, 64.1, recompute="full"),
    # grpo-qwen3-30ba3b-24n8g-async-8off.yaml @ 5fb5889 (defaults: 4n8g): the base's false
    AsyncPoint("Qwen3-30B-A3B 8-off 192xH100", "qwen3-30b-a3b", 16, 8, Layout(ep=8, dp=128),
               2048, 512, 4096, 3206, 2, 8, 34.5, recompute="none"),
    # grpo-qwen3-235b-32n8g-async-1off.yaml @ 5fb5889: inherits 16n8g's (line 31) true
    AsyncPoint("Qwen3-235B 1-off 256xH100", "qwen3-235b-a22b", 16, 16,
               Layout(tp=4, ep=16, pp=8, dp=4), 512, 512, 8192, 5721, 8, 1, 231.0, True,
               recompute="full"),
    # grpo-qwen3-30ba3b-4n8g-async-1off.yaml @ 5fb5889 (defaults: 4n8g): the base's false
    AsyncPoint("Qwen3-30B-A3B 1-off 32xH100", "qwen3-30b-a3b", 2, 2, Layout(ep=8, pp=2, dp=8),
               2048, 512, 4096, 3201, 2, 1, 152.0, True, recompute="none"),
    # GB200 NVL72 (4 GPUs a node), the same table's "GB200 BF16" 1-step-off rows and their
    # grpo-*-{64,32,4}n4g-async-1off.yaml recipes; held out, and computed only after every
    # modelling decision above was fixed (blind)
    # grpo-deepseek-v3-64n4g-async-1off.yaml @ 5fb5889 (-> 64n8g-async-1off -> 32n8g): true
    AsyncPoint("DeepSeek-V3 1-off 256xGB200", "deepseek-v3", 32, 32, Layout(ep=16, pp=8, dp=16),
               512, 512, 1536, 708, 16, 1, 61.7, True, "dgx-gb200-nvl72", recompute="full"),
    # grpo-qwen3-235b-32n4g-async-1off.yaml @ 5fb5889 (-> 32n8g-async-1off -> 16n8g): true
    AsyncPoint("Qwen3-235B 1-off 128xGB200", "qwen3-235b-a22b", 16, 16,
               Layout(tp=4, ep=16, pp=4, dp=4), 512, 512, 8192, 5705, 8, 1, 278.0, True,
               "dgx-gb200-nvl72", recompute="full"),
    # grpo-qwen3-30ba3b-4n4g-async-1off.yaml @ 5fb5889 (defaults: 4n4g): the base's false
    AsyncPoint("Qwen3-30B-A3B 1-off 16xGB200", "qwen3-30b-a3b", 2, 2, Layout(ep=8, dp=8),
               2048, 512, 4096, 3197, 1, 1, 301.0, True, "dgx-gb200-nvl72", recompute="none",
               known_miss="by the sources read, the NeMo-RL trainer bounds it, not decode: a "
                          "trainer-only recipe change (force_on_policy_ratio, T-GBS 2048; NeMo-RL "
                          "PR #3135) raised E2E throughput on all six GB200 cases, and the v0.7 "
                          "summary has this run at 242 s (-19.6%; the model's training -20%, its "
                          "rollout 0%), so the trainer takes ~3.8x the modelled 79.5 s (v0.7: "
                          "242 / 63.5), where the 32xH100 row caps its own at 2.1x. Suspect: "
                          "the recipe's NCCL AlltoAll token dispatcher across two GB200 trays "
                          "(every NeMo-RL GB200 row here; the Megatron-Bridge GB200 points the "
                          "model fits ran HybridEP). No source prices it: NeMo-RL PR #4118 "
                          "measured AlltoAll -> HybridEP on this recipe but its table was not "
                          "readable, marin #7668's EP64 profile is not a clean ratio, and "
                          "Megatron-Bridge PR #3561 has AlltoAll 4% ahead of HybridEP at EP64 "
                          "on GB200; Grace host overhead (TransformerEngine #2053) lifts "
                          "training to 122 s only. Nothing is fitted"),
]


def _rl_setup(p, **extra) -> RLSetup:
    return RLSetup(prompts=p.samples, samples_per_prompt=1, prompt_len=PROMPT,
                   max_response_len=p.max_seq - PROMPT, mean_response_len=p.mean_seq - PROMPT,
                   steps_per_rollout=p.samples // p.train_batch, logprob_passes=p.logprob_passes,
                   **extra)


def _training(p, rl: RLSetup, system: str):
    return recipe_training(p.model, system, p.nodes, p.layout, p.recompute, rl, p.max_seq)


def predict(p: RLPoint):
    rl = _rl_setup(p)
    c = _training(p, rl, "dgx-h100-ib")
    engine = EngineLayout(p.engine_tp, 1, p.nodes * 8 // p.engine_tp)
    system = get_system("dgx-h100-ib", allow_reference=True)
    r = evaluate_rl(get_model(p.model), system, rl=rl, placement="colocated", training=c,
                    rollout_nodes=p.nodes, engine=engine)
    return r, (r.time.step - p.published_step_s) / p.published_step_s


def predict_async(p: AsyncPoint, overlap: str = "stream"):
    rl = _rl_setup(p, overlap=overlap, off_policy_steps=p.off_policy_steps,
                   mem_fraction=p.mem_fraction, max_running=p.max_running)
    c = _training(p, rl, p.system)
    system = get_system(p.system, allow_reference=True)
    gpn = system.gpus_per_node
    engine = EngineLayout(p.engine_tp, 1, p.rollout_nodes * gpn // p.engine_tp)
    r = evaluate_rl(get_model(p.model), system, rl=rl, placement="disaggregated", training=c,
                    rollout_nodes=p.rollout_nodes, engine=engine)
    return r, (r.time.step - p.published_step_s) / p.published_step_s


@pytest.fixture(scope="module")
def predictions():
    return [(p, *predict(p)) for p in POINTS]


def _table(rows) -> str:
    lines = [f"{'published RL run':28s} {'step s':>7s} {'pred':>7s} {'error':>7s}  rollout / sync "
             f"/ train (s)"]
    for p, r, e in rows:
        t = r.time
        tag = " (out of sample)" if p.out_of_sample else ""
        lines.append(f"{p.name:28s} {p.published_step_s:7.1f} {t.step:7.1f} {e * 100:+6.1f}%  "
                     f"{t.rollout:.1f} / {t.sync:.1f} / {t.train:.1f}{tag}")
    for label, sub in (("in sample", [x for x in rows if not x[0].out_of_sample]),
                       ("out of sample", [x for x in rows if x[0].out_of_sample]),
                       ("all runs", rows)):
        errs = [abs(e) for _, _, e in sub]
        lines.append(f"{label}: median |error| {statistics.median(errs) * 100:.1f}%, "
                     f"max {max(errs) * 100:.1f}%")
    return "\n".join(lines) + f"\nsource: {SOURCE}"


@pytest.fixture(scope="module")
def async_predictions():
    return [(p, *predict_async(p)) for p in ASYNC_POINTS]


def _async_table(rows) -> str:
    lines = [f"{'published off-policy run':30s} {'step s':>7s} {'pred':>7s} {'error':>7s} "
             f"{'batch-overlap':>13s}  rollout / sync / train (s), bound"]
    for p, r, e in rows:
        t = r.time
        _, before = predict_async(p, overlap="batch")  # the pre-#23 model: a batch per step
        tag = " (held out)" if p.out_of_sample else ""
        lines.append(f"{p.name:30s} {p.published_step_s:7.1f} {t.step:7.1f} {e * 100:+6.1f}% "
                     f"{before * 100:+12.1f}%  {t.rollout:.1f} / {t.sync:.1f} / {t.train:.1f}, "
                     f"{t.bound}{tag}")
        if p.known_miss:
            lines.append(f"    known miss, outside the max goal: {p.known_miss}")
    for label, sub in (("calibration", [x for x in rows if not x[0].out_of_sample]),
                       ("held out", [x for x in rows if x[0].out_of_sample])):
        errs = [abs(e) for _, _, e in sub]
        lines.append(f"async {label}: median |error| {statistics.median(errs) * 100:.1f}%, "
                     f"max {max(errs) * 100:.1f}%")
    rest = [abs(e) for p, _, e in rows if p.out_of_sample and not p.known_miss]
    lines.append(f"async held out without known misses: max {max(rest) * 100:.1f}%")
    return "\n".join(lines) + f"\nsource: {ASYNC_SOURCE}"


def test_async_validation_table(async_predictions, capsys):
    table = _async_table(async_predictions)
    with capsys.disabled():
        print("\n" + table)
    held = [abs(e) for p, _, e in async_predictions if p.out_of_sample]
    assert len(held) >= 2 and any(not p.out_of_sample for p, _, _ in async_predictions)
    assert statistics.median(held) <= ASYNC_HELD_OUT_MEDIAN, table  # every held-out run
    misses = [p for p in ASYNC_POINTS if p.known_miss]
    assert len(misses) <= 1, "a known miss is a finding, not a filter"
    for p, _, e in async_predictions:  # an exclusion must not outlive the miss it explains
        assert not p.known_miss or abs(e) > ASYNC_HELD_OUT_MAX, \
            f"{p.name} is now within the goal ({e:+.1%}): drop its known_miss"
    assert max(abs(e) for p, _, e in async_predictions
               if p.out_of_sample and not p.known_miss) <= ASYNC_HELD_OUT_MAX, table


# The same GB200 run in NeMo-RL's "v0.7" summary (svcnemo-autobot/RL @ ad3472a): 242 s, mean
# sequence 3,200, with the v0.7.0 recipe's training-only changes (force_on_policy_ratio: no
# previous-policy log-prob pass; train_global_batch_size 2048: one optimizer step). Used only to
# check the known miss's reasoning, not as a validation row.
GB200_30B_V07_STEP_S = 242.0


def test_gb200_qwen3_30b_known_miss_moves_with_the_trainer(async_predictions):
    """The known miss's reasoning, kept true: between v0.6 and v0.7 the published step fell by
    the fraction the model's training phase falls, while its rollout stays put, and the
    published step is the same multiple of the modelled training in both releases."""
    p, r6, _ = next(x for x in async_predictions if x[0].known_miss)
    v07 = replace(p, train_batch=p.samples, mean_seq=3200, published_step_s=GB200_30B_V07_STEP_S)
    rl = _rl_setup(v07, overlap="stream", off_policy_steps=1, mem_fraction=v07.mem_fraction,
                   max_running=v07.max_running)
    rl = replace(rl, logprob_passes=1)  # force_on_policy_ratio: only the reference pass left
    system = get_system(p.system, allow_reference=True)
    r7 = evaluate_rl(get_model(p.model), system, rl=rl, placement="disaggregated",
                     training=_training(v07, rl, p.system), rollout_nodes=p.rollout_nodes,
                     engine=EngineLayout(p.engine_tp, 1, r6.engine.engines))
    published_drop = 1 - GB200_30B_V07_STEP_S / p.published_step_s
    modelled_train_drop = 1 - r7.time.train / r6.time.train
    assert r7.time.rollout == pytest.approx(r6.time.rollout, rel=0.01)
    assert modelled_train_drop == pytest.approx(published_drop, abs=0.03)
    assert (GB200_30B_V07_STEP_S / r7.time.train
            == pytest.approx(p.published_step_s / r6.time.train, rel=0.05))


@pytest.mark.parametrize("i", range(len(ASYNC_POINTS)), ids=[p.name for p in ASYNC_POINTS])
def test_async_run_is_planned_disaggregated_with_its_training_layout_fitting(
        async_predictions, i):
    p, r, _ = async_predictions[i]
    assert r.training.memory.fits, p.name
    assert r.training.memory.max_tokens_per_gpu == p.max_seq // p.layout.cp, p.name  # packing
    assert r.placement == "disaggregated" and r.time.mode == "stream"
    assert r.time.step >= max(r.time.train, r.time.rollout), p.name


def test_rl_validation_table(predictions, capsys):
    table = _table(predictions)
    with capsys.disabled():
        print("\n" + table)
    assert len(predictions) >= 3
    errs = [abs(e) for _, _, e in predictions]
    assert statistics.median(errs) <= MEDIAN_GOAL, table
    assert max(errs) <= MAX_GUARD, table
    assert any(p.out_of_sample for p, _, _ in predictions)


@pytest.mark.parametrize("i", range(len(POINTS)), ids=[p.name for p in POINTS])
def test_published_training_layout_fits_beside_the_engine(predictions, i):
    p, r, _ = predictions[i]
    assert r.training.memory.fits, p.name
    assert r.time.rollout > r.time.train, f"{p.name}: generation should dominate a GRPO step"
    # the recipe's sequence packing: packs of up to max_seq tokens per data-parallel rank
    assert r.training.memory.max_tokens_per_gpu == p.max_seq // p.layout.cp, p.name


def test_decode_matches_sglang_on_b200():
    t = decode_iteration_s(get_model("qwen3-235b-a22b"), get_system("p6-b200.48xlarge"),
                           engine_gpus=8, engine_ep=1, backend="nccl", batch=1, context=1500)
    assert t * 1e3 == pytest.approx(6.70, rel=0.15)

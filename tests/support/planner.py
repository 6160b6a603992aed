"""What the planner's validation tests share: a published run's training layout, as its recipe
sets it."""

from __future__ import annotations

from dataclasses import replace

from infra.planner import Candidate, Layout, TrainingSetup, evaluate
from infra.planner.layout import RECOMPUTES, Recompute
from infra.planner.rl import RLSetup, _seq_len

# NeMo-RL packs a GRPO run's training sequences (policy.sequence_packing.enabled: True in
# examples/configs/grpo_math_1B.yaml:275-281 @ 81aa43dda476, :239-244 @ 5fb588932bf8; no
# performance recipe of the validation rows turns it off) into micro-batches of up to
# train_mb_tokens = max_total_sequence_length x train_micro_batch_size tokens, and every recipe
# sets train_micro_batch_size 1. One micro-batch is one data-parallel rank's, split over its
# context-parallel group (nemo_rl/models/policy/lm_policy.py _shard_for_train shards by the
# data-parallel size only @ 81aa43dda476), so per GPU the cap is max_seq / cp.
NEMO_RL_TRAIN_MICRO_BATCH_SIZE = 1


def recipe_training(model: str, system: str, nodes: int, layout: Layout,
                    recompute: Recompute | None, rl: RLSetup, max_seq: int) -> Candidate:
    """The run's training with the recipe's recompute and its sequence packing (up to
    ``max_seq`` tokens a micro-batch: the planner's token cap); the lightest recompute that fits
    only where the recipe states none (the tests assert the fit per row, so a recipe setting that
    does not fit fails there rather than falling back)."""
    mb_tokens = max_seq * NEMO_RL_TRAIN_MICRO_BATCH_SIZE
    assert mb_tokens % layout.cp == 0, (max_seq, layout.cp)
    setup = TrainingSetup(seq_len=_seq_len(rl), global_batch=rl.train_batch,
                          max_tokens_per_gpu=mb_tokens // layout.cp, longest_sample=max_seq)
    for rc in (recompute,) if recompute else RECOMPUTES:
        c = evaluate(model, system, nodes, replace(layout, recompute=rc), setup,
                     ep_backend="nccl", allow_reference_systems=True)
        if c.memory.fits:
            break
    return c

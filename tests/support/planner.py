"""What the planner's validation tests share: a published run's training layout, as its recipe
sets it."""

from __future__ import annotations

from dataclasses import replace

from infra.planner import Candidate, Layout, TrainingSetup, evaluate
from infra.planner.layout import RECOMPUTES, Recompute
from infra.planner.rl import RLSetup, _seq_len


def recipe_training(model: str, system: str, nodes: int, layout: Layout,
                    recompute: Recompute | None, rl: RLSetup) -> Candidate:
    """The run's training with the recipe's recompute; the lightest that fits only where the
    recipe states none (the tests assert the fit per row, so a recipe setting that does not fit
    fails there rather than falling back)."""
    setup = TrainingSetup(seq_len=_seq_len(rl), global_batch=rl.train_batch)
    for rc in (recompute,) if recompute else RECOMPUTES:
        c = evaluate(model, system, nodes, replace(layout, recompute=rc), setup,
                     ep_backend="nccl", allow_reference_systems=True)
        if c.memory.fits:
            break
    return c

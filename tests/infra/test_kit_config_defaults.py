"""The kit's training config mirrors sections of the trainer's run config (rltrainer.contract.schema):
every field both sides have starts at the same value, so the default config renders the run
config the trainer documents (SCHEMA_EXAMPLE) and a field left unset means the same on both sides."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from infra.config.training_model import (
    CheckpointConfig, ExpertParallelConfig, GrpoConfig, ParallelConfig, RolloutConfig, TrainingConfig,
)
from infra.trainer_contract import (
    RunCheckpointConfig, RunExpertParallelConfig, RunGrpoConfig, RunRolloutParallel, RunTrainingParallel,
    run_config_default,
)
from rltrainer.contract import SCHEMA_EXAMPLE, DataConfig

# kit section, trainer section, where SCHEMA_EXAMPLE holds it
MIRRORED = [
    (GrpoConfig, RunGrpoConfig, ("grpo",)),
    (ParallelConfig, RunTrainingParallel, ("parallel", "training")),
    (RolloutConfig, RunRolloutParallel, ("parallel", "rollout")),
    (CheckpointConfig, RunCheckpointConfig, ("checkpoint",)),
    (ExpertParallelConfig, RunExpertParallelConfig, ("expert_parallel",)),
]
# The trainer's neutral default (no parallelism) where the kit's fits its default config (2 p5
# nodes of Qwen3-30B-A3B); the kit's must then be SCHEMA_EXAMPLE's. rollout.nodes: the kit writes
# null for "no pool", the run config 0 (infra.config.run_config renders one as the other).
DIFFERENT_ON_PURPOSE = {("ParallelConfig", "tp"), ("ParallelConfig", "ep"), ("RolloutConfig", "ep"),
                        ("RolloutConfig", "nodes")}


def _example(path: tuple[str, ...]) -> dict:
    doc = yaml.safe_load(SCHEMA_EXAMPLE)
    for key in path:
        doc = doc[key]
    return doc


@pytest.mark.parametrize("kit, run, path", MIRRORED, ids=[k.__name__ for k, _, _ in MIRRORED])
def test_every_mirrored_default_is_the_trainers(kit, run, path):
    example = _example(path)
    shared = [f for f in dataclasses.fields(run) if f.name in kit.model_fields]
    assert shared, f"{kit.__name__} mirrors no field of {run.__name__}"
    wrong = []
    for f in shared:
        kit_default = kit.model_fields[f.name].default
        if (kit.__name__, f.name) in DIFFERENT_ON_PURPOSE or f.default is dataclasses.MISSING:
            want, source = example[f.name], "SCHEMA_EXAMPLE"
            if (kit.__name__, f.name) == ("RolloutConfig", "nodes"):
                want = None if example[f.name] == 0 else example[f.name]
        else:
            want, source = f.default, f"{run.__name__} default"
        if kit_default != want:
            wrong.append(f"{kit.__name__}.{f.name} = {kit_default!r}, {source} {want!r}")
        shown = None if (kit.__name__, f.name) == ("RolloutConfig", "nodes") else example[f.name]
        if kit_default != shown:  # the example the trainer documents is the kit's default config
            wrong.append(f"{kit.__name__}.{f.name} = {kit_default!r}, SCHEMA_EXAMPLE {shown!r}")
    assert wrong == []


def test_the_reward_model_default_is_the_trainers():
    assert TrainingConfig.model_fields["reward_model"].default == run_config_default(DataConfig, "rm_type")


def test_run_config_default_refuses_a_field_the_trainer_requires_or_lacks():
    with pytest.raises(KeyError, match="num_rollout has no default"):
        run_config_default(RunGrpoConfig, "num_rollout")
    with pytest.raises(KeyError, match="no field 'vpp'"):
        run_config_default(RunTrainingParallel, "vpp")
    assert run_config_default(RunGrpoConfig, "lr") == 1.0e-6

"""The trainer's run-config contract, as the kit uses it: the one place the kit imports ``rltrainer``.

The trainer package (images/trainer, ``rltrainer``) owns the run config: its schema and validator,
the expert-parallel backend names (and which of them can train), the environment variables the
kit's RayJob sets for the trainer, where the run config is mounted, the CloudWatch namespace
of the training metrics, the launcher's exit codes (which `rlkit status` reads from a failed
RayJob), the time its final upload gets after a stop signal, the ``bench ep --span`` format the
fabric gate writes, and the YAML dumper that writes a run.yaml its loader reads back as written.
``rltrainer.contract`` needs PyYAML only, so the ground layer can import
it at module level; the kit declares the dependency (pyproject.toml, requirements.txt).

Names the kit would confuse with its own are renamed here: the trainer's ``ConfigError``,
``Problem`` and ``Span`` (a ``bench ep --span``) are ``RunConfigError``, ``RunConfigProblem`` and
``BenchSpan``; the run config's sections the kit's config mirrors (``GrpoConfig``,
``TrainingParallel``, ``RolloutParallel``, ``CheckpointConfig``, ``ExpertParallelConfig``) are
``Run*``, and ``run_config_default`` reads a default from one of them, so the kit's config
defaults are the trainer's rather than a copy of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

try:
    from rltrainer.contract import (
        DEEPEP_RANK_COUNTS,
        DEEPEP_RANK_COUNTS_SOURCE,
        DEFAULT_KEEP_LOCAL,
        DEFAULT_KEEP_S3,
        DEFAULT_MAX_TOKENS_PER_GPU,
        DEFAULT_RM_TYPE,
        DEFAULT_SAVE_INTERVAL,
        EKS_SCALE_DOWN_MARGIN_S,
        ENVIRONMENT_ENV,
        EP_BACKENDS,
        EXIT_CONFIG,
        EXIT_PREPARE,
        EXIT_RESERVATION_END,
        EXIT_UPLOAD,
        FINAL_UPLOAD_BUDGET_S,
        GIN_TRAINING_RULE,
        LOAD_ESTIMATE_ENV,
        METRICS_ENVIRONMENT_DIMENSION,
        METRICS_NAMESPACE,
        METRICS_RUN_DIMENSION,
        RAYJOB_ENV,
        RESERVATION_END_ENV,
        RESERVATION_ID_ENV,
        ROLLOUT_ESTIMATE_ENV,
        RUN_CONFIG_DIR,
        RUN_CONFIG_FILE,
        RUN_CONFIG_PATH,
        SAVE_SIZE_ESTIMATE_ENV,
        SAVE_UPLOAD_ESTIMATE_ENV,
        TRAINER_RUNTIME_ENV,
        TRAINING_EP_BACKENDS,
        RunConfigDumper,
        engine_heads_fit,
        engine_heads_problem,
        engine_sizes_for_heads,
        parse_run_config,
        pipeline_split,
        pipeline_split_problem,
        span_groups,
    )
    from rltrainer.contract import CheckpointConfig as RunCheckpointConfig
    from rltrainer.contract import ConfigError as RunConfigError
    from rltrainer.contract import ExpertParallelConfig as RunExpertParallelConfig
    from rltrainer.contract import GrpoConfig as RunGrpoConfig
    from rltrainer.contract import RolloutParallel as RunRolloutParallel
    from rltrainer.contract import TrainingParallel as RunTrainingParallel
    from rltrainer.contract import Problem as RunConfigProblem
    from rltrainer.contract import Span as BenchSpan
except ImportError as exc:  # pragma: no cover - the kit's requirements install it
    raise ImportError(
        "the kit needs the trainer package's run-config contract (rltrainer.contract): "
        "pip install -r requirements.txt, or pip install -e images/trainer") from exc



def run_config_default(section: type, name: str) -> Any:
    """The trainer's default for field ``name`` of run-config section ``section`` (a dataclass of
    rltrainer.contract.schema). A field the trainer requires has no default: a KeyError naming it,
    so a kit default cannot silently stand in for one the trainer dropped."""
    for f in dataclasses.fields(section):
        if f.name == name:
            if f.default is dataclasses.MISSING:
                raise KeyError(f"{section.__name__}.{name} has no default in the trainer's run "
                               "config (it is required there): give the kit's field its own")
            return f.default
    raise KeyError(f"{section.__name__} has no field {name!r} in the trainer's run config")


__all__ = [
    "DEEPEP_RANK_COUNTS", "DEEPEP_RANK_COUNTS_SOURCE", "DEFAULT_KEEP_LOCAL", "DEFAULT_KEEP_S3", "DEFAULT_MAX_TOKENS_PER_GPU", "DEFAULT_RM_TYPE", "DEFAULT_SAVE_INTERVAL", "EKS_SCALE_DOWN_MARGIN_S", "ENVIRONMENT_ENV", "RESERVATION_END_ENV", "RESERVATION_ID_ENV",
    "ROLLOUT_ESTIMATE_ENV", "SAVE_SIZE_ESTIMATE_ENV", "SAVE_UPLOAD_ESTIMATE_ENV", "EP_BACKENDS",
    "EXIT_CONFIG", "EXIT_PREPARE", "EXIT_RESERVATION_END", "EXIT_UPLOAD", "FINAL_UPLOAD_BUDGET_S", "GIN_TRAINING_RULE", "LOAD_ESTIMATE_ENV",
    "METRICS_ENVIRONMENT_DIMENSION", "METRICS_NAMESPACE", "METRICS_RUN_DIMENSION", "RAYJOB_ENV",
    "RUN_CONFIG_DIR", "RUN_CONFIG_FILE", "RUN_CONFIG_PATH", "TRAINER_RUNTIME_ENV",
    "TRAINING_EP_BACKENDS", "RunConfigDumper", "RunConfigError", "RunConfigProblem", "engine_heads_fit", "engine_heads_problem",
    "engine_sizes_for_heads", "parse_run_config",
    "pipeline_split", "pipeline_split_problem", "BenchSpan", "span_groups",
    "RunCheckpointConfig", "RunExpertParallelConfig", "RunGrpoConfig", "RunRolloutParallel",
    "RunTrainingParallel", "run_config_default",
]

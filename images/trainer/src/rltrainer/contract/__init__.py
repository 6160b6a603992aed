"""The run-config contract between the kit and the trainer, owned by the trainer.

The kit renders the run config (the YAML the RL job mounts at ``RUN_CONFIG_PATH``) from its own
config, so the schema here is a contract: the keys are exactly those in ``SCHEMA_EXAMPLE``,
unknown keys are errors, and every problem is reported at once. Each problem names the field
path, the bad value, the rule it breaks and how to fix it; tests assert the exact text.

Besides the schema and its validator, the contract holds the names both sides spell: the
expert-parallel backends (and which of them can train), the environment variables the kit sets
for the trainer, the run config's path and the CloudWatch namespace of the training metrics.

This package needs PyYAML and the standard library only (images/trainer/tests/
test_trainer_contract.py checks): the kit imports it at ``cdk synth`` and ``rlkit`` time
(through infra/trainer_contract.py), where neither torch nor the trainer's S3 client is wanted.

- ``names``     the shared names and constants;
- ``problems``  ``Problem`` and ``ConfigError``;
- ``schema``    the sections of run.yaml as frozen dataclasses, defaults, launcher-owned flags;
- ``reader``    the problem-collecting reader the validator uses;
- ``pipeline``  how the layers split over the pipeline stages (``pipeline_split``), its problems;
- ``rules``     ``parse_run_config`` / ``load_run_config`` and the cross-field rules;
- ``spans``     the ``bench ep --span`` format (the run's EP group layouts): writer, reader, groups.
"""

from .names import (
    DEEPEP_RANK_COUNTS,
    DEEPEP_RANK_COUNTS_SOURCE,
    DEFAULT_RM_TYPE,
    EKS_SCALE_DOWN_MARGIN_S,
    ENVIRONMENT_ENV,
    EP_BACKENDS,
    EXIT_CONFIG,
    EXIT_PREPARE,
    EXIT_RESERVATION_END,
    EXIT_UPLOAD,
    FINAL_UPLOAD_BUDGET_S,
    GIN_TRAINING_FIX,
    GIN_TRAINING_RULE,
    IMAGE_BACKEND_ENV,
    LOAD_ESTIMATE_ENV,
    MEGATRON_DIR,
    METRICS_ENVIRONMENT_DIMENSION,
    METRICS_NAMESPACE,
    METRICS_NO_ENVIRONMENT,
    METRICS_RUN_DIMENSION,
    RAYJOB_ENV,
    RESERVATION_END_ENV,
    RESERVATION_ID_ENV,
    RM_TYPES,
    ROLLOUT_ESTIMATE_ENV,
    RUN_CONFIG_DIR,
    RUN_CONFIG_FILE,
    RUN_CONFIG_PATH,
    SAVE_SIZE_ESTIMATE_ENV,
    SAVE_UPLOAD_ESTIMATE_ENV,
    TRAINER_RUNTIME_ENV,
    TRAINING_EP_BACKENDS,
)
from .problems import MISSING, ConfigError, Problem, render_value
from .heads import (
    HEADS_RULE_SOURCE, engine_heads_fit, engine_heads_problem, engine_heads_problems, engine_sizes_for_heads, heads_rule,
)
from .pipeline import (
    EXPLICIT_PIPELINE_SPLIT_FLAGS, PIPELINE_SPLIT_EXTRA_FLAGS, PipelineSplit, model_pipeline_split, pipeline_split,
    pipeline_split_problem, pipeline_split_problems,
)
from .rules import RunConfigDumper, expert_count_problems, load_run_config, parse_run_config, parse_s3_uri
from .spans import SPAN_FORMAT, Span, parse_span, span_groups
from .schema import (
    DEFAULT_KEEP_LOCAL,
    DEFAULT_KEEP_S3,
    DEFAULT_LOCAL_DIR,
    DEFAULT_MAX_TOKENS_PER_GPU,
    DEFAULT_SAVE_INTERVAL,
    OWNED_FLAGS,
    RECOMPUTES,
    SCHEMA_EXAMPLE,
    CheckpointConfig,
    DataConfig,
    ExpertParallelConfig,
    GrpoConfig,
    ModelConfig,
    ParallelConfig,
    RolloutParallel,
    RunConfig,
    TrainingParallel,
    flag_value,
)

__all__ = [
    "DEEPEP_RANK_COUNTS", "DEEPEP_RANK_COUNTS_SOURCE", "DEFAULT_KEEP_LOCAL", "DEFAULT_KEEP_S3", "DEFAULT_LOCAL_DIR", "DEFAULT_MAX_TOKENS_PER_GPU", "DEFAULT_RM_TYPE", "DEFAULT_SAVE_INTERVAL", "EKS_SCALE_DOWN_MARGIN_S",
    "ENVIRONMENT_ENV", "EP_BACKENDS", "EXIT_CONFIG", "EXIT_PREPARE", "EXIT_RESERVATION_END", "EXIT_UPLOAD", "FINAL_UPLOAD_BUDGET_S",
    "GIN_TRAINING_FIX", "GIN_TRAINING_RULE",
    "IMAGE_BACKEND_ENV", "LOAD_ESTIMATE_ENV", "MEGATRON_DIR", "METRICS_ENVIRONMENT_DIMENSION", "METRICS_NAMESPACE",
    "METRICS_NO_ENVIRONMENT", "METRICS_RUN_DIMENSION", "MISSING",
    "OWNED_FLAGS", "RAYJOB_ENV", "RECOMPUTES", "RESERVATION_END_ENV", "RESERVATION_ID_ENV", "RM_TYPES", "ROLLOUT_ESTIMATE_ENV",
    "RUN_CONFIG_DIR", "RUN_CONFIG_FILE", "RUN_CONFIG_PATH", "SAVE_SIZE_ESTIMATE_ENV", "SAVE_UPLOAD_ESTIMATE_ENV",
    "SCHEMA_EXAMPLE",
    "TRAINER_RUNTIME_ENV", "TRAINING_EP_BACKENDS",
    "CheckpointConfig", "ConfigError", "DataConfig", "ExpertParallelConfig", "GrpoConfig", "ModelConfig",
    "ParallelConfig", "Problem", "RolloutParallel", "RunConfig", "RunConfigDumper", "TrainingParallel",
    "expert_count_problems", "flag_value", "load_run_config", "parse_run_config", "parse_s3_uri",
    "EXPLICIT_PIPELINE_SPLIT_FLAGS", "PIPELINE_SPLIT_EXTRA_FLAGS", "PipelineSplit", "model_pipeline_split",
    "pipeline_split", "pipeline_split_problem", "pipeline_split_problems",
    "HEADS_RULE_SOURCE", "engine_heads_fit", "engine_heads_problem", "engine_heads_problems",
    "engine_sizes_for_heads", "heads_rule",
    "render_value",
    "SPAN_FORMAT", "Span", "parse_span", "span_groups",
]

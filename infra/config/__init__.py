"""The kit's typed configuration: one YAML file describes one environment.

``load_config`` parses a file (or returns the built-in default), checks types with pydantic and
then runs the semantic rules in ``validate``; every problem is collected and reported at once,
each naming the field path, the bad value, the rule and the fix. Nothing is built until the whole
config is valid. The package imports no CDK, reads nothing but the file it is given, and imports
nothing above it (not the planner, manifests or ops).

Modules, by concern:

- ``model``: the sections and ``KitConfig`` (types, defaults, the JSON schema's descriptions);
- ``training_model``: the ``training`` section's models;
- ``addons``: the ``addons`` section;
- ``rules`` / ``values``: semantic rules (``validate``) and rules on plain values;
- ``trainer``: the trainer's contract as the config sees it (EP backends, run-config check);
- ``run_config``: the trainer's run.yaml this config renders;
- ``derived``: values derived from a valid config (shared file system, checkpoint dir, cost);
- ``warnings``: what a valid config allows but a user should hear about;
- ``loader``: reading the file strictly, ``parse_config`` / ``load_config``, ``json_schema``;
- ``errors``: ``ConfigError`` and config problems (``infra.problems.Problem``).
"""

from infra.catalog.fsx import (
    SHARED_FS_CAPACITY_STEP_GIB,
    SHARED_FS_MIN_CAPACITY_GIB,
    SHARED_FS_THROUGHPUTS,
    shared_fs_required_gib,
    valid_shared_fs_capacity_gib,
)
from infra.catalog.instances import supports_gin_gpu
from infra.addons.config import AddonConfig, AddonsConfig
from infra.addons.dcgm_exporter import DcgmExporterConfig
from infra.config.derived import (
    CHECKPOINT_LOCAL_DIR,
    checkpoint_local_dir,
    config_cost,
    has_shared_fs,
)
from infra.config.errors import ConfigError, problem
from infra.config.loader import (
    MAX_CONFIG_BYTES,
    MAX_INT_DIGITS,
    MAX_NESTING,
    json_schema,
    load_config,
    parse_config,
    parse_config_text,
    read_config_file,
)
from infra.config.model import (
    LOG_RETENTION_DAYS,
    CapacityConfig,
    CostGuardConfig,
    EndpointAccessConfig,
    ExistingVpc,
    GpuNodeGroupConfig,
    ImageBuildConfig,
    KitConfig,
    NodeHealthConfig,
    ObservabilityConfig,
    SharedFileSystemConfig,
    StorageConfig,
    SystemNodesConfig,
    TaintConfig,
    VpcConfig,
)
from infra.config.rules import MAX_BACKOFF_LIMIT, validate
from infra.config.training_model import (
    ExpertParallelConfig,
    GrpoConfig,
    ParallelConfig,
    RolloutConfig,
    TrainingConfig,
)
from infra.config.run_config import CHECKPOINT_SAVE_INTERVAL, run_config_document
from infra.config.trainer import (
    EP_BACKENDS,
    TRAINING_EP_BACKENDS,
    trainer_problems,
    training_ep_backend_problems,
)
from infra.config.values import (
    KIT_TAG_PREFIX,
    MAX_GPU_NODES_PER_GROUP,
    MAX_SYSTEM_NODES,
    MAX_USER_TAGS,
)
from infra.config.warnings import config_warnings
from infra.problems import MAX_QUOTED_CHARS, Problem, shorten

__all__ = [
    "AddonConfig", "AddonsConfig", "CHECKPOINT_LOCAL_DIR", "CHECKPOINT_SAVE_INTERVAL",
    "CapacityConfig", "ConfigError", "CostGuardConfig", "DcgmExporterConfig", "EP_BACKENDS",
    "EndpointAccessConfig", "ExistingVpc", "ExpertParallelConfig", "GpuNodeGroupConfig",
    "GrpoConfig", "ImageBuildConfig", "KIT_TAG_PREFIX", "KitConfig", "LOG_RETENTION_DAYS",
    "MAX_BACKOFF_LIMIT", "MAX_CONFIG_BYTES", "MAX_GPU_NODES_PER_GROUP", "MAX_INT_DIGITS",
    "MAX_NESTING", "MAX_QUOTED_CHARS", "MAX_SYSTEM_NODES", "MAX_USER_TAGS", "NodeHealthConfig",
    "ObservabilityConfig", "ParallelConfig", "Problem", "RolloutConfig",
    "SHARED_FS_CAPACITY_STEP_GIB", "SHARED_FS_MIN_CAPACITY_GIB", "SHARED_FS_THROUGHPUTS",
    "SharedFileSystemConfig", "StorageConfig", "SystemNodesConfig", "TRAINING_EP_BACKENDS",
    "TaintConfig", "TrainingConfig", "VpcConfig", "checkpoint_local_dir", "config_cost",
    "config_warnings", "has_shared_fs", "json_schema", "load_config", "parse_config",
    "parse_config_text", "problem", "read_config_file", "run_config_document",
    "shared_fs_required_gib", "shorten", "supports_gin_gpu", "trainer_problems",
    "training_ep_backend_problems", "valid_shared_fs_capacity_gib", "validate",
]

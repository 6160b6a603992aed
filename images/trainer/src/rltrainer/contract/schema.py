"""The run config's schema: the keys of run.yaml, their defaults and types, and the Megatron/Miles
flags the launcher derives from them (so ``model.megatron_args`` may not set them again)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .names import DEFAULT_RM_TYPE

# The whole schema, every key at a typical value (images/trainer/README.md documents each).
SCHEMA_EXAMPLE = """\
run_name: qwen3-30b-a3b-grpo
model:
  name: qwen3-30b-a3b
  hf_checkpoint: /models/Qwen3-30B-A3B
  megatron_args: []
checkpoint:
  s3_uri: s3://my-bucket/checkpoints/qwen3-30b-a3b-grpo/
  local_dir: /checkpoints
  save_interval: 20
  keep_local: 1
  keep_s3: 0
data:
  prompt_data: s3://my-bucket/datasets/dapo-math-17k.jsonl
  input_key: prompt
  label_key: label
  rm_type: deepscaler
grpo:
  num_rollout: 1000
  rollout_batch_size: 32
  n_samples_per_prompt: 8
  global_batch_size: 256
  num_steps_per_rollout: 1
  rollout_max_response_len: 8192
  rollout_temperature: 1.0
  lr: 1.0e-6
  kl_loss_coef: 0.0
  eps_clip: 0.2
parallel:
  nodes: 2
  gpus_per_node: 8
  training: {tp: 4, pp: 1, cp: 1, ep: 8, etp: 1, optimizer_cpu_offload: false, recompute: full,
             max_tokens_per_gpu: 20480}
  rollout: {gpus_per_engine: 8, ep: 8, placement: colocated, nodes: 0, overlap: none, off_policy_steps: 0}
expert_parallel:
  backend: nccl
"""

DEFAULT_LOCAL_DIR = "/checkpoints"
DEFAULT_SAVE_INTERVAL = 20
# Whole saves kept on the local (shared) file system once a newer one is complete in S3. One is
# the least that keeps a save to resume from without a download; with the save being written
# beside it that is two saves on disk, what the kit sizes the file system for (docs/operations.md,
# "A run that saves for a week").
DEFAULT_KEEP_LOCAL = 1
# Complete saves kept in S3 (the newest ones); 0 keeps every save. Every save stays by default:
# deleting finished checkpoints is the user's choice, and S3 costs far less than the GPU hours a
# save holds (docs/operations.md, "A run that saves for a week").
DEFAULT_KEEP_S3 = 0
# Tokens one training micro-batch holds per GPU. The launcher always runs Miles' dynamic batching
# (--use-dynamic-batch-size): Miles v0.1.0 (radixark/miles@78527b9102b3) packs each micro-batch
# up to --max-tokens-per-gpu x cp tokens over a context-parallel group and ignores
# --micro-batch-size (miles/backends/training_utils/data.py:490-498; first fit,
# miles/utils/data.py:277-288: one sample longer than that runs alone). So this, not a sequence
# count, sizes the activations the kit's planner must fit. 20480: Miles' Qwen3-30B-A3B recipe's
# value, the launcher's default.
DEFAULT_MAX_TOKENS_PER_GPU = 20480

# Flags the launcher derives from the config. Passing one of them again through
# model.megatron_args would silently fight the config (argparse keeps the last one),
# so it is an error with a pointer to the config field that owns the value.
OWNED_FLAGS: dict[str, str] = {
    "--actor-num-nodes": "parallel.nodes",
    "--actor-num-gpus-per-node": "parallel.gpus_per_node",
    "--num-gpus-per-node": "parallel.gpus_per_node",
    "--tensor-model-parallel-size": "parallel.training.tp",
    "--pipeline-model-parallel-size": "parallel.training.pp",
    "--context-parallel-size": "parallel.training.cp",
    "--expert-model-parallel-size": "parallel.training.ep",
    "--expert-tensor-parallel-size": "parallel.training.etp",
    "--rollout-num-gpus-per-engine": "parallel.rollout.gpus_per_engine",
    "--colocate": "parallel.rollout.placement",
    "--rollout-num-gpus": "parallel.rollout.nodes",
    "--update-weights-interval": "parallel.rollout.off_policy_steps",
    "--fully-async": "parallel.rollout.overlap",
    "--max-weight-staleness": "parallel.rollout.off_policy_steps",
    "--sglang-ep-size": "parallel.rollout.ep",
    "--sglang-moe-a2a-backend": "expert_parallel.backend",
    "--moe-flex-dispatcher-backend": "expert_parallel.backend",
    "--moe-enable-deepep": "expert_parallel.backend",
    "--hf-checkpoint": "model.hf_checkpoint",
    "--load": "checkpoint.local_dir",
    "--save": "checkpoint.local_dir",
    "--save-interval": "checkpoint.save_interval",
    "--save-trigger-sentinel": "checkpoint.local_dir",
    "--prompt-data": "data.prompt_data",
    "--input-key": "data.input_key",
    "--label-key": "data.label_key",
    "--rm-type": "data.rm_type",
    "--max-tokens-per-gpu": "parallel.training.max_tokens_per_gpu",
    "--optimizer-cpu-offload": "parallel.training.optimizer_cpu_offload",
    "--overlap-cpu-optimizer-d2h-h2d": "parallel.training.optimizer_cpu_offload",
    "--use-precision-aware-optimizer": "parallel.training.optimizer_cpu_offload",
    "--num-rollout": "grpo.num_rollout",
    "--rollout-batch-size": "grpo.rollout_batch_size",
    "--n-samples-per-prompt": "grpo.n_samples_per_prompt",
    "--global-batch-size": "grpo.global_batch_size",
    "--num-steps-per-rollout": "grpo.num_steps_per_rollout",
    "--rollout-max-response-len": "grpo.rollout_max_response_len",
    "--rollout-temperature": "grpo.rollout_temperature",
    "--lr": "grpo.lr",
    "--kl-loss-coef": "grpo.kl_loss_coef",
    "--eps-clip": "grpo.eps_clip",
}

# The keys each section allows (anything else is an error).
TOP_KEYS = ("run_name", "model", "checkpoint", "data", "grpo", "parallel", "expert_parallel")
MODEL_KEYS = ("name", "hf_checkpoint", "megatron_args")
CHECKPOINT_KEYS = ("s3_uri", "local_dir", "save_interval", "keep_local", "keep_s3")
DATA_KEYS = ("prompt_data", "input_key", "label_key", "rm_type")
GRPO_KEYS = (
    "num_rollout",
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "num_steps_per_rollout",
    "rollout_max_response_len",
    "rollout_temperature",
    "lr",
    "kl_loss_coef",
    "eps_clip",
)
PARALLEL_KEYS = ("nodes", "gpus_per_node", "training", "rollout")
TRAINING_SIZE_KEYS = ("tp", "pp", "cp", "ep", "etp")
TRAINING_KEYS = TRAINING_SIZE_KEYS + ("optimizer_cpu_offload", "recompute", "max_tokens_per_gpu")
# Activation recompute (Megatron --recompute-granularity): none, selective (layer norms, the MoE
# activation and, with multi-latent attention, its up-projections) or full (every layer, one at a
# time). The launcher renders it unless model.megatron_args choose their own granularity.
RECOMPUTES = ("none", "selective", "full")
ROLLOUT_KEYS = ("gpus_per_engine", "ep", "placement", "nodes", "overlap", "off_policy_steps")
# Where the SGLang engines run (Miles v0.1.0: radixark/miles@78527b9102b3
# miles/ray/placement_group.py:92-105): on the training
# GPUs (--colocate) or on a pool of their own after the training GPUs (--rollout-num-gpus).
PLACEMENTS = ("colocated", "disaggregated")
# How generation overlaps training: none (train.py, phases in turn), batch (train_async.py: the
# next rollout generates while this one trains, weights pushed every off_policy_steps rollouts,
# train_async.py:107-111), stream (train_async.py --fully-async: engines never drain, groups at
# most off_policy_steps weight versions old; miles/utils/arguments.py:494-503, 672-681).
OVERLAPS = ("none", "batch", "stream")
EXPERT_PARALLEL_KEYS = ("backend",)


def flag_value(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--flag v`` or ``--flag=v``) in an argument list."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


# --- the sections of run.yaml ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hf_checkpoint: str
    megatron_args: tuple[str, ...] = ()

    def megatron_flag_value(self, flag: str) -> str | None:
        """The value given to ``flag`` in megatron_args (``--flag v`` or ``--flag=v``)."""
        return flag_value(self.megatron_args, flag)

    def has_flag(self, flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in self.megatron_args)


@dataclass(frozen=True)
class CheckpointConfig:
    s3_uri: str
    local_dir: str = DEFAULT_LOCAL_DIR
    save_interval: int = DEFAULT_SAVE_INTERVAL
    keep_local: int = DEFAULT_KEEP_LOCAL
    keep_s3: int = DEFAULT_KEEP_S3


@dataclass(frozen=True)
class DataConfig:
    prompt_data: str
    input_key: str = "prompt"
    label_key: str = "label"
    rm_type: str = DEFAULT_RM_TYPE  # the DAPO-math recipe's


@dataclass(frozen=True)
class GrpoConfig:
    num_rollout: int
    rollout_batch_size: int
    n_samples_per_prompt: int
    global_batch_size: int
    num_steps_per_rollout: int = 1
    rollout_max_response_len: int = 8192
    rollout_temperature: float = 1.0
    lr: float = 1.0e-6
    kl_loss_coef: float = 0.0
    eps_clip: float = 0.2


@dataclass(frozen=True)
class TrainingParallel:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    # Adam's state and step on the CPU (Miles: --optimizer-cpu-offload with
    # --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer), for memory-tight H100 layouts.
    optimizer_cpu_offload: bool = False
    recompute: str = "full"  # RECOMPUTES
    max_tokens_per_gpu: int = DEFAULT_MAX_TOKENS_PER_GPU  # Miles --max-tokens-per-gpu


@dataclass(frozen=True)
class RolloutParallel:
    gpus_per_engine: int
    ep: int = 1
    placement: str = "colocated"  # PLACEMENTS
    nodes: int = 0  # disaggregated: the nodes of parallel.nodes that generate (0 when colocated)
    overlap: str = "none"  # OVERLAPS
    off_policy_steps: int = 0  # K: generation runs up to K optimizer steps ahead (0: on-policy)

    @property
    def entry_point(self) -> str:
        """Miles' driver script: train_async.py for an overlapped mode (train.py asserts
        ``not args.fully_async``, train.py:23; train_async.py refuses --colocate, :23)."""
        return "train.py" if self.overlap == "none" else "train_async.py"


@dataclass(frozen=True)
class ParallelConfig:
    nodes: int
    gpus_per_node: int
    training: TrainingParallel = field(default_factory=TrainingParallel)
    rollout: RolloutParallel | None = None

    @property
    def rollout_nodes(self) -> int:
        """Nodes of a disaggregated rollout pool (0 when rollout shares the training GPUs)."""
        return self.rollout.nodes if self.rollout is not None else 0

    @property
    def training_nodes(self) -> int:
        """Nodes that train (Miles --actor-num-nodes): all of them unless rollout has a pool."""
        return self.nodes - self.rollout_nodes

    @property
    def world_size(self) -> int:
        """Megatron's world: the training GPUs."""
        return self.training_nodes * self.gpus_per_node

    @property
    def data_parallel_size(self) -> int:
        t = self.training
        return self.world_size // (t.tp * t.pp * t.cp)


@dataclass(frozen=True)
class ExpertParallelConfig:
    backend: str = "nccl"

    @property
    def uses_deepep(self) -> bool:
        return self.backend.startswith("deepep")


@dataclass(frozen=True)
class RunConfig:
    run_name: str
    model: ModelConfig
    checkpoint: CheckpointConfig
    data: DataConfig
    grpo: GrpoConfig
    parallel: ParallelConfig
    expert_parallel: ExpertParallelConfig = field(default_factory=ExpertParallelConfig)

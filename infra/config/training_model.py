"""The ``training`` section of the config: parallelism, rollout, GRPO, checkpoints and the run's
estimates (types, defaults and the JSON schema's descriptions; ``infra.config.model`` holds the
rest of ``KitConfig``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infra import names
from infra.catalog.models import MODEL_CATALOG
from infra.config.base import Number, _Model
from infra.trainer_contract import (
    DEFAULT_KEEP_LOCAL, DEFAULT_KEEP_S3, DEFAULT_MAX_TOKENS_PER_GPU, DEFAULT_RM_TYPE,
    DEFAULT_SAVE_INTERVAL, RunExpertParallelConfig, RunGrpoConfig, RunRolloutParallel,
    RunTrainingParallel, run_config_default,
)

# training.start_deadline_minutes: a RayJob's preRunningDeadlineSeconds is an int32, minimum 1
# (ray-project/kuberay@59d663aeec13 ray-operator/apis/ray/v1/rayjob_types.go:290;
# helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml:154-157, KubeRay v1.7.0); a week in
# seconds is far below its limit (manifests/context.py clamps to it anyway).
MIN_START_DEADLINE_MINUTES = 15
MAX_START_DEADLINE_MINUTES = 7 * 24 * 60
# training.startup_minutes unset: the part of a run's start the kit cannot size from the config
# (the block's nodes joining, pulling the trainer image's ~20 GB of compressed layers
# (infra/constructs/trainer_image_build.py), starting Ray). An estimate, not a measurement; the
# reads from the file system it adds are sized (infra.config.derived.startup_estimate).
STARTUP_FIXED_MINUTES = 15
# training.save_upload_minutes unset, and a save the kit cannot size (no shared file system, or a
# model the catalog lacks): a guess, not a measurement (the field's old fixed default).
SAVE_UPLOAD_UNSIZED_MINUTES = 35

# Where the trainer's run config has a default, the kit's field takes it from there
# (run_config_default), so the two cannot drift apart. The kit's own defaults are where the trainer
# has none (it requires the field) or a neutral one (tp, ep and the engines' ep of 1): the kit's
# fit its default config, 2 p5.48xlarge nodes of Qwen3-30B-A3B, and equal the trainer's
# SCHEMA_EXAMPLE (tests/infra/test_kit_config_defaults.py compares every field both sides have).


class ParallelConfig(_Model):
    tp: int = Field(4, description="Tensor parallel size.")
    pp: int = Field(run_config_default(RunTrainingParallel, "pp"), description="Pipeline parallel size, at most the model's layers. One that "
                    "does not divide them runs an uneven split: the launcher passes "
                    "--decoder-first/last-pipeline-num-layers (rltrainer.contract.pipeline_split).")
    cp: int = Field(run_config_default(RunTrainingParallel, "cp"), description="Context parallel size.")
    ep: int = Field(8, description="Expert parallel size.")
    etp: int = Field(run_config_default(RunTrainingParallel, "etp"), description="Expert tensor parallel size.")
    vpp: int | None = Field(None, description="Virtual pipeline stages per rank: null (or 1). "
                            "The launcher runs no interleaved pipeline yet (the trainer's run "
                            "config has no virtual-pipeline size), so more is refused.")
    optimizer_cpu_offload: bool = Field(
        run_config_default(RunTrainingParallel, "optimizer_cpu_offload"), description="Keep Adam's state and step on the CPU (Miles' --optimizer-cpu-offload with "
        "--overlap-cpu-optimizer-d2h-h2d and --use-precision-aware-optimizer), for memory-tight H100 "
        "layouts; Miles' Qwen3 MoE H100 recipes use it, its Blackwell ones do not.")
    recompute: Literal["none", "selective", "full"] = Field(
        run_config_default(RunTrainingParallel, "recompute"), description="Activation recompute the launcher asks Megatron for: none; selective "
        "(layer norms, the MoE activation and, with multi-latent attention, its up-projections); "
        "full (every layer, one at a time). rlkit plan --write-config writes the one its memory and "
        "step-time estimates assumed. model.megatron_args choosing a granularity take precedence.")
    max_tokens_per_gpu: int = Field(
        DEFAULT_MAX_TOKENS_PER_GPU, description="Tokens one training micro-batch holds per GPU "
        "(Miles --max-tokens-per-gpu; at least 1). The launcher always runs Miles' dynamic "
        "batching, which packs samples into micro-batches of up to this many tokens per GPU (times "
        "cp over a context-parallel group), so this sizes the activation memory; rlkit plan "
        "--write-config writes the value it planned with.")


class RolloutConfig(_Model):
    gpus_per_engine: int = Field(8, description=(
        "GPUs per SGLang rollout engine (its tensor-parallel size): must fit the model's attention "
        "heads, i.e. divide them and divide or be a multiple of the KV heads (SGLang 0.5.16 "
        "qwen3_moe.py:458-468; rltrainer.contract.heads)."))
    ep: int = Field(8, description="Expert parallel size inside a rollout engine.")
    placement: Literal["colocated", "disaggregated"] = Field(
        run_config_default(RunRolloutParallel, "placement"),
        description="Where the SGLang engines run. colocated: on the training GPUs, taking turns "
        "with training (Miles --colocate). disaggregated: on rollout.nodes of the run's "
        "training.nodes, apart from training (Miles --rollout-num-gpus); `rlkit plan --rl` ranks "
        "both.",
    )
    nodes: int | None = Field(
        None,
        description="With placement disaggregated: how many of the run's training.nodes generate "
        "(the rollout pool); the other training.nodes - nodes train. Unset when colocated.",
    )
    overlap: Literal["none", "batch", "stream"] = Field(
        run_config_default(RunRolloutParallel, "overlap"),
        description="How generation overlaps training (disaggregated only). none: rollout, weight "
        "sync and training in turn (Miles train.py). batch: the next rollout generates while this "
        "one trains, weights pushed every off_policy_steps rollouts (train_async.py "
        "--update-weights-interval). stream: the engines never drain, with in-flight weight "
        "updates (train_async.py --fully-async --max-weight-staleness).",
    )
    off_policy_steps: int = Field(
        run_config_default(RunRolloutParallel, "off_policy_steps"),
        description="How many optimizer steps generation may run ahead of training: 0 with "
        "overlap none (on-policy), at least 1 with batch or stream.",
    )



class ExpertParallelConfig(_Model):
    backend: str = Field(
        run_config_default(RunExpertParallelConfig, "backend"),
        description="Expert-parallel all-to-all: nccl (plain NCCL all-to-all), deepep-nvshmem "
        "(DeepEP over NVSHMEM/libfabric) or deepep-gin (DeepEP V2 over NCCL GIN).",
    )
    gin_mode: Literal["gpu", "proxy"] | None = Field(
        None,
        description="deepep-gin only: gpu (GPU-initiated; catalog types with gin_gpu: p5en, "
        "p6-b200, p6-b300) or proxy (CPU proxy). Default: gpu where supported, else proxy.",
    )


class GrpoConfig(_Model):
    # the trainer requires these four: the kit's defaults (its SCHEMA_EXAMPLE's values)
    num_rollout: int = 1000
    rollout_batch_size: int = 32
    n_samples_per_prompt: int = 8
    global_batch_size: int = 256
    num_steps_per_rollout: int = run_config_default(RunGrpoConfig, "num_steps_per_rollout")
    rollout_max_response_len: int = run_config_default(RunGrpoConfig, "rollout_max_response_len")
    rollout_temperature: Number = run_config_default(RunGrpoConfig, "rollout_temperature")
    lr: Number = run_config_default(RunGrpoConfig, "lr")
    kl_loss_coef: Number = run_config_default(RunGrpoConfig, "kl_loss_coef")
    eps_clip: Number = run_config_default(RunGrpoConfig, "eps_clip")


class CheckpointConfig(_Model):
    save_interval: int = Field(
        DEFAULT_SAVE_INTERVAL,
        description="Rollouts between two saves (Miles' --save-interval); at least 1. Each save "
        "should be in S3 before the next one starts (save_interval x training.rollout_minutes at "
        "least one save and its upload, training.save_upload_minutes or the kit's estimate of "
        "it): until then the one before it stays on the shared "
        "file system too, and config validation refuses a file system without room for it.",
    )
    keep_local: int = Field(
        DEFAULT_KEEP_LOCAL,
        description="Finished saves the launcher keeps on the shared file system; older ones are "
        "deleted once S3 holds them complete (never the newest complete one, never the one "
        "resumed from). The file system is sized for the reference weights plus keep_local + 1 "
        "saves (the kept ones and the one being written); at least 1.",
    )
    keep_s3: int = Field(
        DEFAULT_KEEP_S3,
        description="Complete saves the launcher keeps in S3 (the newest ones); older ones are "
        "deleted there, manifest first (never one still on the shared file system, never the one "
        "resumed from). 0 keeps every save. On the versioned bucket every version of a deleted "
        "save goes with it, so its storage is freed at once (not after "
        "storage.noncurrent_version_days).",
    )


def model_hf_checkpoint(model_key: str) -> str | None:
    """Where the kit keeps catalog model ``model_key``'s Hugging Face weights: the repository's
    name under the shared file system's models folder (``/fsx/models/Qwen3-30B-A3B``, which shows
    ``s3://<bucket>/models/Qwen3-30B-A3B/``). None for a model the catalog does not know."""
    model = MODEL_CATALOG.get(model_key)
    repo = model.hf_repo if model is not None else None
    return f"{names.SHARED_FS_MODELS_DIR}/{repo.split('/')[1]}" if repo else None


class TrainingConfig(_Model):
    run_name: str = Field("qwen3-30b-a3b-grpo", description="Name of the RL run (DNS label).")
    model: str = Field("qwen3-30b-a3b", description="A model of the kit's catalog "
                       f"(infra/catalog/models.py): {', '.join(MODEL_CATALOG)}.")
    hf_checkpoint: str = Field(
        model_hf_checkpoint("qwen3-30b-a3b"),  # the default model's
        description="Hugging Face weights: a path every pod sees (under "
        f"{names.SHARED_FS_MODELS_DIR}, which shows the bucket's {names.MODELS_PREFIX} prefix), a "
        "path in the image, or s3://."
    )
    prompt_data: str = Field(
        "datasets/dapo-math-17k.jsonl",
        description="Prompt data: a key under the data bucket, an s3:// URI or a local path. JSON "
        "lines, one prompt per line: `prompt` (the question; a chat template is applied) and "
        "`label` (the reference answer the reward model compares with); see images/trainer/README.md.",
    )
    reward_model: str = Field(
        DEFAULT_RM_TYPE,
        description="Miles' rule-based reward (--rm-type) for the prompt data: deepscaler for DAPO "
        "math (dapo-math-17k, Miles' own recipe), or dapo, math, gemma_math, f1, gpqa, ifbench "
        "(a boxed_ prefix scores only the \\boxed{} answer).",
    )
    node_group: str = Field("p5", description="The GPU node group the job runs on.")
    nodes: int = Field(2, description="GPU nodes (Ray workers) the job uses.")
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    expert_parallel: ExpertParallelConfig = Field(default_factory=ExpertParallelConfig)
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    checkpoint: CheckpointConfig = Field(
        default_factory=CheckpointConfig,
        description="What the launcher keeps of the run's saves on the shared file system and in "
        "S3 (by default every complete save stays in S3).",
    )
    image: str | None = Field(
        None, description="Trainer image reference, pinned by digest (<repository>@sha256:...) or "
        "with a version tag; not latest and not untagged (the pods pull IfNotPresent, so a moving "
        "tag could run two images in one job). Default: the data stack's ECR repository at "
        "image_tag."
    )
    image_tag: str = Field(
        "0.1.0", description="Version tag of the trainer image in the ECR repository (tags are "
        "immutable there, so use a version, not latest): letters, digits, _ . -, not starting "
        "with . or -. Each expert-parallel backend is its own build, pushed as "
        "<image_tag>-<backend> (at most 128 characters); the manifests pull the one for "
        "expert_parallel.backend."
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for trainer pods."
    )
    backoff_limit: int = Field(
        2, description="Times KubeRay retries the RL job after a failed attempt (a crash, a "
        "worker node lost), each on a new Ray cluster that resumes from the last complete "
        "checkpoint. KubeRay counts every failed attempt, whatever the exit code, and retries one "
        "that did not start within start_deadline_minutes (PreRunningDeadlineExceeded), but none "
        "that failed because the Ray head stopped answering for 5 minutes (its node lost) or ran "
        "past an activeDeadlineSeconds (which the kit does not set): rlkit status says so, and "
        "rlkit launch --replace resumes the run. A Ray head that restarts inside an attempt gets "
        "the job submitted again, which KubeRay does not count; the launcher allows 2 starts per "
        "attempt and fails the third quickly (exit 4)."
    )
    start_deadline_minutes: int = Field(
        60, description="How long the RL job may take to start: from KubeRay's first step "
        "(Initializing) until the Ray cluster is ready and KubeRay has created the submitter Job "
        "(Running), not until the job is submitted. Past it "
        "KubeRay fails the attempt (PreRunningDeadlineExceeded, rendered as the RayJob's "
        "preRunningDeadlineSeconds) and retries it up to backoff_limit times, each with this much "
        "time again: a Ray cluster pod that cannot be scheduled or pull its image would otherwise "
        "hold the RayJob Initializing for ever. Image pulls onto fresh GPU nodes take minutes, so "
        "leave room. A submitter pod that cannot start is out of this deadline's reach: "
        "KubeRay waits for it for ever, and rlkit status names it (Stuck:, exit 1). On a Capacity "
        "Block `rlkit launch` adds the time until the block starts (its pods "
        "wait for its nodes); rendered without the block's window (`rlkit render`, a window "
        "that could not be read) the job gets no deadline there. 0: no deadline; otherwise "
        f"{MIN_START_DEADLINE_MINUTES} to {MAX_START_DEADLINE_MINUTES} (a week)."
    )
    rollout_minutes: Number = Field(
        10.0, description="Estimated wall time of one rollout (generation plus training step). On "
        "a Capacity Block, `rlkit launch` refuses a run that cannot reach its first save before "
        "the block ends, and the launcher asks for its last save this long plus "
        "save_upload_minutes before EKS drains the nodes; the launcher replaces both estimates "
        "with what it measures from the run's own saves."
    )
    startup_minutes: Number | None = Field(
        None, description="Estimated time from `rlkit launch` (or the Capacity Block's start, if "
        "later) to the run's first rollout: nodes joining, the image pull, Ray, staging, and "
        "Megatron and SGLang loading the newest save and the reference weights. On a Capacity "
        "Block `rlkit launch` counts it before the first save, and the launcher counts its "
        f"part after the first {STARTUP_FIXED_MINUTES} minutes (Miles' reads; RLTRAINER_LOAD_S) "
        "after a restore, before it starts training. Unset: "
        f"{STARTUP_FIXED_MINUTES} minutes (nodes, image pull and Ray) plus the newest save and "
        "the reference weights of a catalog model read at the shared file system's baseline "
        "throughput (about 28 minutes more for the default config); a save that must first come "
        "back from S3 takes longer. Set it from an earlier run: the launcher logs the minutes "
        "from KubeRay's start of the attempt to its first rollout."
    )
    save_upload_minutes: Number | None = Field(
        None, description="Estimated time of one save plus its upload to S3, from Megatron "
        "starting the save to the launcher's upload of it being complete. Used with "
        "rollout_minutes on a Capacity Block, against a save period (checkpoint.save_interval x "
        "rollout_minutes): a shorter period starts each save while the one before it uploads, "
        "which keeps one more save on the shared file system (a warning, or refused when the "
        "file system has no room for it), and in `rlkit status`'s quiet window. Unset: one save "
        "of a catalog model written to the shared file system and read back for its upload, both "
        "at the file system's baseline throughput (capacity_gib x throughput_mb_s_per_tib), the "
        "read at the head node's share of the network to S3 where that is slower: 49 minutes for "
        "the default config; a save the kit cannot size (no shared file system, a model the "
        f"catalog lacks) counts {SAVE_UPLOAD_UNSIZED_MINUTES} minutes. Set it from an earlier "
        "run: the time from a save's directory appearing to its upload finishing (on a Capacity "
        "Block the launcher logs what it measured)."
    )

"""The names the kit and the trainer both spell: expert-parallel backends, the runtime
environment the kit's RayJob sets, where the run config is mounted, and the CloudWatch
metrics the launcher writes.

The kit (infra/trainer_contract.py) imports these; the trainer never imports the kit.
Standard library only.
"""

from __future__ import annotations

from types import MappingProxyType

# --- expert-parallel backends --------------------------------------------------------------------

EP_BACKENDS = ("nccl", "deepep-nvshmem", "deepep-gin")
# Backends a training run may use. deepep-gin (DeepEP V2 over NCCL GIN) is benchmark-only for
# now: the pinned Megatron-LM's flex dispatcher imports DeepEP V1's ``Buffer``
# (megatron-lm 37f9161, megatron/core/transformer/moe/fused_a2a.py: ``from deep_ep import
# Buffer``) and knows nothing of V2's ``ElasticBuffer``.
TRAINING_EP_BACKENDS = ("nccl", "deepep-nvshmem")
GIN_TRAINING_RULE = (
    "DeepEP V2 over NCCL GIN cannot train yet: the Megatron-LM that Miles v0.1.0 pins (37f9161) drives "
    "DeepEP V1's Buffer in its flex dispatcher (megatron/core/transformer/moe/fused_a2a.py) and does not "
    "support V2's ElasticBuffer"
)
GIN_TRAINING_FIX = (
    "use `deepep-nvshmem` (DeepEP V1 over NVSHMEM/libfabric) or `nccl`; the fabric gate may still "
    "benchmark deepep-gin"
)

# The EP group sizes DeepEP can run: at deepseek-ai/DeepEP 567632d (the commit the image builds)
# ``Buffer.get_dispatch_config`` and ``get_combine_config`` (deep_ep/buffer.py:245-259, 275-289)
# look the group size up in a fixed table and ``assert num_ranks in config_map, 'Unsupported
# number of EP ranks'`` otherwise. The pinned Megatron calls both with its DeepEP group's size
# before it builds the buffer (megatron-lm 37f9161 megatron/core/transformer/moe/fused_a2a.py:46-47
# ``get_buffer``), and ``rltrainer bench ep`` the same way, so no other size can start.
DEEPEP_RANK_COUNTS = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)
DEEPEP_RANK_COUNTS_SOURCE = ("DeepEP 567632d deep_ep/buffer.py:245-259 Buffer.get_dispatch_config / "
                             "get_combine_config: 'Unsupported number of EP ranks'")

# --- the launcher's exit codes ---------------------------------------------------------------------

# ``rltrainer launch`` exits with the trainer's own code, or one of these; `rlkit status` reads the
# code from the failed RayJob's message and says what to do next for each.
EXIT_CONFIG = 2  # the run config (or the image's backend, the shared file system) refused; no retry
EXIT_UPLOAD = 3  # training succeeded but a finished save could not be uploaded; no retry
EXIT_PREPARE = 4  # staging inputs or restoring the checkpoint failed; training never started
# Stopped for the Capacity Block's end (after its last save is in S3, if it got there), with
# KubeRay's retries off. Not a failure of the config or of the trainer, so a code of its own.
EXIT_RESERVATION_END = 5

# --- reward models ---------------------------------------------------------------------------------

# The rule-based reward functions Miles v0.1.0 dispatches on ``--rm-type``
# (radixark/miles@78527b9102b3 miles/rollout/rm_hub/__init__.py ``async_rm``; a ``boxed_``
# prefix first extracts the boxed answer), minus remote_rm, which needs a reward service the kit
# does not deploy, and the random ones.
RM_TYPES = ("deepscaler", "dapo", "math", "gemma_math", "f1", "gpqa", "ifbench")
# Miles' DAPO-math recipe (radixark/miles@78527b9102b3 scripts/run_qwen3_30b_a3b.py:142-147:
# --prompt-data dapo-math-17k.jsonl --input-key prompt --label-key label --rm-type deepscaler)
# scores with deepscaler; the kit's default data set is that recipe's.
DEFAULT_RM_TYPE = "deepscaler"

# --- the run config file -------------------------------------------------------------------------

# Where the RL job mounts the run config (the kit's ConfigMap) and where ``rltrainer launch``
# reads it by default.
RUN_CONFIG_DIR = "/etc/rltrainer"
RUN_CONFIG_FILE = "run.yaml"
RUN_CONFIG_PATH = f"{RUN_CONFIG_DIR}/{RUN_CONFIG_FILE}"

# --- environment ---------------------------------------------------------------------------------

# The kit's RayJob names itself here, so that the launcher can stop KubeRay's retries of a run
# that failed on its configuration (rltrainer.no_retry).
RAYJOB_ENV = "RLTRAINER_RAYJOB"
# The kit's environment (its config's ``name``), which the kit puts on the Ray head: the training
# metrics carry it as a dimension (METRICS_ENVIRONMENT_DIMENSION), since the run name alone is
# the same in two environments of one account that keep the default run name.
ENVIRONMENT_ENV = "RLTRAINER_ENVIRONMENT"
# Each image variant says which expert-parallel backend it was built for (the Dockerfile sets it).
IMAGE_BACKEND_ENV = "RLTRAINER_IMAGE_EP_BACKEND"
MEGATRON_DIR = "/root/Megatron-LM"  # the Miles image's Megatron-LM checkout
# What Miles' training and rollout processes need besides the EFA profile, as Miles' own launch
# scripts set it in the Ray job's runtime env. The kit puts it on the Ray head and in the
# RayJob's runtime env; the launcher adds it to the training command (rltrainer.miles.train_env).
TRAINER_RUNTIME_ENV = MappingProxyType({
    # Megatron is imported from its source checkout (Miles scripts: PYTHONPATH=/root/Megatron-LM/).
    "PYTHONPATH": MEGATRON_DIR,
    # Megatron overlaps TP communication with compute only with one hardware queue
    # (Miles scripts set it in the runtime env of every recipe).
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "PYTHONUNBUFFERED": "1",
})

# --- a reservation's end ------------------------------------------------------------------------

# A run on an EC2 Capacity Block must save, upload and stop before the block ends. The kit puts
# the block's ID and end (ISO 8601, UTC; read with DescribeCapacityReservations at `rlkit launch`)
# on the Ray head, with its estimates of one rollout and of one save plus its upload; the
# launcher replaces the estimates with what it measures from this run's saves
# (rltrainer.reservation).
RESERVATION_ID_ENV = "RLTRAINER_RESERVATION_ID"
RESERVATION_END_ENV = "RLTRAINER_RESERVATION_END"
ROLLOUT_ESTIMATE_ENV = "RLTRAINER_ROLLOUT_S"
SAVE_UPLOAD_ESTIMATE_ENV = "RLTRAINER_SAVE_UPLOAD_S"
# ... and its estimate, in seconds, of what is still ahead of the launcher once it has restored
# the start point: Miles' load of that save and of the reference weights before its first rollout
# (the read part of the kit's startup estimate). The launcher does not start a run whose load,
# first rollout and save plus upload no longer fit before the scale-down.
LOAD_ESTIMATE_ENV = "RLTRAINER_LOAD_S"
# The kit's catalog estimate of one save in GiB (weights + FP32 optimizer state, as it sizes the
# file system), on every run's Ray head: the launcher checks the free space against it before the
# run's first save, then against what it measures (rltrainer.checkpoints.space). An environment
# variable, not a run.yaml key, so that a trainer image built before it still reads the run.yaml.
SAVE_SIZE_ESTIMATE_ENV = "RLTRAINER_SAVE_GIB"
# EKS scales a Capacity Block node group to 0 about 40 minutes before the block ends, to drain
# the pods before EC2 starts shutting the instances down 30 minutes before the end [EKS user
# guide, "capacity-blocks-mng"]. Work not in S3 by then is lost.
EKS_SCALE_DOWN_MARGIN_S = 40 * 60

# --- stopping -------------------------------------------------------------------------------------

# How long the launcher has, after a stop signal, for Miles to exit and for the saves that finished
# to reach S3 (its final scan; a partly uploaded save publishes nothing and is uploaded again by the
# next attempt's resume, from the shared file system). The kit's RL job gives this much to Ray's job
# stop before its SIGKILL (RAY_JOB_STOP_WAIT_TIME_S) and to the Ray head's pod before the kubelet's
# (terminationGracePeriodSeconds, with a preStop that stops the Ray job): manifests/context.py.
# 8 minutes, so that the head's grace (this plus a minute) fits the 10 minutes between EKS's
# scale-down of a Capacity Block group (40 minutes before its end) and EC2's shutdown of its
# instances (30 minutes before) [EKS user guide, "capacity-blocks-mng"]; EKS terminates a node
# 15 minutes after a scale-down starts evicting, whatever its pods [EKS user guide,
# "managed-node-groups"]. At the default file system's read bound (about 293 MB/s) that is about
# 131 GiB, a third of a Qwen3-30B-A3B save (399 GiB): an upload that far from done gets out.
FINAL_UPLOAD_BUDGET_S = 480

# --- training metrics ----------------------------------------------------------------------------

# CloudWatch namespace and dimensions of the launcher's embedded-metric-format lines
# (rltrainer.metrics); the kit's dashboard and `rlkit status` query them. The namespace is the
# account's (per region), so a metric's identity is its environment and its run: one dimension
# set, [Environment, Run].
METRICS_NAMESPACE = "RLKit/Training"
METRICS_ENVIRONMENT_DIMENSION = "Environment"
METRICS_RUN_DIMENSION = "Run"
# The environment dimension's value where no kit environment is set (a launch outside the kit).
METRICS_NO_ENVIRONMENT = "unnamed"

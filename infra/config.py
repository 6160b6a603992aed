"""The kit's typed configuration: one YAML file describes one environment.

``load_config`` parses a file (or returns the built-in default), checks types with pydantic and
then runs the semantic rules in ``validate``; every problem is collected and reported at once,
each naming the field path, the bad value, the rule and the fix. Nothing is built until the whole
config is valid. This module imports no CDK and reads nothing but the file it is given.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra import names
from infra.catalog import INSTANCE_TYPES, UNSUPPORTED_INSTANCE_TYPES
from infra.versions import (
    ADDONS_ENABLED_BY_DEFAULT,
    DEFAULT_KUBERNETES_VERSION,
    HELM_CHARTS,
    DEFAULT_SYSTEM_INSTANCE_TYPE,
    DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
    KUBERNETES_VERSIONS,
    TRAINER_IMAGE_DISK_GIB,
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- sections -----------------------------------------------------------------------------------


class ExistingVpc(_Model):
    """An existing VPC, imported by IDs (no lookups at synth)."""

    vpc_id: str = Field(description="ID of the VPC, e.g. vpc-0123456789abcdef0.")
    private_subnet_ids: dict[str, str] = Field(
        description="Private subnet per availability zone (AZ name -> subnet ID); one for every "
        "AZ in availability_zones."
    )
    public_subnet_ids: dict[str, str] = Field(
        default_factory=dict, description="Optional public subnet per AZ (AZ name -> subnet ID)."
    )


class VpcConfig(_Model):
    cidr: str = Field("10.0.0.0/16", description="CIDR of a new VPC (/16 to /18).")
    nat_gateways: int = Field(1, description="NAT gateways of a new VPC (1 .. number of AZs).")
    existing: ExistingVpc | None = Field(
        None, description="Import this VPC instead of creating one; cidr and nat_gateways are "
        "then ignored."
    )


class EndpointAccessConfig(_Model):
    mode: Literal["private", "public-and-private"] = Field(
        "private",
        description="EKS API endpoint access. private: reachable only from inside the VPC (VPN, "
        "bastion, peered network). public-and-private: also from public_cidrs; node traffic "
        "stays in the VPC either way. (A public-only endpoint cannot be restricted to CIDRs, so "
        "the kit does not offer it.)",
    )
    public_cidrs: list[str] = Field(
        default_factory=list,
        description="With public-and-private: the CIDRs allowed to reach the public endpoint, "
        "e.g. your office or CI egress range. 0.0.0.0/0 opens it to the internet and must be "
        "written out on purpose.",
    )


class SystemNodesConfig(_Model):
    instance_type: str = Field(
        DEFAULT_SYSTEM_INSTANCE_TYPE,
        description="Instance type of the small non-GPU node group (Ray head, operators, CoreDNS).",
    )
    min_size: int = 2
    desired_size: int = 2
    max_size: int = 4
    root_volume_gib: int = Field(
        DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
        description="Root volume of each system node in GiB. The Ray head and KubeRay's job "
        f"submitter pull the trainer image here, which needs about {TRAINER_IMAGE_DISK_GIB} GiB.",
    )


class CapacityConfig(_Model):
    type: Literal["on-demand", "capacity-block", "odcr"] = Field(
        "on-demand",
        description="on-demand; capacity-block (EC2 Capacity Blocks for ML); odcr (an On-Demand "
        "Capacity Reservation).",
    )
    reservation_id: str | None = Field(
        None, description="Capacity reservation ID (cr-...), required for capacity-block and odcr."
    )


# The add-on sections are built from the add-on registry (one module per add-on in
# infra/addons/); these names stay importable from here.
from infra.addons.config import AddonConfig, AddonsConfig  # noqa: E402
from infra.addons.dcgm_exporter import DcgmExporterConfig  # noqa: E402


class NodeHealthConfig(_Model):
    """Detect and replace broken GPU nodes instead of letting a job hang on them."""

    monitoring_agent: bool = Field(
        True, description="Install the EKS node monitoring agent add-on: it reports GPU (DCGM), "
        "kernel, network and storage faults as node conditions."
    )
    auto_repair: bool = Field(
        True, description="Turn on EKS node auto-repair for the GPU node groups: a node whose "
        "conditions report a fault is replaced by the managed node group."
    )


class TaintConfig(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class GpuNodeGroupConfig(_Model):
    instance_type: str = Field(description="A GPU instance type from the kit's catalog.")
    availability_zone: str = Field(
        description="The one AZ this group lives in (EFA traffic must stay in one AZ)."
    )
    min_size: int = 0
    desired_size: int = 2
    max_size: int = 2
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    placement_group: bool | None = Field(
        None,
        description="Launch into a new cluster placement group. Default: on for on-demand, off for "
        "capacity blocks and ODCRs (a forced placement group can conflict with the reservation: "
        "eksctl issue 7949 / PR 8220, terraform-aws-eks PR 3730).",
    )
    placement_group_name: str | None = Field(
        None,
        description="Launch into this existing placement group instead, e.g. the one an ODCR was "
        "created in. Excludes placement_group: true.",
    )
    force_update: bool = Field(
        False,
        description="On a node group update, replace nodes even when pod disruption budgets "
        "block draining them (running jobs are evicted). Off: the update waits for them.",
    )
    root_volume_gib: int = Field(200, description="Encrypted gp3 root volume size in GiB.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra Kubernetes node labels."
    )
    taints: list[TaintConfig] = Field(
        default_factory=list,
        description="Extra taints. The kit always adds its GPU taint "
        f"({names.GPU_TAINT.key}={names.GPU_TAINT.value}:{names.GPU_TAINT.effect}).",
    )

    def node_labels(self, group_name: str) -> dict[str, str]:
        """All Kubernetes labels of this group's nodes: the user's, then the kit's."""
        return {**self.labels, **names.gpu_node_labels(group_name),
                names.NVIDIA_GPU_PRESENT_LABEL: "true"}

    def node_taints(self) -> list[names.Taint]:
        """The kit's GPU taint first, then the group's extra taints."""
        return [names.GPU_TAINT] + [names.Taint(t.key, t.value, t.effect) for t in self.taints]

    @property
    def uses_placement_group(self) -> bool:
        """Whether the kit creates a new cluster placement group for this group."""
        if self.placement_group_name is not None:
            return False
        if self.placement_group is not None:
            return self.placement_group
        return not self.is_reserved

    @property
    def is_reserved(self) -> bool:
        """Reserved capacity (capacity block or ODCR): no spare instance for a surge update."""
        return self.capacity.type in ("capacity-block", "odcr")


# FSx for Lustre PERSISTENT_2 (SSD): storage capacity is 1200 GiB, 2400 GiB or a multiple of
# 2400 GiB; throughput per TiB is 125, 250, 500 or 1000 MB/s [Amazon FSx API Reference,
# CreateFileSystem StorageCapacity and CreateFileSystemLustreConfiguration PerUnitStorageThroughput].
SHARED_FS_CAPACITY_STEP_GIB = 2400
SHARED_FS_MIN_CAPACITY_GIB = 1200
SHARED_FS_THROUGHPUTS = (125, 250, 500, 1000)


class SharedFileSystemConfig(_Model):
    """The file system the Ray head, the workers and the job submitter share."""

    type: Literal["fsx-lustre", "none"] = Field(
        "fsx-lustre",
        description="fsx-lustre: an FSx for Lustre PERSISTENT_2 file system in the training "
        f"group's AZ, mounted at {names.SHARED_FS_MOUNT_PATH} in every pod of the RL job, with "
        f"{names.SHARED_FS_MOUNT_PATH}/{names.DATASETS_PREFIX} and "
        f"{names.SHARED_FS_MOUNT_PATH}/{names.MODELS_PREFIX} read lazily from the bucket. none: no "
        "shared file system (single-node runs only).",
    )
    capacity_gib: int = Field(
        SHARED_FS_MIN_CAPACITY_GIB,
        description="Storage capacity in GiB: 1200, 2400 or a multiple of 2400 (PERSISTENT_2 SSD). "
        "Must hold the reference weights plus two checkpoints of the model.",
    )
    throughput_mb_s_per_tib: int = Field(
        250, description="Throughput per TiB of storage in MB/s: 125, 250, 500 or 1000. The file "
        "system's throughput is this times the capacity in TiB; it sets how long a save takes.",
    )


class StorageConfig(_Model):
    retain: bool = Field(
        True, description="Keep the bucket, the ECR repository and the shared file system when "
        "their stacks are deleted (ignored in ephemeral mode, where everything is destroyable)."
    )
    kms: bool = Field(False, description="Encrypt the bucket with a customer-managed KMS key.")
    noncurrent_version_days: int = Field(
        30, description="Days before old (noncurrent) object versions expire."
    )
    shared_filesystem: SharedFileSystemConfig = Field(
        default_factory=SharedFileSystemConfig,
        description="Shared file system for models, inputs and checkpoints; retained with the "
        "data unless ephemeral or retain is off.",
    )


# Retention periods CloudWatch Logs accepts (PutRetentionPolicy `retentionInDays`); the build's
# log group takes one of these. tests/test_image_build.py checks them against aws_cdk's
# aws_logs.RetentionDays.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827,
                      2192, 2557, 2922, 3288, 3653)


class ImageBuildConfig(_Model):
    log_retention_days: int = Field(
        90, description="Days the trainer image build's CloudWatch logs are kept (a CloudWatch "
        "Logs retention period: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, ...)."
    )


class ObservabilityConfig(_Model):
    """Metrics, logs and a dashboard in CloudWatch (the amazon-cloudwatch-observability add-on)."""

    enabled: bool = Field(
        True, description="Install the Amazon CloudWatch Observability EKS add-on (GPU, EFA and "
        "container metrics; container logs through Fluent Bit), the log groups it and the "
        "control plane write to, and the environment's CloudWatch dashboard."
    )
    log_retention_days: int = Field(
        30, description="Days the control-plane, container and training-metric log groups keep "
        "their events (a CloudWatch Logs retention period: 1, 3, 5, 7, 14, 30, 60, 90, ...)."
    )


class CostGuardConfig(_Model):
    max_gpu_nodes: int | None = Field(
        None, description="Upper bound on the sum of max_size over all GPU node groups."
    )
    ttl_hours: int | None = Field(
        None, description="Time-to-live tag put on every resource; required when ephemeral."
    )


class ParallelConfig(_Model):
    tp: int = Field(4, description="Tensor parallel size.")
    pp: int = Field(1, description="Pipeline parallel size.")
    cp: int = Field(1, description="Context parallel size.")
    ep: int = Field(8, description="Expert parallel size.")
    etp: int = Field(1, description="Expert tensor parallel size.")
    vpp: int | None = Field(None, description="Virtual pipeline stages per rank (optional).")


class RolloutConfig(_Model):
    gpus_per_engine: int = Field(8, description="GPUs per SGLang rollout engine.")
    ep: int = Field(8, description="Expert parallel size inside a rollout engine.")


EP_BACKENDS = ("nccl", "deepep-nvshmem", "deepep-gin")


class ExpertParallelConfig(_Model):
    backend: str = Field(
        "nccl",
        description="Expert-parallel all-to-all: nccl (plain NCCL all-to-all), deepep-nvshmem "
        "(DeepEP over NVSHMEM/libfabric) or deepep-gin (DeepEP V2 over NCCL GIN).",
    )
    gin_mode: Literal["gpu", "proxy"] | None = Field(
        None,
        description="deepep-gin only: gpu (GPU-initiated, p5en/p6 only) or proxy (CPU proxy). "
        "Default: gpu where supported, else proxy.",
    )


class GrpoConfig(_Model):
    num_rollout: int = 1000
    rollout_batch_size: int = 32
    n_samples_per_prompt: int = 8
    global_batch_size: int = 256
    num_steps_per_rollout: int = 1
    rollout_max_response_len: int = 8192
    rollout_temperature: float = 1.0
    lr: float = 1.0e-6
    kl_loss_coef: float = 0.0
    eps_clip: float = 0.2


class TrainingConfig(_Model):
    run_name: str = Field("qwen3-30b-a3b-grpo", description="Name of the RL run (DNS label).")
    model: str = Field("qwen3-30b-a3b", description="Model key (see `rlkit plan --help`).")
    hf_checkpoint: str = Field(
        f"{names.SHARED_FS_MODELS_DIR}/Qwen3-30B-A3B",
        description="Hugging Face weights: a path every pod sees (under "
        f"{names.SHARED_FS_MODELS_DIR}, which shows the bucket's {names.MODELS_PREFIX} prefix), a "
        "path in the image, or s3://."
    )
    prompt_data: str = Field(
        "datasets/dapo-math-17k.jsonl",
        description="Prompt data: a key under the data bucket, an s3:// URI or a local path.",
    )
    node_group: str = Field("p5", description="The GPU node group the job runs on.")
    nodes: int = Field(2, description="GPU nodes (Ray workers) the job uses.")
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    expert_parallel: ExpertParallelConfig = Field(default_factory=ExpertParallelConfig)
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    image: str | None = Field(
        None, description="Trainer image URI; default: the data stack's ECR repository at image_tag."
    )
    image_tag: str = Field(
        "0.1.0", description="Version tag of the trainer image in the ECR repository (tags are "
        "immutable there, so use a version, not latest). Each expert-parallel backend is its own "
        "build, pushed as <image_tag>-<backend>; the manifests pull the one for "
        "expert_parallel.backend."
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for trainer pods."
    )
    backoff_limit: int = Field(
        2, description="Times KubeRay retries the RL job after a failed attempt (node loss, a "
        "crash), each on a new Ray cluster that resumes from the last complete checkpoint. "
        "KubeRay counts every failed attempt, whatever the exit code."
    )


class KitConfig(_Model):
    """One environment of the kit."""

    name: str = Field("moe-rl", description="Prefix of every stack and resource name.")
    region: str = Field("us-east-1", description="AWS region.")
    availability_zones: list[str] = Field(
        default_factory=lambda: ["us-east-1a", "us-east-1b"],
        description="AZs of the VPC, named explicitly so synth needs no lookup (at least two).",
    )
    account: str | None = Field(
        None, description="12-digit account ID; absent = environment-agnostic stacks."
    )
    kubernetes_version: str = Field(DEFAULT_KUBERNETES_VERSION, description="EKS version.")
    ephemeral: bool = Field(
        False, description="CI mode: every resource destroyable, data included."
    )
    vpc: VpcConfig = Field(default_factory=VpcConfig)
    endpoint_access: EndpointAccessConfig = Field(default_factory=EndpointAccessConfig)
    admin_role_arns: list[str] = Field(
        default_factory=list, description="IAM role ARNs granted cluster-admin access entries."
    )
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)
    gpu_node_groups: dict[str, GpuNodeGroupConfig] = Field(
        default_factory=lambda: {
            "p5": GpuNodeGroupConfig(
                instance_type="p5.48xlarge", availability_zone="us-east-1a",
                min_size=0, desired_size=2, max_size=2,
            )
        },
        description="EFA GPU node groups by name.",
    )
    storage: StorageConfig = Field(default_factory=StorageConfig)
    image_build: ImageBuildConfig = Field(
        default_factory=ImageBuildConfig,
        description="The trainer image build (CodeBuild project in the data stack).",
    )
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    node_health: NodeHealthConfig = Field(default_factory=NodeHealthConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    cost_guard: CostGuardConfig = Field(default_factory=CostGuardConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    tags: dict[str, str] = Field(default_factory=dict, description="Extra tags on every resource.")

    @property
    def stack_names(self) -> dict[str, str]:
        return names.stack_names(self.name)

    def gpu_tolerations(self) -> list[dict[str, str]]:
        """Tolerations for a DaemonSet that must run on every GPU node group: ``Exists`` on each
        taint key any group carries (the kit's GPU taint and every user taint), once each."""
        seen: dict[str, dict[str, str]] = {}
        for group in self.gpu_node_groups.values():
            for taint in group.node_taints():
                seen.setdefault(taint.key, taint.toleration())
        return list(seen.values())


# --- errors -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: where, what, which rule, and how to fix it."""

    path: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        # User-supplied keys and values are cut short: a 10 kB value must not flood the terminal.
        path = self.path if len(self.path) <= MAX_QUOTED_CHARS else shorten(self.path)
        return f"{path} = {shorten(self.value)}: {self.rule}. Fix: {self.fix}."


class ConfigError(ValueError):
    """Raised with every problem found in a config."""

    def __init__(self, problems: list[Problem], source: str = "config"):
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s):"] + [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


_MISSING = "<missing>"


def _problems_from_pydantic(error: ValidationError) -> list[Problem]:
    problems = []
    for e in error.errors():
        path = ".".join(str(p) for p in e["loc"]) or "<root>"
        kind = e["type"]
        if kind == "missing":
            problems.append(Problem(path, _MISSING, "this field is required", "add it"))
        elif kind == "extra_forbidden":
            problems.append(Problem(
                path, e["input"], "unknown field",
                "remove it or correct its spelling (see docs/config-reference.md)",
            ))
        else:
            problems.append(Problem(
                path, e.get("input"), e["msg"].rstrip("."),
                "give a value of the documented type (see docs/config-reference.md)",
            ))
    return problems


# --- semantic rules -----------------------------------------------------------------------------

_NAME_RE = re.compile(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?")
_GROUP_RE = names.GPU_GROUP_NAME_RE
_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_ACCOUNT_RE = re.compile(r"^\d{12}$")
_ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_VPC_RE = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_RESERVATION_RE = re.compile(r"^cr-[0-9a-f]{17}$")
_PLACEMENT_GROUP_RE = re.compile(r"[!-~]{1,255}")
_LABEL_KEY_RE = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _cidr_problem(path: str, value: str) -> Problem | None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return Problem(path, value, "not a valid IPv4 CIDR block",
                       "write it as a network address with prefix length, e.g. 203.0.113.0/24")
    return None


def validate(cfg: KitConfig) -> list[Problem]:
    """Every semantic problem of a type-valid config (empty list = valid)."""
    p: list[Problem] = []
    add = p.append

    if not _NAME_RE.fullmatch(cfg.name):
        add(Problem("name", cfg.name, "must be 1-20 characters: lowercase letters, digits and '-', "
                    "starting with a letter and ending with a letter or digit (it prefixes stack "
                    "and cluster names)",
                    "choose a short lowercase name such as 'moe-rl'"))
    elif names.environment_names_can_collide(cfg.name):
        add(Problem("name", cfg.name, f"the word 'gpu' after a '-' is reserved: stacks of this "
                    f"environment could share names with another environment's GPU stacks "
                    f"({names.gpu_stack_name('<env>', '<group>')}), and teardown must tell them "
                    "apart", "choose a name without '-gpu', e.g. 'moe-rl-h100'"))
    if not _REGION_RE.fullmatch(cfg.region):
        add(Problem("region", cfg.region, "not an AWS region name", "use a name like 'us-east-1'"))
    if cfg.account is not None and not _ACCOUNT_RE.fullmatch(cfg.account):
        add(Problem("account", cfg.account, "must be a 12-digit AWS account ID",
                    "use the ID from `aws sts get-caller-identity`, or remove it for "
                    "environment-agnostic stacks"))
    if cfg.kubernetes_version not in KUBERNETES_VERSIONS:
        add(Problem("kubernetes_version", cfg.kubernetes_version,
                    f"not a version the kit supports ({', '.join(KUBERNETES_VERSIONS)})",
                    f"use one of {', '.join(KUBERNETES_VERSIONS)}"))

    azs = cfg.availability_zones
    if len(azs) < 2:
        add(Problem("availability_zones", azs, "EKS needs subnets in at least two AZs",
                    f"list two or more AZs of {cfg.region}, e.g. {cfg.region}a and {cfg.region}b"))
    if len(set(azs)) != len(azs):
        add(Problem("availability_zones", azs, "AZs must not repeat", "list each AZ once"))
    if len(azs) > 4:
        add(Problem("availability_zones", azs, "at most four AZs fit the kit's subnet plan",
                    "list two to four AZs"))
    for i, az in enumerate(azs):
        if not re.fullmatch(re.escape(cfg.region) + r"[a-z]", az):
            add(Problem(f"availability_zones[{i}]", az, f"not an AZ of region {cfg.region}",
                        f"use a name of the form {cfg.region}a"))

    _validate_vpc(cfg, add)

    _validate_endpoint(cfg, add)

    for i, arn in enumerate(cfg.admin_role_arns):
        if not _ROLE_ARN_RE.fullmatch(arn):
            add(Problem(f"admin_role_arns[{i}]", arn, "not an IAM role ARN",
                        "use arn:aws:iam::123456789012:role/NAME"))

    sn = cfg.system_nodes
    if not (0 < sn.min_size <= sn.desired_size <= sn.max_size):
        add(Problem("system_nodes", {"min_size": sn.min_size, "desired_size": sn.desired_size,
                                     "max_size": sn.max_size},
                    "sizes must satisfy 1 <= min_size <= desired_size <= max_size",
                    "the Ray head and operators need at least one system node; e.g. 2/2/4"))
    if sn.instance_type in INSTANCE_TYPES:
        add(Problem("system_nodes.instance_type", sn.instance_type,
                    "the system node group is for CPU work, not a GPU instance type",
                    f"use a general-purpose type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
    # The Ray head and the job submitter pull the trainer image onto system nodes.
    if not TRAINER_IMAGE_DISK_GIB + 20 <= sn.root_volume_gib <= 16384:
        add(Problem("system_nodes.root_volume_gib", sn.root_volume_gib,
                    f"must be {TRAINER_IMAGE_DISK_GIB + 20} to 16384 GiB: the Ray head and KubeRay's "
                    f"submitter pull the trainer image (about {TRAINER_IMAGE_DISK_GIB} GiB on disk) "
                    "onto system nodes, next to the AMI and system images",
                    f"use e.g. {DEFAULT_SYSTEM_ROOT_VOLUME_GIB}"))

    if not cfg.gpu_node_groups:
        add(Problem("gpu_node_groups", {}, "at least one GPU node group is required",
                    "add a group, e.g. p5: {instance_type: p5.48xlarge, availability_zone: ...}"))
    for name, g in cfg.gpu_node_groups.items():
        _validate_gpu_group(cfg, name, g, add)

    total_max = sum(g.max_size for g in cfg.gpu_node_groups.values())
    cg = cfg.cost_guard
    if cg.max_gpu_nodes is not None and total_max > cg.max_gpu_nodes:
        add(Problem("cost_guard.max_gpu_nodes", cg.max_gpu_nodes,
                    f"the GPU node groups can scale to {total_max} nodes in all (sum of max_size)",
                    f"lower max_size of the groups or raise max_gpu_nodes to {total_max}"))
    if cg.ttl_hours is not None and cg.ttl_hours < 1:
        add(Problem("cost_guard.ttl_hours", cg.ttl_hours, "must be at least 1", "set 1 or more"))
    if cfg.ephemeral and cg.ttl_hours is None:
        add(Problem("cost_guard.ttl_hours", None,
                    "an ephemeral environment must carry a time-to-live tag",
                    "set cost_guard.ttl_hours, e.g. 6"))
    if cfg.ephemeral and cg.max_gpu_nodes is None:
        add(Problem("cost_guard.max_gpu_nodes", None,
                    "an ephemeral environment must cap its GPU node count",
                    f"set cost_guard.max_gpu_nodes, e.g. {max(total_max, 1)}"))
    if cfg.storage.noncurrent_version_days < 1:
        add(Problem("storage.noncurrent_version_days", cfg.storage.noncurrent_version_days,
                    "must be at least 1", "set a number of days such as 30"))
    for path, days in (("image_build.log_retention_days", cfg.image_build.log_retention_days),
                       ("observability.log_retention_days", cfg.observability.log_retention_days)):
        if days not in LOG_RETENTION_DAYS:
            above = [d for d in LOG_RETENTION_DAYS if d >= days] or [LOG_RETENTION_DAYS[-1]]
            add(Problem(path, days, "not a CloudWatch Logs retention period "
                        f"({', '.join(str(d) for d in LOG_RETENTION_DAYS)})",
                        f"use one of those, e.g. {above[0]}"))

    for name in AddonsConfig.model_fields:
        addon = getattr(cfg.addons, name)
        known = HELM_CHARTS[name]["versions"]
        if addon.version is not None and addon.version not in known:
            add(Problem(f"addons.{name}.version", addon.version,
                        f"not a version the kit knows for chart {HELM_CHARTS[name]['chart']} "
                        f"({', '.join(known)})",
                        "use one of those, or add the version to HELM_CHARTS in infra/versions.py "
                        "after checking its values"))

    _validate_training(cfg, add)
    _validate_shared_filesystem(cfg, add)
    _validate_values(cfg, add)
    p += trainer_problems(cfg, p)
    return p


def _validate_shared_filesystem(cfg: KitConfig, add) -> None:
    fs = cfg.storage.shared_filesystem
    path = "storage.shared_filesystem"
    t = cfg.training
    if fs.type == "none":
        if t.nodes > 1:
            add(Problem(f"{path}.type", "none",
                        f"a multi-node run (training.nodes = {t.nodes}) needs a file system that "
                        "the Ray head, every worker and the job submitter share: the launcher "
                        "runs on the head and must see the workers' saves and inputs",
                        "set storage.shared_filesystem.type: fsx-lustre (the default), or "
                        "training.nodes: 1"))
        if t.hf_checkpoint.startswith(names.SHARED_FS_MOUNT_PATH + "/"):
            add(Problem("training.hf_checkpoint", t.hf_checkpoint,
                        f"{names.SHARED_FS_MOUNT_PATH} is the shared file system's mount, and "
                        "storage.shared_filesystem.type is none",
                        "use a path in the image or an s3:// URI in the data bucket, or set "
                        "storage.shared_filesystem.type: fsx-lustre"))
        return
    if fs.throughput_mb_s_per_tib not in SHARED_FS_THROUGHPUTS:
        add(Problem(f"{path}.throughput_mb_s_per_tib", fs.throughput_mb_s_per_tib,
                    "FSx for Lustre PERSISTENT_2 offers "
                    f"{', '.join(map(str, SHARED_FS_THROUGHPUTS))} MB/s per TiB",
                    "use one of those, e.g. 250"))
    cap = fs.capacity_gib
    if cap != SHARED_FS_MIN_CAPACITY_GIB and (cap < SHARED_FS_CAPACITY_STEP_GIB
                                              or cap % SHARED_FS_CAPACITY_STEP_GIB):
        add(Problem(f"{path}.capacity_gib", cap,
                    f"FSx for Lustre PERSISTENT_2 capacity is {SHARED_FS_MIN_CAPACITY_GIB} GiB or "
                    f"a multiple of {SHARED_FS_CAPACITY_STEP_GIB} GiB",
                    f"use {valid_shared_fs_capacity_gib(max(cap, 1))}, the next valid size"))
        return
    need = shared_fs_required_gib(t.model)
    if need is not None and cap < need:
        add(Problem(f"{path}.capacity_gib", cap,
                    f"too small for {t.model}: its reference weights plus two checkpoints "
                    f"(weights + optimizer state; the newest complete save stays while the next is "
                    f"written) take {need} GiB",
                    f"set capacity_gib: {valid_shared_fs_capacity_gib(need)}"))


def has_shared_fs(cfg: KitConfig) -> bool:
    """Whether the environment has the shared file system (storage stacks, PV/PVC, /fsx)."""
    return cfg.storage.shared_filesystem.type != "none"


def checkpoint_local_dir(cfg: KitConfig) -> str:
    """The run config's ``checkpoint.local_dir``: where Megatron saves and the launcher watches.
    A per-run directory on the shared file system every pod of the job sees; node-local (an
    emptyDir) only on single-node runs without one."""
    if has_shared_fs(cfg):
        return f"{names.SHARED_FS_CHECKPOINTS_DIR}/{cfg.training.run_name}"
    from infra.run_config import CHECKPOINT_LOCAL_DIR  # it imports this module's types

    return CHECKPOINT_LOCAL_DIR


def valid_shared_fs_capacity_gib(gib: int) -> int:
    """The smallest valid PERSISTENT_2 capacity that holds ``gib``."""
    if gib <= SHARED_FS_MIN_CAPACITY_GIB:
        return SHARED_FS_MIN_CAPACITY_GIB
    return -(-gib // SHARED_FS_CAPACITY_STEP_GIB) * SHARED_FS_CAPACITY_STEP_GIB


def shared_fs_required_gib(model_key: str) -> int | None:
    """GiB the shared file system needs for ``model_key``: the BF16 reference weights plus two
    checkpoints (the planner's size: weights + optimizer state). None for a model the planner's
    catalog does not know (the renderer reports that)."""
    # Imported here: the planner imports this module (EP_BACKENDS), so a module-level import
    # would be circular.
    from infra.planner.checkpoint import GIB, shared_fs_bytes
    from infra.planner.models import MODEL_CATALOG

    model = MODEL_CATALOG.get(model_key)
    if model is None:
        return None
    return -(-shared_fs_bytes(model) // GIB)


def _validate_endpoint(cfg: KitConfig, add) -> None:
    e = cfg.endpoint_access
    if e.mode == "public-and-private" and not e.public_cidrs:
        add(Problem("endpoint_access.public_cidrs", [], "a public endpoint needs the CIDRs allowed "
                    "to reach it; the kit never opens it to everyone by default",
                    "list your office or CI egress ranges, e.g. [203.0.113.0/24], or use "
                    "mode: private"))
    if e.mode == "private" and e.public_cidrs:
        add(Problem("endpoint_access.public_cidrs", e.public_cidrs,
                    "a private endpoint has no public access for these CIDRs to restrict",
                    "set mode: public-and-private, or remove public_cidrs"))
    for i, cidr in enumerate(e.public_cidrs):
        if (prob := _cidr_problem(f"endpoint_access.public_cidrs[{i}]", cidr)) is not None:
            add(prob)


def _validate_vpc(cfg: KitConfig, add) -> None:
    v = cfg.vpc
    if v.existing is None:
        if (prob := _cidr_problem("vpc.cidr", v.cidr)) is not None:
            add(prob)
        elif not 16 <= ipaddress.ip_network(v.cidr).prefixlen <= 18:
            add(Problem("vpc.cidr", v.cidr, "prefix length must be /16 to /18 so every AZ gets a "
                        "large private subnet for GPU pods", "use e.g. 10.0.0.0/16"))
        if not 1 <= v.nat_gateways <= len(cfg.availability_zones):
            add(Problem("vpc.nat_gateways", v.nat_gateways,
                        f"must be between 1 and the number of AZs ({len(cfg.availability_zones)})",
                        "use 1 for cost, or one per AZ for resilience"))
        return
    e = v.existing
    if not _VPC_RE.fullmatch(e.vpc_id):
        add(Problem("vpc.existing.vpc_id", e.vpc_id, "not a VPC ID", "use vpc-0123456789abcdef0"))
    for kind in ("private_subnet_ids", "public_subnet_ids"):
        subnets = getattr(e, kind)
        for az, sid in subnets.items():
            if az not in cfg.availability_zones:
                add(Problem(f"vpc.existing.{kind}.{az}", sid,
                            f"AZ {az} is not in availability_zones {cfg.availability_zones}",
                            "add the AZ to availability_zones or remove this subnet"))
            if not _SUBNET_RE.fullmatch(sid):
                add(Problem(f"vpc.existing.{kind}.{az}", sid, "not a subnet ID",
                            "use subnet-0123456789abcdef0"))
    missing = [az for az in cfg.availability_zones if az not in e.private_subnet_ids]
    if missing:
        add(Problem("vpc.existing.private_subnet_ids", e.private_subnet_ids,
                    f"no private subnet for AZ(s) {', '.join(missing)}",
                    "give one private subnet ID for every AZ in availability_zones"))


def _validate_gpu_group(cfg: KitConfig, name: str, g: GpuNodeGroupConfig, add) -> None:
    path = f"gpu_node_groups.{name}"
    if not _GROUP_RE.fullmatch(name):
        add(Problem(path, name, "group names must be 1-20 characters: lowercase letters, digits "
                    "and '-', starting with a letter", "rename the group, e.g. 'p5'"))
    if g.instance_type in UNSUPPORTED_INSTANCE_TYPES:
        add(Problem(f"{path}.instance_type", g.instance_type,
                    f"not supported yet: {UNSUPPORTED_INSTANCE_TYPES[g.instance_type]}",
                    f"use one of {', '.join(INSTANCE_TYPES)}"))
    elif g.instance_type not in INSTANCE_TYPES:
        add(Problem(f"{path}.instance_type", g.instance_type,
                    "not in the kit's instance catalog",
                    f"use one of {', '.join(INSTANCE_TYPES)}"))
    if g.min_size < 0 or g.max_size < 1 or not g.min_size <= g.desired_size <= g.max_size:
        add(Problem(path, {"min_size": g.min_size, "desired_size": g.desired_size,
                           "max_size": g.max_size},
                    "sizes must satisfy 0 <= min_size <= desired_size <= max_size and max_size >= 1",
                    f"e.g. min_size: 0, desired_size: {max(g.desired_size, 1)}, "
                    f"max_size: {max(g.desired_size, g.max_size, 1)}"))
    if g.availability_zone not in cfg.availability_zones:
        add(Problem(f"{path}.availability_zone", g.availability_zone,
                    f"not among the VPC's AZs {cfg.availability_zones}",
                    "use one of availability_zones, or add this AZ there"))
    cap = g.capacity
    if cap.type in ("capacity-block", "odcr"):
        if cap.reservation_id is None:
            add(Problem(f"{path}.capacity.reservation_id", None,
                        f"capacity type {cap.type} needs the reservation it launches into",
                        "set reservation_id to the cr-... ID from the EC2 console or "
                        "`aws ec2 describe-capacity-reservations`"))
        elif not _RESERVATION_RE.fullmatch(cap.reservation_id):
            add(Problem(f"{path}.capacity.reservation_id", cap.reservation_id,
                        "not a capacity reservation ID", "use cr- followed by 17 hex digits"))
    elif cap.reservation_id is not None:
        add(Problem(f"{path}.capacity.reservation_id", cap.reservation_id,
                    "on-demand groups do not use a reservation",
                    "remove reservation_id or set capacity.type to odcr or capacity-block"))
    if not 50 <= g.root_volume_gib <= 16384:
        add(Problem(f"{path}.root_volume_gib", g.root_volume_gib,
                    "must be 50 to 16384 GiB (the NVIDIA AMI and images need room)",
                    "use e.g. 200"))
    if g.placement_group_name is not None:
        if g.placement_group:
            add(Problem(f"{path}.placement_group", True,
                        "placement_group: true creates a new group, placement_group_name selects an "
                        "existing one; a node group launches into one",
                        "remove placement_group (or placement_group_name)"))
        if not _PLACEMENT_GROUP_RE.fullmatch(g.placement_group_name):
            add(Problem(f"{path}.placement_group_name", g.placement_group_name,
                        "not a placement group name (1-255 ASCII characters, no spaces)",
                        "use the name shown by `aws ec2 describe-placement-groups`"))
    for key, value in g.labels.items():
        if key.startswith(names.LABEL_PREFIX + "/"):
            add(Problem(f"{path}.labels.{key}", value, f"the {names.LABEL_PREFIX}/ prefix is "
                        "reserved for labels the kit sets", "use another prefix"))
        elif not _LABEL_KEY_RE.fullmatch(key) or not _LABEL_VALUE_RE.fullmatch(value):
            add(Problem(f"{path}.labels.{key}", value, "not a valid Kubernetes label",
                        "keys are [prefix/]name of up to 63 characters; values up to 63 "
                        "alphanumerics, '-', '_' or '.'"))
    for i, t in enumerate(g.taints):
        if t.key == names.GPU_TAINT.key:
            add(Problem(f"{path}.taints[{i}].key", t.key,
                        "the kit already sets this taint on every GPU node",
                        "remove this taint"))


def _validate_training(cfg: KitConfig, add) -> None:
    t = cfg.training
    if not _DNS_LABEL_RE.fullmatch(t.run_name) or len(t.run_name) > 40:
        add(Problem("training.run_name", t.run_name,
                    "must be a DNS label of at most 40 characters (it names Kubernetes objects)",
                    "use lowercase letters, digits and '-'"))
    group = cfg.gpu_node_groups.get(t.node_group)
    if group is None:
        add(Problem("training.node_group", t.node_group, "no GPU node group has this name",
                    f"use one of {', '.join(cfg.gpu_node_groups) or '(none configured)'}"))
        return
    if not 1 <= t.nodes <= group.max_size:
        add(Problem("training.nodes", t.nodes,
                    f"must be 1 to the group's max_size ({group.max_size})",
                    f"lower training.nodes or raise gpu_node_groups.{t.node_group}.max_size"))
    itype = INSTANCE_TYPES.get(group.instance_type)
    if itype is None:
        return  # already reported on the group
    gpus = t.nodes * itype.gpu_count
    par = t.parallel
    for field in ("tp", "pp", "cp", "ep", "etp"):
        if getattr(par, field) < 1:
            add(Problem(f"training.parallel.{field}", getattr(par, field), "must be at least 1",
                        "use 1 to disable this kind of parallelism"))
    if min(par.tp, par.pp, par.cp, par.ep, par.etp) < 1:
        return
    if par.tp > itype.gpu_count:
        add(Problem("training.parallel.tp", par.tp,
                    f"tensor parallelism must stay inside one node ({itype.gpu_count} GPUs)",
                    f"use tp <= {itype.gpu_count}"))
    model_parallel = par.tp * par.pp * par.cp
    if gpus % model_parallel:
        add(Problem("training.parallel", {"tp": par.tp, "pp": par.pp, "cp": par.cp},
                    f"tp x pp x cp = {model_parallel} does not divide the job's {gpus} GPUs "
                    f"({t.nodes} x {itype.gpu_count})",
                    "pick sizes whose product divides the GPU count"))
    # Megatron: expert-model-parallel groups are carved out of the world as etp x ep x pp
    # (megatron/core/parallel_state.py, initialize_model_parallel: the expert data-parallel size is
    # world / (etp * ep * pp) and must be a whole number).
    expert_group = par.etp * par.ep * par.pp
    if gpus % expert_group:
        add(Problem("training.parallel.ep", par.ep,
                    f"etp x ep x pp = {expert_group} does not divide the job's {gpus} GPUs",
                    "pick ep so that etp x ep x pp divides the GPU count"))
    if par.vpp is not None and (par.vpp < 1 or par.pp == 1):
        add(Problem("training.parallel.vpp", par.vpp,
                    "virtual pipeline stages need pp > 1 and vpp >= 1",
                    "remove vpp or raise pp"))
    ro = t.rollout
    if ro.gpus_per_engine < 1 or gpus % ro.gpus_per_engine:
        add(Problem("training.rollout.gpus_per_engine", ro.gpus_per_engine,
                    f"must divide the job's {gpus} GPUs", f"use e.g. {itype.gpu_count}"))
    elif ro.ep < 1 or ro.gpus_per_engine % ro.ep:
        add(Problem("training.rollout.ep", ro.ep, "must divide gpus_per_engine "
                    f"({ro.gpus_per_engine})", f"use e.g. {ro.gpus_per_engine}"))

    ep = t.expert_parallel
    if ep.backend not in EP_BACKENDS:
        add(Problem("training.expert_parallel.backend", ep.backend,
                    "unknown expert-parallel backend", f"use one of {', '.join(EP_BACKENDS)}"))
    if ep.gin_mode is not None and ep.backend != "deepep-gin":
        add(Problem("training.expert_parallel.gin_mode", ep.gin_mode,
                    "gin_mode applies only to the deepep-gin backend",
                    "remove gin_mode or set backend: deepep-gin"))
    if ep.backend == "deepep-gin" and ep.gin_mode == "gpu" and not supports_gin_gpu(itype.name):
        add(Problem("training.expert_parallel.gin_mode", "gpu",
                    f"GPU-initiated NCCL GIN is available only on p5en and p6 instances, not "
                    f"{itype.name}", "set gin_mode: proxy (CPU proxy) or use a p5en/p6 node group"))

    if not 0 <= t.backoff_limit <= MAX_BACKOFF_LIMIT:
        add(Problem("training.backoff_limit", t.backoff_limit,
                    f"must be 0 to {MAX_BACKOFF_LIMIT} (each retry starts a new Ray cluster on the GPU "
                    "nodes)", "use a small number such as 2; 0 turns retries off"))

    g = t.grpo
    rollout_samples = g.rollout_batch_size * g.n_samples_per_prompt
    trained_samples = g.global_batch_size * g.num_steps_per_rollout
    if rollout_samples != trained_samples:
        add(Problem("training.grpo", {
            "rollout_batch_size": g.rollout_batch_size,
            "n_samples_per_prompt": g.n_samples_per_prompt,
            "global_batch_size": g.global_batch_size,
            "num_steps_per_rollout": g.num_steps_per_rollout},
            f"Miles needs rollout_batch_size x n_samples_per_prompt = global_batch_size x "
            f"num_steps_per_rollout, but {g.rollout_batch_size} x {g.n_samples_per_prompt} = "
            f"{rollout_samples} and {g.global_batch_size} x {g.num_steps_per_rollout} = "
            f"{trained_samples}",
            "change one of the four so both products are equal, e.g. global_batch_size: "
            f"{rollout_samples // g.num_steps_per_rollout if g.num_steps_per_rollout else rollout_samples}"))


def config_warnings(cfg: KitConfig) -> list[str]:
    """Things a valid config allows but a user should hear about before deploying."""
    warnings = []
    if cfg.endpoint_access.mode == "private":
        warnings.append(
            "endpoint_access.mode is private: the Kubernetes API is reachable only from inside "
            "the VPC (VPN, bastion, peered network), so kubectl and rlkit gate/launch/status must "
            "run there. Fix: to use them from your workstation or CI, set mode: "
            "public-and-private and public_cidrs: [<your egress CIDR>].")
    elif "0.0.0.0/0" in cfg.endpoint_access.public_cidrs:
        warnings.append(
            "endpoint_access.public_cidrs contains 0.0.0.0/0: the Kubernetes API endpoint is open "
            "to the internet (authentication still applies). Fix: list only your egress CIDRs.")
    if not cfg.admin_role_arns:
        warnings.append(
            "admin_role_arns is empty: NO IAM principal will have Kubernetes access to this "
            "cluster (API authentication mode; the creator gets no admin access entry, and the "
            "creator is CloudFormation's role anyway). kubectl, rlkit gate and rlkit launch will "
            "get Unauthorized. Fix: list the IAM role ARN you (or your CI) deploy and operate with "
            "under admin_role_arns, e.g. arn:aws:iam::123456789012:role/ml-platform-admin.")
    if (cfg.observability.enabled and cfg.addons.enabled("dcgm_exporter")
            and not cfg.addons.dcgm_exporter.service_monitor):
        warnings.append(
            "addons.dcgm_exporter is on (with no ServiceMonitor) and so is observability: the "
            "CloudWatch observability add-on already runs a DCGM exporter on every GPU node, so "
            "each node gets two. Fix: turn addons.dcgm_exporter off unless your own Prometheus "
            "scrapes it.")
    return warnings


def supports_gin_gpu(instance_type: str) -> bool:
    """GPU-initiated NCCL GIN needs p5en or the p6 family [design.md, DeepEP over EFA]."""
    return instance_type.startswith(("p5en.", "p6-"))


MAX_BACKOFF_LIMIT = 10
# Backends a training run may use; the fabric gate may benchmark every one of EP_BACKENDS.
# deepep-gin cannot train yet: the Megatron-LM that Miles v0.1.0 pins (37f9161) imports DeepEP
# V1's Buffer in its flex dispatcher (megatron/core/transformer/moe/fused_a2a.py), and DeepEP V2's
# ElasticBuffer (the GIN route) is not supported there. The launcher (rltrainer) refuses it too.
TRAINING_EP_BACKENDS = ("nccl", "deepep-nvshmem")


def training_ep_backend_problems(cfg: KitConfig) -> list[Problem]:
    """Why ``cfg`` cannot *train* with its expert-parallel backend (empty = it can).

    Not part of ``validate``: the same config, with ``--ep-backend deepep-gin``, is what the
    fabric gate benchmarks. Call it where a training job is launched.
    """
    backend = cfg.training.expert_parallel.backend
    if backend in TRAINING_EP_BACKENDS or backend not in EP_BACKENDS:
        return []
    return [Problem(
        "training.expert_parallel.backend", backend,
        "DeepEP V2 over NCCL GIN cannot train yet: the Megatron-LM that Miles v0.1.0 pins "
        "(37f9161) drives DeepEP V1's Buffer in its flex dispatcher "
        "(megatron/core/transformer/moe/fused_a2a.py) and does not support V2's ElasticBuffer",
        "use deepep-nvshmem (DeepEP V1 over NVSHMEM/libfabric) or nccl for training; "
        "`rlkit gate --ep-backend deepep-gin` may still benchmark it")]


# --- loading ------------------------------------------------------------------------------------


# --- values the rules above do not cover: tags, taints, absolute sizes, trainer run config -------

# Absolute caps, whatever cost_guard says: a typo such as max_size: 2000 must never reach
# CloudFormation. They are the kit's own guard rails, not AWS quotas; raise them here if a real
# environment needs more.
MAX_GPU_NODES_PER_GROUP = 256
MAX_SYSTEM_NODES = 32
# AWS tag rules [AWS General Reference, "Tagging AWS resources", tag naming limits]: keys 1-128
# and values 0-256 Unicode characters of letters, digits, spaces and _ . : / = + - @; the aws:
# prefix is reserved for AWS; at most 50 tags per resource (the kit adds its own).
_TAG_CHARS_RE = re.compile(r"[\w .:/=+\-@]*")
MAX_USER_TAGS = 40
KIT_TAG_PREFIX = "rlkit:"
_INSTANCE_TYPE_RE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")


def _validate_values(cfg: KitConfig, add) -> None:
    if len(cfg.tags) > MAX_USER_TAGS:
        add(Problem("tags", f"{len(cfg.tags)} tags", f"at most {MAX_USER_TAGS} tags (AWS allows "
                    "50 per resource and the kit adds its own)", "drop some tags"))
    for key, value in cfg.tags.items():
        path = f"tags.{key}"
        if key.lower().startswith("aws:"):
            add(Problem(path, key, "the aws: prefix is reserved for AWS",
                        "use another key, e.g. team or cost-center"))
        elif key.startswith(KIT_TAG_PREFIX):
            add(Problem(path, key, f"the {KIT_TAG_PREFIX} prefix is reserved for the kit's own "
                        f"tags ({names.ENVIRONMENT_TAG}, {names.TTL_TAG})",
                        "use another key; the kit sets these itself"))
        elif not 1 <= len(key) <= 128 or not _TAG_CHARS_RE.fullmatch(key):
            add(Problem(path, key, "a tag key is 1-128 letters, digits, spaces and _ . : / = + - @",
                        "rename the key"))
        if len(value) > 256 or not _TAG_CHARS_RE.fullmatch(value):
            add(Problem(path, value, "a tag value is up to 256 letters, digits, spaces and "
                        "_ . : / = + - @", "shorten or simplify the value"))

    sn = cfg.system_nodes
    if not _INSTANCE_TYPE_RE.fullmatch(sn.instance_type):
        add(Problem("system_nodes.instance_type", sn.instance_type,
                    "not an EC2 instance type name (family.size)",
                    "use e.g. m7i.xlarge"))
    else:
        family = sn.instance_type.split(".")[0]
        parts = re.fullmatch(r"([a-z]+)(\d+)([a-z-]*)", family)
        if family.startswith(("p", "g", "trn", "inf", "dl")) and sn.instance_type not in \
                INSTANCE_TYPES:
            add(Problem("system_nodes.instance_type", sn.instance_type,
                        "an accelerated instance type costs GPU prices for CPU work",
                        f"use a general-purpose type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
        elif family == "a1" or (parts is not None and "g" in parts.group(3)):
            add(Problem("system_nodes.instance_type", sn.instance_type,
                        "an Arm (Graviton) type, but system nodes run the x86_64 AL2023 AMI",
                        f"use an x86_64 type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
    if sn.max_size > MAX_SYSTEM_NODES:
        add(Problem("system_nodes.max_size", sn.max_size,
                    f"at most {MAX_SYSTEM_NODES} system nodes (the kit's absolute cap)",
                    "use a small number such as 4"))

    for group, g in cfg.gpu_node_groups.items():
        path = f"gpu_node_groups.{group}"
        if g.max_size > MAX_GPU_NODES_PER_GROUP:
            add(Problem(f"{path}.max_size", g.max_size,
                        f"at most {MAX_GPU_NODES_PER_GROUP} nodes per GPU group (the kit's "
                        "absolute cap, whatever cost_guard says)",
                        "check for a typo; split a larger fleet into several groups"))
        seen: set[tuple[str, str]] = set()
        for i, t in enumerate(g.taints):
            if not _LABEL_KEY_RE.fullmatch(t.key):
                add(Problem(f"{path}.taints[{i}].key", t.key, "not a valid Kubernetes taint key",
                            "use [prefix/]name, the name up to 63 letters, digits, '-', '_', '.'"))
            if not _LABEL_VALUE_RE.fullmatch(t.value):
                add(Problem(f"{path}.taints[{i}].value", t.value,
                            "not a valid Kubernetes taint value",
                            "use up to 63 letters, digits, '-', '_' or '.'"))
            if (t.key, t.effect) in seen:
                add(Problem(f"{path}.taints[{i}]", f"{t.key}:{t.effect}",
                            "the same key and effect twice", "keep one"))
            seen.add((t.key, t.effect))

    t = cfg.training
    if not t.prompt_data.startswith(("s3://", "/")) and \
            not t.prompt_data.startswith(names.DATASETS_PREFIX):
        add(Problem("training.prompt_data", t.prompt_data,
                    f"a data-bucket key must live under {names.DATASETS_PREFIX} (the trainer's "
                    f"role may read only {names.DATASETS_PREFIX} and {names.CHECKPOINTS_PREFIX})",
                    f"upload the file to s3://<bucket>/{names.DATASETS_PREFIX} and use "
                    f"{names.DATASETS_PREFIX}{t.prompt_data.rsplit('/', 1)[-1]}, or give an "
                    "absolute path inside the image"))
    for field_name in ("prompt_data", "hf_checkpoint"):
        value = getattr(t, field_name)
        key = value[len("s3://"):].partition("/")[2] if value.startswith("s3://") else None
        if key is not None and not key.startswith(names.DATASETS_PREFIX):
            add(Problem(f"training.{field_name}", value,
                        f"the trainer's role may read only the data bucket's "
                        f"{names.DATASETS_PREFIX} and {names.CHECKPOINTS_PREFIX} prefixes; this "
                        "URI is outside them, so the job would fail after the GPUs start",
                        f"copy the data into the data bucket under {names.DATASETS_PREFIX} and "
                        f"give its key, e.g. {names.DATASETS_PREFIX}"
                        f"{value.rstrip('/').rsplit('/', 1)[-1]}"))


# Where each run-config field comes from in the kit config (rltrainer's paths -> ours).
_RUN_CONFIG_PATHS = (
    ("parallel.training.", "training.parallel."),
    ("parallel.rollout.", "training.rollout."),
    ("parallel.nodes", "training.nodes"),
    ("parallel.gpus_per_node", "gpu_node_groups.<training.node_group>.instance_type"),
    ("model.hf_checkpoint", "training.hf_checkpoint"),
    ("model.name", "training.model"),
    ("data.prompt_data", "training.prompt_data"),
    ("run_name", "training.run_name"),
    ("grpo", "training.grpo"),
    ("expert_parallel", "training.expert_parallel"),
    ("parallel", "training.parallel"),
)


def _kit_path(run_config_path: str) -> str:
    for theirs, ours in _RUN_CONFIG_PATHS:
        if run_config_path.startswith(theirs):
            return ours + run_config_path[len(theirs):]
    return f"training ({run_config_path})"


def trainer_problems(cfg: KitConfig, already: list[Problem]) -> list[Problem]:
    """The trainer's own run-config validation (rltrainer.config), run on the run.yaml this
    config renders, so that what the trainer would refuse after the GPUs start fails here. Its
    problems are reported with the kit config's field paths; those the kit already reported are
    left out."""
    from infra.run_config import run_config_document  # the same document the manifests mount

    try:
        from rltrainer.config import ConfigError as RunConfigError
        from rltrainer.config import parse_run_config
    except ImportError:  # the trainer package ships with the kit (requirements.txt)
        return [Problem("training", "rltrainer", "the trainer package is not installed, so the "
                        "run config cannot be checked", "pip install -r requirements.txt")]
    group = cfg.gpu_node_groups.get(cfg.training.node_group)
    itype = INSTANCE_TYPES.get(group.instance_type) if group is not None else None
    if itype is None:
        return []  # reported already (unknown group or instance type)
    if not 1 <= cfg.training.nodes <= min(group.max_size, MAX_GPU_NODES_PER_GROUP):
        # Reported already; and the trainer's hints enumerate divisors of the GPU count, which
        # must stay small (10**9 nodes would take minutes).
        return []
    # The bucket is known only after deploy; any valid name stands in for it.
    doc = run_config_document(cfg, itype, bucket="rlkit-config-check",
                              prompt_data=cfg.training.prompt_data if
                              cfg.training.prompt_data.startswith(("s3://", "/"))
                              else f"s3://rlkit-config-check/{cfg.training.prompt_data}")
    try:
        parse_run_config(doc, "run config")
    except RunConfigError as err:
        reported = [p.path for p in already]
        found = []
        for rp in err.problems:
            if rp.path == "expert_parallel.backend":
                # The kit checks the backend itself; the fabric gate renders configs with
                # deepep-gin to benchmark it, which the trainer refuses only for training.
                continue
            path = _kit_path(rp.path)
            if any(path == r or path.startswith(r + ".") or r.startswith(path + ".")
                   for r in reported):
                continue
            found.append(Problem(path, rp.value, f"the trainer refuses it: {rp.rule}", rp.fix))
        return found
    return []


# --- reading the file ----------------------------------------------------------------------------

# Limits on the file itself: a kit config is a few kilobytes and a few levels deep. Anything far
# beyond that is a mistake or an attack (a YAML alias bomb expands 300 bytes into gigabytes).
MAX_CONFIG_BYTES = 256 * 1024
MAX_NESTING = 16
MAX_INT_DIGITS = 18  # every integer the config holds fits in far fewer; int() of 5000 digits raises
MAX_QUOTED_CHARS = 160  # values quoted in error messages are cut to this length


def shorten(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class _LoadProblem(Exception):
    def __init__(self, rule: str, fix: str, mark: Any = None):
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        super().__init__(rule + where)
        self.rule = rule + where
        self.fix = fix


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses what a config never needs and an attacker or a typo produces:
    anchors and aliases, duplicate keys, deep nesting, huge integers, inf and NaN."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _LoadProblem("YAML anchors and aliases (&name, *name) are not allowed in a "
                               "config", "write each value out in full", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise _LoadProblem(f"nested deeper than {MAX_NESTING} levels",
                                   "a kit config is a few levels deep; see "
                                   "docs/config-reference.md", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if duplicate:
                raise _LoadProblem(f"duplicate key {shorten(key)}",
                                   "keep one entry per key (YAML would silently use the last)",
                                   key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # noqa: ANN001
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _LoadProblem(f"integer with {digits} digits is out of range",
                               "use a realistic number", node.start_mark)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):  # noqa: ANN001
        value = super().construct_yaml_float(node)
        if value != value or value in (float("inf"), float("-inf")):
            raise _LoadProblem(f"{shorten(node.value)} is not a finite number",
                               "use an ordinary number", node.start_mark)
        return value


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)


def _refuse_tag(loader: _StrictLoader, node: yaml.Node) -> Any:
    raise _LoadProblem(f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not "
                       "allowed in a config", "write a plain string, number, list or mapping",
                       node.start_mark)


# Binary, sets and ordered pairs have no place in a config (pydantic would quietly turn bytes into
# a string); SafeLoader already refuses python/* tags.
for _tag in ("binary", "set", "omap", "pairs"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read and parse a config file, refusing anything but a small, plain UTF-8 YAML mapping.

    Raises ConfigError (one problem at ``<file>``) for a missing, unreadable, empty, oversized,
    non-UTF-8 or malformed file, duplicate keys, anchors/aliases, deep nesting, huge integers and
    non-finite numbers."""
    path = Path(path)
    source = str(path)

    def fail(rule: str, fix: str) -> ConfigError:
        return ConfigError([Problem("<file>", source, rule, fix)], source)

    if not path.is_file():
        raise fail("no such config file",
                   "pass an existing path, e.g. -c config=examples/p5-2node.yaml")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror})", "check the path and its permissions") \
            from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise fail(f"is {len(raw)} bytes; a config is at most {MAX_CONFIG_BYTES} bytes",
                   "pass the kit config, not another file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})",
                   "save the file as UTF-8") from None
    return parse_config_text(text, source)


def parse_config_text(text: str, source: str = "config") -> dict[str, Any]:
    """Parse config YAML text with the strict loader (see ``read_config_file``); raise
    ConfigError with one problem at ``<file>``."""

    def fail(rule: str, fix: str) -> ConfigError:
        return ConfigError([Problem("<file>", source, rule, fix)], source)

    try:
        loader = _StrictLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except _LoadProblem as err:
        raise fail(err.rule, err.fix) from None
    except yaml.YAMLError as err:
        raise fail(f"not valid YAML ({shorten(str(err), 300)})",
                   "fix the YAML syntax at the position shown") from None
    except (RecursionError, ValueError) as err:
        raise fail(f"cannot be parsed ({shorten(str(err))})", "fix the YAML") from None
    if data is None:
        raise fail("the file is empty (no keys): an empty file would silently deploy the "
                   "built-in default", "write at least `name:` and `region:`, or omit the config "
                   "to use the built-in default on purpose")
    if not isinstance(data, dict):
        raise ConfigError([Problem("<root>", data, "a config file must be a YAML mapping",
                                   "start the file with keys such as 'name:' and 'region:'")],
                          source)
    return data


# Sections whose values other rules read: when one of these had a type error (and fell back to its
# default for the semantic pass), the rules under its dependents would judge a value the user never
# wrote, so their problems are not reported until the type error is fixed.
_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "region": ("availability_zones", "gpu_node_groups", "vpc"),
    "availability_zones": ("vpc", "gpu_node_groups"),
    "gpu_node_groups": ("training", "cost_guard"),
    "ephemeral": ("cost_guard",),
}


def _path_text(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _prune(data: Any, loc: tuple[Any, ...]) -> None:
    """Delete ``loc`` from nested dicts, stopping at the first list or missing key."""
    node = data
    for part in loc[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(loc[-1], None)


def _pruned_loc(error: dict[str, Any]) -> tuple[Any, ...]:
    """The part of the input to drop so that the rest can be type-checked."""
    loc: list[Any] = []
    for part in error["loc"]:
        if isinstance(part, int):  # inside a list: drop the whole list
            break
        loc.append(part)
    if error["type"] == "missing" and len(loc) == len(error["loc"]):
        loc = loc[:-1]  # the object lacking a required field
    return tuple(loc)


def _semantic_after_type_errors(data: dict[str, Any], error: ValidationError) -> list[Problem]:
    """Semantic problems of the parts of ``data`` that type-check, so that one pass reports
    everything: fields with type errors are dropped (their defaults apply) and problems that
    could depend on them are left out."""
    import copy

    pruned_data = copy.deepcopy(data)
    suspects: list[str] = []
    for _ in range(5):
        for e in error.errors():
            loc = _pruned_loc(e)
            if not loc:
                return []
            _prune(pruned_data, loc)
            if e["type"] != "extra_forbidden":  # an unknown key changes no other value
                parent = loc[:-1] or loc
                suspects.append(_path_text(parent))
                suspects += _DEPENDENTS.get(str(loc[0]), ())
        try:
            cfg = KitConfig.model_validate(pruned_data)
            break
        except ValidationError as err:
            error = err
    else:
        return []

    def related(path: str) -> bool:
        return any(path == s or path.startswith((s + ".", s + "[")) or s.startswith(path + ".")
                   for s in suspects)

    return [p for p in validate(cfg) if not related(p.path)]


def parse_config(data: dict[str, Any] | None, source: str = "config") -> KitConfig:
    """Build and validate a config from parsed YAML; raise ConfigError with every problem.

    Schema (type) problems and semantic problems are reported together: a misspelt key does not
    hide the other problems."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([Problem("<root>", data, "a config file must be a YAML mapping",
                                   "start the file with keys such as 'name:' and 'region:'")],
                          source)
    try:
        cfg = KitConfig.model_validate(data)
    except ValidationError as err:
        problems = _problems_from_pydantic(err)
        problems += _semantic_after_type_errors(data, err)
        raise ConfigError(problems, source) from None
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def load_config(path: str | Path | None = None) -> KitConfig:
    """Load and validate a config file; ``None`` returns the validated built-in default."""
    if path is None:
        return parse_config({}, "built-in default config")
    return parse_config(read_config_file(path), str(path))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the config file, for editor autocompletion."""
    schema = KitConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "MoE RL on EKS kit config"
    return schema

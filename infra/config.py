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
    KUBERNETES_VERSIONS,
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
    mode: Literal["public", "private", "public-and-private"] = Field(
        "public-and-private",
        description="EKS API endpoint access. public-and-private keeps node traffic in the VPC.",
    )
    public_cidrs: list[str] = Field(
        default_factory=lambda: ["0.0.0.0/0"],
        description="CIDRs allowed to reach the public endpoint. Narrow this to your office or CI "
        "egress range.",
    )


class SystemNodesConfig(_Model):
    instance_type: str = Field(
        DEFAULT_SYSTEM_INSTANCE_TYPE,
        description="Instance type of the small non-GPU node group (Ray head, operators, CoreDNS).",
    )
    min_size: int = 2
    desired_size: int = 2
    max_size: int = 4


class CapacityConfig(_Model):
    type: Literal["on-demand", "capacity-block", "odcr"] = Field(
        "on-demand",
        description="on-demand; capacity-block (EC2 Capacity Blocks for ML); odcr (an On-Demand "
        "Capacity Reservation).",
    )
    reservation_id: str | None = Field(
        None, description="Capacity reservation ID (cr-...), required for capacity-block and odcr."
    )


class AddonConfig(_Model):
    enabled: bool = Field(True, description="Install this Helm chart.")
    version: str | None = Field(
        None, description="Chart version; default: the version pinned in infra/versions.py. "
        "Must be one the kit lists there."
    )


def _addon(name: str):
    return Field(default_factory=lambda: AddonConfig(enabled=ADDONS_ENABLED_BY_DEFAULT[name]),
                 description=f"Helm chart {HELM_CHARTS[name]['chart']} "
                 f"(default {'on' if ADDONS_ENABLED_BY_DEFAULT[name] else 'off'}, version "
                 f"{HELM_CHARTS[name]['version']}).")


class AddonsConfig(_Model):
    """Cluster add-ons installed as Helm charts through CDK."""

    efa_device_plugin: AddonConfig = _addon("efa_device_plugin")
    nvidia_device_plugin: AddonConfig = _addon("nvidia_device_plugin")
    kuberay_operator: AddonConfig = _addon("kuberay_operator")
    dcgm_exporter: AddonConfig = _addon("dcgm_exporter")

    def chart_version(self, name: str) -> str:
        return getattr(self, name).version or HELM_CHARTS[name]["version"]


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
        description="Launch into a cluster placement group. Default: on, except for capacity "
        "blocks (a forced placement group can conflict with the reservation: eksctl issue 7949).",
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
        return {**self.labels, **names.gpu_node_labels(group_name)}

    def node_taints(self) -> list[names.Taint]:
        """The kit's GPU taint first, then the group's extra taints."""
        return [names.GPU_TAINT] + [names.Taint(t.key, t.value, t.effect) for t in self.taints]

    @property
    def uses_placement_group(self) -> bool:
        if self.placement_group is not None:
            return self.placement_group
        return self.capacity.type != "capacity-block"


class StorageConfig(_Model):
    retain: bool = Field(
        True, description="Keep the bucket and ECR repository when the stack is deleted "
        "(ignored in ephemeral mode, where everything is destroyable)."
    )
    kms: bool = Field(False, description="Encrypt the bucket with a customer-managed KMS key.")
    noncurrent_version_days: int = Field(
        30, description="Days before old (noncurrent) object versions expire."
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
        "/models/Qwen3-30B-A3B", description="Hugging Face weights: a path in the image or s3://."
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
        "0.1.0", description="Tag used with the ECR repository URI (tags are immutable there, "
        "so use a version, not latest)."
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for trainer pods."
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
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    cost_guard: CostGuardConfig = Field(default_factory=CostGuardConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    tags: dict[str, str] = Field(default_factory=dict, description="Extra tags on every resource.")

    @property
    def stack_names(self) -> dict[str, str]:
        return names.stack_names(self.name)


# --- errors -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: where, what, which rule, and how to fix it."""

    path: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path} = {self.value!r}: {self.rule}. Fix: {self.fix}."


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
    if not _REGION_RE.match(cfg.region):
        add(Problem("region", cfg.region, "not an AWS region name", "use a name like 'us-east-1'"))
    if cfg.account is not None and not _ACCOUNT_RE.match(cfg.account):
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

    ea = cfg.endpoint_access
    if ea.mode == "private" and ea.public_cidrs != ["0.0.0.0/0"]:
        add(Problem("endpoint_access.public_cidrs", ea.public_cidrs,
                    "public CIDRs have no effect when the endpoint is private",
                    "remove public_cidrs or set mode to public-and-private"))
    for i, c in enumerate(ea.public_cidrs):
        if (prob := _cidr_problem(f"endpoint_access.public_cidrs[{i}]", c)) is not None:
            add(prob)

    for i, arn in enumerate(cfg.admin_role_arns):
        if not _ROLE_ARN_RE.match(arn):
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
    return p


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
    if not _VPC_RE.match(e.vpc_id):
        add(Problem("vpc.existing.vpc_id", e.vpc_id, "not a VPC ID", "use vpc-0123456789abcdef0"))
    for kind in ("private_subnet_ids", "public_subnet_ids"):
        subnets = getattr(e, kind)
        for az, sid in subnets.items():
            if az not in cfg.availability_zones:
                add(Problem(f"vpc.existing.{kind}.{az}", sid,
                            f"AZ {az} is not in availability_zones {cfg.availability_zones}",
                            "add the AZ to availability_zones or remove this subnet"))
            if not _SUBNET_RE.match(sid):
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
        elif not _RESERVATION_RE.match(cap.reservation_id):
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
    for key, value in g.labels.items():
        if key.startswith(names.LABEL_PREFIX + "/"):
            add(Problem(f"{path}.labels.{key}", value, f"the {names.LABEL_PREFIX}/ prefix is "
                        "reserved for labels the kit sets", "use another prefix"))
        elif not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
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
    if not _DNS_LABEL_RE.match(t.run_name) or len(t.run_name) > 40:
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


def supports_gin_gpu(instance_type: str) -> bool:
    """GPU-initiated NCCL GIN needs p5en or the p6 family [design.md, DeepEP over EFA]."""
    return instance_type.startswith(("p5en.", "p6-"))


# --- loading ------------------------------------------------------------------------------------


def parse_config(data: dict[str, Any] | None, source: str = "config") -> KitConfig:
    """Build and validate a config from parsed YAML; raise ConfigError with every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([Problem("<root>", data, "a config file must be a YAML mapping",
                                   "start the file with keys such as 'name:' and 'region:'")],
                          source)
    try:
        cfg = KitConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_problems_from_pydantic(err), source) from None
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def load_config(path: str | Path | None = None) -> KitConfig:
    """Load and validate a config file; ``None`` returns the validated built-in default."""
    if path is None:
        return parse_config({}, "built-in default config")
    path = Path(path)
    if not path.is_file():
        raise ConfigError([Problem("<file>", str(path), "no such config file",
                                   "pass an existing path, e.g. -c config=examples/p5-2node.yaml")],
                          str(path))
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError([Problem("<file>", str(path), f"not valid YAML ({err})",
                                   "fix the YAML syntax at the position shown")], str(path)) from None
    return parse_config(data, str(path))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the config file, for editor autocompletion."""
    schema = KitConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "MoE RL on EKS kit config"
    return schema

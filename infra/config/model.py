"""The config's typed model: every section of the YAML file as a frozen pydantic model, and
``KitConfig``, one environment of the kit.

Types and defaults only; the semantic rules live in ``infra.config.rules`` and reading the file
in ``infra.config.loader``. The JSON schema (config.schema.json) is generated from these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from infra import names
from infra.catalog.fsx import DEFAULT_THROUGHPUT, SHARED_FS_MIN_CAPACITY_GIB
from infra.addons.config import AddonsConfig
from infra.config.base import _Model
from infra.config.training_model import TrainingConfig
from infra.versions import (
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_SYSTEM_INSTANCE_TYPE,
    DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
    SYSTEM_ROOT_VOLUME_MIN_GIB,
)


# --- sections -----------------------------------------------------------------------------------


class ExistingVpc(_Model):
    """An existing VPC, imported by IDs (no lookups at synth)."""

    vpc_id: str = Field(description="ID of the VPC, e.g. vpc-0123456789abcdef0.")
    private_subnet_ids: dict[str, str] = Field(
        description="Private subnet per availability zone (AZ name -> subnet ID); one for every "
        "AZ in availability_zones and every Local Zone in local_zones."
    )
    public_subnet_ids: dict[str, str] = Field(
        default_factory=dict, description="Optional public subnet per AZ (AZ name -> subnet ID)."
    )


class PodAddressesConfig(_Model):
    """How many VPC addresses the VPC CNI keeps on each node, instead of its default spare
    network interface with all its addresses (about 100 on a GPU node)."""

    warm_ip_target: int = Field(
        2, description="Free addresses kept ready on each node beyond those its pods use "
        "(the VPC CNI's WARM_IP_TARGET); at least 1, or no address is ever added.")
    minimum_ip_target: int = Field(
        12, description="Addresses each node holds at least, from its start (MINIMUM_IP_TARGET): "
        "a little more than the pods a node runs; 0 = no floor (the pods' addresses and the warm "
        "pool only).")

    def cni_env(self) -> dict[str, str]:
        """The aws-node environment these settings become (strings, as the add-on takes them)."""
        return {"WARM_IP_TARGET": str(self.warm_ip_target),
                "MINIMUM_IP_TARGET": str(self.minimum_ip_target)}


class VpcConfig(_Model):
    cidr: str = Field("10.0.0.0/16", description="CIDR of a new VPC (/16 to /18); fixed once "
                      "deployed. Each AZ's private subnet is an eighth of it (a /19 of a /16: 8,187 "
                      "addresses); a GPU node holds about 100 (VPC CNI), and config warns when an "
                      "AZ's groups can hold more than its subnet has.")
    nat_gateways: int = Field(1, description="NAT gateways of a new VPC (1 .. number of AZs), placed in the first AZs of availability_zones; a GPU group in an AZ without one is warned about (its API traffic crosses AZs).")
    existing: ExistingVpc | None = Field(
        None, description="Import this VPC instead of creating one; cidr and nat_gateways are "
        "then ignored."
    )
    pod_addresses: PodAddressesConfig | None = Field(
        None, description="Set to hold a few addresses per node (the VPC CNI's WARM_IP_TARGET "
        "and MINIMUM_IP_TARGET) instead of a spare network interface's worth: about 15 instead "
        "of 100 on a GPU node, for many nodes in one AZ. Unset: the VPC CNI's defaults. Each "
        "address then comes from an EC2 call when a pod needs it.")


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
        description="Instance type of the small non-GPU node group (operators, "
        "CoreDNS): an x86_64 type without accelerators, one botocore's EC2 service model lists "
        "(checked offline). Changing it on a deployed cluster replaces the system node group (a "
        "node group's instance types are create-only): the KubeRay operator "
        "and CoreDNS move to new nodes (rlkit preflight warns).",
    )
    min_size: int = 2
    desired_size: int = 2
    max_size: int = 4
    root_volume_gib: int = Field(
        DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
        description="Root volume of each system node in GiB: the AMI, the add-ons' images and "
        f"the container logs (at least {SYSTEM_ROOT_VOLUME_MIN_GIB}); no pod of a run pulls the "
        "trainer image there (the job submitter runs beside the Ray head). It is the system nodes' launch template's (encrypted gp3), so changing it on a deployed "
        "cluster replaces every system node in a rolling update (rlkit preflight warns).",
    )


class CapacityConfig(_Model):
    type: Literal["on-demand", "capacity-block", "odcr"] = Field(
        "on-demand",
        description="on-demand; capacity-block (EC2 Capacity Blocks for ML); odcr (an On-Demand "
        "Capacity Reservation). Switching a deployed group between capacity-block and the others "
        "replaces its node group (the capacity type is create-only), and the run on its nodes "
        "dies: rlkit preflight warns, or refuses while a Capacity Block group's nodes run.",
    )
    reservation_id: str | None = Field(
        None, description="Capacity reservation ID (cr-...), required for capacity-block and odcr."
    )
    ultraserver_type: str | None = Field(
        None, description="The EC2 UltraServer type of the Capacity Block (e.g. u-p6e-gb200x72, "
        "18 instances in one NVLink domain; u-p6e-gb200x36, 9), required for UltraServer instance "
        "types; preflight compares it with the block's. It sets the NVLink domain size a run must "
        "fit in.",
    )



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
    instance_type: str = Field(
        description="A GPU instance type from the kit's catalog. On a deployed group, one of "
        "another architecture (x86_64 vs arm64: another AMI type, create-only) replaces the node "
        "group (rlkit preflight warns while it has nodes).")
    availability_zone: str = Field(
        description="The one AZ this group lives in (EFA traffic must stay in one AZ). Changing "
        "it on a deployed group replaces the node group (its subnets are create-only), and the run "
        "on its nodes dies: rlkit preflight warns while the group has nodes, and refuses while "
        "they hold a cluster placement group the deploy keeps (one lies in a single AZ, so the "
        "new group's nodes could not launch)."
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
        "block draining them (running jobs are evicted). Off: the RL job's budget (rendered "
        "unless the group is a Capacity Block) makes such an update fail while the job runs, "
        "and the deploy rolls back.",
    )
    root_volume_gib: int = Field(
        200, description="Encrypted gp3 root volume size in GiB. Changing it on a deployed group "
        "gives its launch template a new version, and EKS replaces every node of the group in a "
        "rolling update (see force_update; rlkit preflight warns while the group has nodes).")
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



class SharedFileSystemConfig(_Model):
    """The file system the Ray head and the workers share."""

    type: Literal["fsx-lustre", "none"] = Field(
        "fsx-lustre",
        description="fsx-lustre: an FSx for Lustre PERSISTENT_2 file system in the training "
        f"group's AZ, mounted at {names.SHARED_FS_MOUNT_PATH} on the Ray head and every worker, with "
        f"{names.SHARED_FS_MOUNT_PATH}/{names.DATASETS_PREFIX} and "
        f"{names.SHARED_FS_MOUNT_PATH}/{names.MODELS_PREFIX} read lazily from the bucket. none: no "
        "shared file system (single-node runs only).",
    )
    availability_zone: str | None = Field(
        None, description="AZ of the file system; default: the training group's AZ. Required "
        "when that is a Local Zone (the kit puts no file system there): use the zone's parent "
        "AZ (ParentZoneName in `aws ec2 describe-availability-zones`).",
    )
    capacity_gib: int = Field(
        SHARED_FS_MIN_CAPACITY_GIB,
        description="Storage capacity in GiB: 1200, 2400 or a multiple of 2400 (PERSISTENT_2 SSD). "
        "Must hold the reference weights plus training.checkpoint.keep_local + 1 checkpoints of "
        "the model (two by default).",
    )
    throughput_mb_s_per_tib: int = Field(
        DEFAULT_THROUGHPUT, description="Throughput per TiB of storage in MB/s: 125, 250, 500 or 1000. The file "
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
# log group takes one of these. tests/ops/test_image_build.py checks them against aws_cdk's
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
        "their events, and so do the VPC's flow-log group and the kubectl provider's Lambda log "
        "groups, also with observability off (a CloudWatch Logs retention period: 1, 3, 5, 7, 14, "
        "30, 60, 90, ...)."
    )
    application_signals: bool = Field(
        False, description="Let the add-on run CloudWatch Application Signals (auto-instrumented "
        "traces and APM metrics of Java, Python, .NET and Node.js pods, billed per span). Off: "
        "the chart's default would instrument the trainer's Python pods."
    )
    addon_version: str | None = Field(
        None, description="Pin the add-on build (e.g. v6.4.0-eksbuild.1) once its configuration "
        "schema has been read (`aws eks describe-addon-configuration`); empty: EKS's default for "
        "the cluster's Kubernetes version. The add-on has a stack of its own, so a build that "
        "refuses the kit's configuration fails that stack only."
    )


class CostGuardConfig(_Model):
    max_gpu_nodes: int | None = Field(
        None, description="Upper bound on the sum of max_size over all GPU node groups."
    )
    ttl_hours: int | None = Field(
        None, description="Time-to-live tag put on every resource; required when ephemeral. Like "
        "`tags`, changing it on a deployed environment rolls every GPU group's nodes and replaces "
        "the placement groups the kit made."
    )


DEFAULT_REGION = "us-east-1"
DEFAULT_AVAILABILITY_ZONES = ("us-east-1a", "us-east-1b")


def _default_gpu_node_groups(zone: str = DEFAULT_AVAILABILITY_ZONES[0]) -> dict:
    """The built-in GPU node groups: one on-demand group of two p5.48xlarge in ``zone``."""
    return {"p5": GpuNodeGroupConfig(instance_type="p5.48xlarge", availability_zone=zone,
                                     min_size=0, desired_size=2, max_size=2)}


def default_zones_elsewhere(cfg: KitConfig) -> bool:
    """Whether ``cfg`` moves the region but leaves availability_zones to the built-in default,
    whose zones belong to the default region only (the rules report that once, at
    availability_zones, and leave out the problems of other fields that would echo it)."""
    return "availability_zones" not in cfg.model_fields_set and cfg.region != DEFAULT_REGION \
        and tuple(cfg.availability_zones) == DEFAULT_AVAILABILITY_ZONES


class KitConfig(_Model):
    """One environment of the kit."""

    name: str = Field("moe-rl", description="Prefix of every stack and resource name.")
    region: str = Field(DEFAULT_REGION, description="AWS region.")
    availability_zones: list[str] = Field(
        default_factory=lambda: list(DEFAULT_AVAILABILITY_ZONES),
        description="AZs of the VPC, named explicitly so synth needs no lookup (at least two; "
        "at most four in a VPC the kit creates, any number with vpc.existing). "
        f"The default is for {DEFAULT_REGION} only: with another region, list its AZs. "
        "Subnets are numbered by position: on a deployed VPC, add zones at the end only (rlkit "
        "preflight refuses other changes).",
    )
    local_zones: list[str] = Field(
        default_factory=list,
        description="Local Zones of the region the VPC extends into with one private subnet each "
        "(routed through the first NAT gateway), for GPU groups whose capacity sits there, such "
        "as P6e-GB200 UltraServer Capacity Blocks (Dallas Local Zone; opt in to its zone group "
        "first). The EKS control plane never uses them. Subnets are numbered by position, each "
        "with a CIDR block by position: on a deployed VPC, add zones at the end only; to drop or "
        "replace one, destroy the GPU stacks of its groups first (rlkit preflight refuses other "
        "changes). At most two in a VPC the kit creates; with vpc.existing, name each one's "
        "private subnet in vpc.existing.private_subnet_ids.",
    )
    account: str | None = Field(
        None, description="12-digit account ID; absent = environment-agnostic stacks."
    )
    kubernetes_version: str = Field(DEFAULT_KUBERNETES_VERSION, description="EKS version of the control plane and every node group. Raise it one minor version at a time; run `rlkit preflight` first (docs/operations.md, \"Kubernetes upgrades\").")
    node_ami_release_version: str | None = Field(
        None, description="EKS-optimized AMI release every node group runs, as EKS names it "
        "(<Kubernetes x.y.z>-<YYYYMMDD>, e.g. 1.35.6-20260714: NVIDIA driver 580.159.03). Absent = "
        "the release EKS chooses (the newest when a group is created). Changing it replaces every "
        "node; deploy that change alone (rlkit preflight checks it, docs/operations.md).",
    )
    ephemeral: bool = Field(
        False, description="CI mode: every resource destroyable, data included."
    )
    vpc: VpcConfig = Field(default_factory=VpcConfig)
    endpoint_access: EndpointAccessConfig = Field(default_factory=EndpointAccessConfig)
    admin_role_arns: list[str] = Field(
        default_factory=list,
        description="IAM role ARNs granted cluster-admin access entries. Entries are keyed by "
        "position: add roles at the end (rlkit preflight refuses a change that moves a role).",
    )
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)
    gpu_node_groups: dict[str, GpuNodeGroupConfig] = Field(
        default_factory=_default_gpu_node_groups,
        description="EFA GPU node groups by name. Unset: one on-demand p5 group of 2 nodes in "
        f"{DEFAULT_AVAILABILITY_ZONES[0]} when availability_zones lists it, else in the first of "
        "availability_zones.",
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
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Extra tags on every resource. A GPU group's nodes get them from its launch "
        "template, so changing them on a deployed environment gives it a new version and EKS "
        "replaces every node of each GPU group in a rolling update (see force_update); a placement "
        "group the kit made is replaced too (its tags are create-only). rlkit preflight warns "
        "(refuses for a Capacity Block group whose nodes run).")

    @model_validator(mode="before")
    @classmethod
    def _gpu_group_follows_the_zones(cls, data: Any) -> Any:
        """Without gpu_node_groups, the built-in group stays in us-east-1a whenever the config
        lists it (it always was there: moving it replaces the group and the shared file system
        that follows it), else goes to the first AZ listed (a config moved to another region
        moves the group too). Read from the input, so an error elsewhere cannot hide it."""
        if isinstance(data, dict) and "gpu_node_groups" not in data:
            zones = data.get("availability_zones")
            if isinstance(zones, list) and zones and isinstance(zones[0], str):
                zone = DEFAULT_AVAILABILITY_ZONES[0]
                data = {**data, "gpu_node_groups": _default_gpu_node_groups(
                    zone if zone in zones else zones[0])}
        return data

    @property
    def stack_names(self) -> dict[str, str]:
        return names.stack_names(self.name)

    def gpu_instance_types(self) -> tuple[str, ...]:
        """The GPU groups' instance types, sorted, no repeats."""
        return tuple(sorted({g.instance_type for g in self.gpu_node_groups.values()}))

    def addon_enabled(self, name: str) -> bool:
        """Whether add-on ``name`` is installed for this config's GPU groups."""
        return self.addons.enabled(name, self.gpu_instance_types())

    def gpu_tolerations(self) -> list[dict[str, str]]:
        """Tolerations for a DaemonSet that must run on every GPU node group: ``Exists`` on each
        taint key any group carries (the kit's GPU taint and every user taint), once each."""
        seen: dict[str, dict[str, str]] = {}
        for group in self.gpu_node_groups.values():
            for taint in group.node_taints():
                seen.setdefault(taint.key, taint.toleration())
        return list(seen.values())

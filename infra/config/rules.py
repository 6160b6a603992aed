"""The config's semantic rules: what a type-valid config must also satisfy.

``validate`` returns every problem at once, each naming the field path, the bad value, the rule
and the fix. Value rules (tags, taints, absolute caps) live in ``infra.config.values``; the
trainer's own run-config check in ``infra.config.trainer``.
"""

from __future__ import annotations

import ipaddress
import re

from infra import names
from infra.catalog.fsx import (
    SHARED_FS_CAPACITY_STEP_GIB,
    SHARED_FS_MIN_CAPACITY_GIB,
    SHARED_FS_THROUGHPUTS,
    checkpoints_phrase,
    shared_fs_required_gib,
    valid_shared_fs_capacity_gib,
)
from infra.catalog.gpus import GPUS
from infra.catalog.instances import INSTANCE_TYPES, UNSUPPORTED_INSTANCE_TYPES, gin_gpu_types
from infra.addons.config import AddonsConfig
from infra.config.capacity import capacity_block_problems
from infra.config.derived import VPC_PREFIX_RANGE
from infra.catalog.models import MODEL_CATALOG
from infra.config.errors import close_match, problem
from infra.config.training_model import MAX_START_DEADLINE_MINUTES, MIN_START_DEADLINE_MINUTES
from infra import addons as addons_registry
from infra.catalog.regions import botocore_version, regions
from infra.config.model import (
    DEFAULT_AVAILABILITY_ZONES,
    DEFAULT_REGION,
    LOG_RETENTION_DAYS,
    GpuNodeGroupConfig,
    KitConfig,
    default_zones_elsewhere,
)
from infra.config.save_period import save_period_check
from infra.config.trainer import EP_BACKENDS, trainer_problems
from infra.config.ultraserver import (
    local_zone_problems,
    ultraserver_group_problems,
    ultraserver_training_problems,
)
from infra.config.values import LABEL_KEY_RE, LABEL_VALUE_RE, validate_values
from infra.problems import Problem
from infra.versions import (
    DEFAULT_SYSTEM_INSTANCE_TYPE,
    DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
    AMI_RELEASE_RE,
    EKS_AMI_RELEASES_READ,
    KUBERNETES_VERSIONS,
    SYSTEM_ROOT_VOLUME_MIN_GIB,
    kubernetes_minor,
)

MAX_BACKOFF_LIMIT = 10

_NAME_RE = re.compile(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?")
_GROUP_RE = names.GPU_GROUP_NAME_RE
_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_ACCOUNT_RE = re.compile(r"^\d{12}$")
_ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_VPC_RE = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_RESERVATION_RE = re.compile(r"^cr-[0-9a-f]{17}$")
_PLACEMENT_GROUP_RE = re.compile(r"[!-~]{1,255}")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _cidr_problem(path: str, value: str) -> Problem | None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return problem(path, value, "not a valid IPv4 CIDR block",
                       "write it as a network address with prefix length, e.g. 203.0.113.0/24")
    return None


def validate(cfg: KitConfig) -> list[Problem]:
    """Every semantic problem of a type-valid config (empty list = valid)."""
    p: list[Problem] = []
    add = p.append

    if not _NAME_RE.fullmatch(cfg.name):
        add(problem("name", cfg.name, "must be 1-20 characters: lowercase letters, digits and '-', "
                    "starting with a letter and ending with a letter or digit (it prefixes stack "
                    "and cluster names)",
                    "choose a short lowercase name such as 'moe-rl'"))
    elif names.environment_names_can_collide(cfg.name):
        add(problem("name", cfg.name, f"the word 'gpu' after a '-' is reserved: stacks of this "
                    f"environment could share names with another environment's GPU stacks "
                    f"({names.gpu_stack_name('<env>', '<group>')}), and teardown must tell them "
                    "apart", "choose a name without '-gpu', e.g. 'moe-rl-h100'"))
    region_problems = len(p)
    if not _REGION_RE.fullmatch(cfg.region):
        add(problem("region", cfg.region, "not an AWS region name", "use a name like 'us-east-1'"))
    elif cfg.region not in regions("eks"):
        # botocore's bundled endpoint data, read offline: no AWS call at synth.
        source = f"by the endpoint data of botocore {botocore_version()}"
        if cfg.region not in regions("ec2"):
            add(problem("region", cfg.region, f"no such AWS region, {source}",
                        "check the spelling (e.g. 'us-east-1'); for a region newer than this "
                        "botocore, upgrade boto3 and botocore"))
        else:
            add(problem("region", cfg.region, f"Amazon EKS is not offered in this region, {source}",
                        "choose a region with EKS, or upgrade boto3 and botocore if EKS has "
                        "launched there since"))
    region_ok = len(p) == region_problems
    if cfg.account is not None and not _ACCOUNT_RE.fullmatch(cfg.account):
        add(problem("account", cfg.account, "must be a 12-digit AWS account ID",
                    "use the ID from `aws sts get-caller-identity`, or remove it for "
                    "environment-agnostic stacks"))
    if cfg.kubernetes_version not in KUBERNETES_VERSIONS:
        add(problem("kubernetes_version", cfg.kubernetes_version,
                    f"not a version the kit supports ({', '.join(KUBERNETES_VERSIONS)})",
                    f"use one of {', '.join(KUBERNETES_VERSIONS)}"))
    elif cfg.node_ami_release_version is not None:
        _validate_ami_release(cfg, cfg.node_ami_release_version, add)

    azs = cfg.availability_zones
    if default_zones_elsewhere(cfg) and region_ok:  # a bad region is told alone
        # One problem, not one per built-in zone: the user wrote none of them. AZ names are not
        # guessed for the fix (ap-northeast-1, for one, has no 1b).
        add(problem("availability_zones", "(not set)",
                    f"not set, and the built-in default {list(DEFAULT_AVAILABILITY_ZONES)} is for "
                    f"{DEFAULT_REGION}, not region {cfg.region}",
                    f"list two or more AZs of {cfg.region}, e.g. availability_zones: "
                    f"[{cfg.region}a, {cfg.region}b] (`aws ec2 describe-availability-zones "
                    f"--region {cfg.region}` lists the region's zones)"))
        azs = []  # judged once listed
    elif default_zones_elsewhere(cfg):
        azs = []  # the region's own problem comes first
    elif len(azs) < 2:
        add(problem("availability_zones", azs, "EKS needs subnets in at least two AZs",
                    f"list two or more AZs of {cfg.region}, e.g. {cfg.region}a and {cfg.region}b"))
    if len(set(azs)) != len(azs):
        add(problem("availability_zones", azs, "AZs must not repeat", "list each AZ once"))
    if len(azs) > 4 and cfg.vpc.existing is None:  # an imported VPC brings its own subnets
        add(problem("availability_zones", azs, "at most four AZs fit the kit's subnet plan",
                    "list two to four AZs, or import a VPC (vpc.existing) with your subnets"))
    for i, az in enumerate(azs):
        if not re.fullmatch(re.escape(cfg.region) + r"[a-z]", az):
            add(problem(f"availability_zones[{i}]", az, f"not an AZ of region {cfg.region}",
                        f"use a name of the form {cfg.region}a"))

    local_zone_problems(cfg, add)
    _validate_vpc(cfg, add)

    _validate_endpoint(cfg, add)

    for i, arn in enumerate(cfg.admin_role_arns):
        if not _ROLE_ARN_RE.fullmatch(arn):
            add(problem(f"admin_role_arns[{i}]", arn, "not an IAM role ARN",
                        "use arn:aws:iam::123456789012:role/NAME"))

    sn = cfg.system_nodes
    if not (0 < sn.min_size <= sn.desired_size <= sn.max_size):
        add(problem("system_nodes", {"min_size": sn.min_size, "desired_size": sn.desired_size,
                                     "max_size": sn.max_size},
                    "sizes must satisfy 1 <= min_size <= desired_size <= max_size",
                    "the operators and CoreDNS need at least one system node; e.g. 2/2/4"))
    if sn.instance_type in INSTANCE_TYPES:
        add(problem("system_nodes.instance_type", sn.instance_type,
                    "the system node group is for CPU work, not a GPU instance type",
                    f"use a general-purpose type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
    if not SYSTEM_ROOT_VOLUME_MIN_GIB <= sn.root_volume_gib <= 16384:
        add(problem("system_nodes.root_volume_gib", sn.root_volume_gib,
                    f"must be {SYSTEM_ROOT_VOLUME_MIN_GIB} to 16384 GiB: the AMI, the add-ons' "
                    "images and the container logs share it",
                    f"use e.g. {DEFAULT_SYSTEM_ROOT_VOLUME_GIB}"))

    if not cfg.gpu_node_groups:
        add(problem("gpu_node_groups", {}, "at least one GPU node group is required",
                    "add a group, e.g. p5: {instance_type: p5.48xlarge, availability_zone: ...}"))
    for name, g in cfg.gpu_node_groups.items():
        _validate_gpu_group(cfg, name, g, add)

    capacity_block_problems(cfg, add)

    total_max = sum(g.max_size for g in cfg.gpu_node_groups.values())
    cg = cfg.cost_guard
    if cg.max_gpu_nodes is not None and total_max > cg.max_gpu_nodes:
        add(problem("cost_guard.max_gpu_nodes", cg.max_gpu_nodes,
                    f"the GPU node groups can scale to {total_max} nodes in all (sum of max_size)",
                    f"lower max_size of the groups or raise max_gpu_nodes to {total_max}"))
    if cg.ttl_hours is not None and cg.ttl_hours < 1:
        add(problem("cost_guard.ttl_hours", cg.ttl_hours, "must be at least 1", "set 1 or more"))
    if cfg.ephemeral and cg.ttl_hours is None:
        add(problem("cost_guard.ttl_hours", None,
                    "an ephemeral environment must carry a time-to-live tag",
                    "set cost_guard.ttl_hours, e.g. 6"))
    if cfg.ephemeral and cg.max_gpu_nodes is None:
        add(problem("cost_guard.max_gpu_nodes", None,
                    "an ephemeral environment must cap its GPU node count",
                    f"set cost_guard.max_gpu_nodes, e.g. {max(total_max, 1)}"))
    if cfg.storage.noncurrent_version_days < 1:
        add(problem("storage.noncurrent_version_days", cfg.storage.noncurrent_version_days,
                    "must be at least 1", "set a number of days such as 30"))
    for path, days in (("image_build.log_retention_days", cfg.image_build.log_retention_days),
                       ("observability.log_retention_days", cfg.observability.log_retention_days)):
        if days not in LOG_RETENTION_DAYS:
            above = [d for d in LOG_RETENTION_DAYS if d >= days] or [LOG_RETENTION_DAYS[-1]]
            add(problem(path, days, "not a CloudWatch Logs retention period "
                        f"({', '.join(str(d) for d in LOG_RETENTION_DAYS)})",
                        f"use one of those, e.g. {above[0]}"))
    pinned = cfg.observability.addon_version
    if pinned is not None and not re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.\d+", pinned):
        add(problem("observability.addon_version", pinned,
                    "not an EKS add-on build (vMAJOR.MINOR.PATCH-eksbuild.N)",
                    "copy one from `aws eks describe-addon-versions --addon-name "
                    "amazon-cloudwatch-observability`, or leave it empty for EKS's default"))

    for name in AddonsConfig.model_fields:
        addon = getattr(cfg.addons, name)
        record = addons_registry.addon(name)
        if addon.version is not None and addon.version not in record.versions:
            add(problem(f"addons.{name}.version", addon.version,
                        f"not a version the kit knows for chart {record.chart} "
                        f"({', '.join(record.versions)})",
                        f"use one of those, or add the version to `tested` in "
                        f"infra/addons/{name}.py once the chart contract test passes for it"))
        elif cfg.addon_enabled(name):
            _addon_kubernetes_floor(cfg, name, record, add)

    _validate_training(cfg, add)
    _validate_shared_filesystem(cfg, add)
    validate_values(cfg, add)
    p += trainer_problems(cfg, p)
    return p


def _addon_kubernetes_floor(cfg: KitConfig, name: str, record, add) -> None:
    """An enabled add-on's chart version runs on this Kubernetes version (its record's floor)."""
    entry = record.tested_version(cfg.addons.chart_version(name))
    floor = entry.min_kubernetes_version
    if floor and kubernetes_minor(cfg.kubernetes_version) < kubernetes_minor(floor):
        add(problem("kubernetes_version", cfg.kubernetes_version,
                    f"add-on {name} (chart {record.chart} {entry.version}, on for this config) "
                    f"needs Kubernetes {floor} or later ({entry.min_kubernetes_source})",
                    f"set kubernetes_version to {floor} or later"))


def _validate_shared_filesystem(cfg: KitConfig, add) -> None:
    fs = cfg.storage.shared_filesystem
    path = "storage.shared_filesystem"
    t = cfg.training
    if fs.type == "none":
        if t.nodes > 1:
            add(problem(f"{path}.type", "none",
                        f"a multi-node run (training.nodes = {t.nodes}) needs a file system that "
                        "the Ray head, every worker and the job submitter share: the launcher "
                        "runs on the head and must see the workers' saves and inputs",
                        "set storage.shared_filesystem.type: fsx-lustre (the default), or "
                        "training.nodes: 1"))
        if t.hf_checkpoint.startswith(names.SHARED_FS_MOUNT_PATH + "/"):
            add(problem("training.hf_checkpoint", t.hf_checkpoint,
                        f"{names.SHARED_FS_MOUNT_PATH} is the shared file system's mount, and "
                        "storage.shared_filesystem.type is none",
                        "use a path in the image or an s3:// URI in the data bucket, or set "
                        "storage.shared_filesystem.type: fsx-lustre"))
        return
    if fs.throughput_mb_s_per_tib not in SHARED_FS_THROUGHPUTS:
        add(problem(f"{path}.throughput_mb_s_per_tib", fs.throughput_mb_s_per_tib,
                    "FSx for Lustre PERSISTENT_2 offers "
                    f"{', '.join(map(str, SHARED_FS_THROUGHPUTS))} MB/s per TiB",
                    "use one of those, e.g. 250"))
    cap = fs.capacity_gib
    if cap != SHARED_FS_MIN_CAPACITY_GIB and (cap < SHARED_FS_CAPACITY_STEP_GIB
                                              or cap % SHARED_FS_CAPACITY_STEP_GIB):
        add(problem(f"{path}.capacity_gib", cap,
                    f"FSx for Lustre PERSISTENT_2 capacity is {SHARED_FS_MIN_CAPACITY_GIB} GiB or "
                    f"a multiple of {SHARED_FS_CAPACITY_STEP_GIB} GiB",
                    f"use {valid_shared_fs_capacity_gib(max(cap, 1))}, the next valid size"))
        return
    keep = t.checkpoint.keep_local
    need = shared_fs_required_gib(t.model, keep) if keep >= 1 else None
    if need is not None and cap < need:
        kept = ("the newest complete save stays" if keep == 1 else
                f"the newest {keep} complete saves stay (training.checkpoint.keep_local)")
        fix = f"set capacity_gib: {valid_shared_fs_capacity_gib(need)}"
        if keep > 1:
            fix += f", or keep fewer saves (training.checkpoint.keep_local: {keep - 1} needs " \
                   f"{shared_fs_required_gib(t.model, keep - 1)} GiB)"
        add(problem(f"{path}.capacity_gib", cap,
                    f"too small for {t.model}: its reference weights plus {checkpoints_phrase(keep)} "
                    f"(weights + optimizer state; {kept} while the next is written) take {need} GiB",
                    fix))
    elif isinstance(lag := save_period_check(cfg), Problem):  # saves made faster than uploaded
        add(lag)



def _validate_ami_release(cfg: KitConfig, release: str, add) -> None:
    """The node AMI release is one of the cluster's Kubernetes version, and no older than the
    release any group's instance type needs (catalog ``min_ami_release``)."""
    read = EKS_AMI_RELEASES_READ[cfg.kubernetes_version]
    m = AMI_RELEASE_RE.fullmatch(release)
    if m is None:
        add(problem("node_ami_release_version", release,
                    "not an EKS AMI release version (<Kubernetes x.y.z>-<YYYYMMDD>, as the EKS AMI "
                    "release notes list them)",
                    f"use one like {read}, or remove it to let EKS choose"))
        return
    if m.group(1) != cfg.kubernetes_version:
        add(problem("node_ami_release_version", release,
                    f"a release for Kubernetes {m.group(1)}, but the node groups run the cluster's "
                    f"kubernetes_version {cfg.kubernetes_version}",
                    f"use a {cfg.kubernetes_version} release, such as {read}"))
        return
    for name, g in cfg.gpu_node_groups.items():
        itype = INSTANCE_TYPES.get(g.instance_type)
        if itype is not None and itype.min_ami_release and \
                m.group(3) < itype.min_ami_release.removeprefix("v"):
            add(problem("node_ami_release_version", release,
                        f"group {name} ({itype.name}) needs EKS AMI release "
                        f"{itype.min_ami_release} or later (catalog min_ami_release)",
                        f"use a release from {itype.min_ami_release} or later, such as {read}"))


def _validate_endpoint(cfg: KitConfig, add) -> None:
    e = cfg.endpoint_access
    if e.mode == "public-and-private" and not e.public_cidrs:
        add(problem("endpoint_access.public_cidrs", [], "a public endpoint needs the CIDRs allowed "
                    "to reach it; the kit never opens it to everyone by default",
                    "list your office or CI egress ranges, e.g. [203.0.113.0/24], or use "
                    "mode: private"))
    if e.mode == "private" and e.public_cidrs:
        add(problem("endpoint_access.public_cidrs", e.public_cidrs,
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
        elif not VPC_PREFIX_RANGE[0] <= ipaddress.ip_network(v.cidr).prefixlen <= VPC_PREFIX_RANGE[1]:
            add(problem("vpc.cidr", v.cidr, "prefix length must be /16 to /18 so every AZ gets a "
                        "large private subnet for GPU pods", "use e.g. 10.0.0.0/16"))
        if not 1 <= v.nat_gateways <= len(cfg.availability_zones):
            add(problem("vpc.nat_gateways", v.nat_gateways,
                        f"must be between 1 and the number of AZs ({len(cfg.availability_zones)})",
                        "use 1 for cost, or one per AZ for resilience"))
        return
    e = v.existing
    if not _VPC_RE.fullmatch(e.vpc_id):
        add(problem("vpc.existing.vpc_id", e.vpc_id, "not a VPC ID", "use vpc-0123456789abcdef0"))
    for kind in ("private_subnet_ids", "public_subnet_ids"):
        subnets = getattr(e, kind)
        # A Local Zone's GPU nodes launch into its private subnet (local_zone_problems asks for
        # one; stacks/gpu_stack.py reads it); public subnets serve the regional AZs only.
        zones = cfg.availability_zones + (cfg.local_zones if kind == "private_subnet_ids" else [])
        for az, sid in subnets.items():
            if az in cfg.local_zones and az not in zones:
                add(problem(f"vpc.existing.{kind}.{az}", sid, "a Local Zone takes no public "
                            "subnet in the kit (its NAT gateways sit in the regional AZs)",
                            "remove this subnet"))
            elif az not in zones and not default_zones_elsewhere(cfg):
                add(problem(f"vpc.existing.{kind}.{az}", sid,
                            f"AZ {az} is not in availability_zones {cfg.availability_zones}"
                            + (f" or local_zones {cfg.local_zones}" if zones != cfg.availability_zones
                               else ""),
                            "add the zone to availability_zones (or local_zones) or remove this "
                            "subnet"))
            if not _SUBNET_RE.fullmatch(sid):
                add(problem(f"vpc.existing.{kind}.{az}", sid, "not a subnet ID",
                            "use subnet-0123456789abcdef0"))
    missing = [az for az in cfg.availability_zones if az not in e.private_subnet_ids]
    if missing and not default_zones_elsewhere(cfg):  # availability_zones' problem says it
        add(problem("vpc.existing.private_subnet_ids", e.private_subnet_ids,
                    f"no private subnet for AZ(s) {', '.join(missing)}",
                    "give one private subnet ID for every AZ in availability_zones"))


def _validate_gpu_group(cfg: KitConfig, name: str, g: GpuNodeGroupConfig, add) -> None:
    path = f"gpu_node_groups.{name}"
    if not _GROUP_RE.fullmatch(name):
        add(problem(path, name, "group names must be 1-20 characters: lowercase letters, digits "
                    "and '-', starting with a letter", "rename the group, e.g. 'p5'"))
    if g.instance_type in UNSUPPORTED_INSTANCE_TYPES:
        add(problem(f"{path}.instance_type", g.instance_type,
                    f"not supported yet: {UNSUPPORTED_INSTANCE_TYPES[g.instance_type]}",
                    f"use one of {', '.join(INSTANCE_TYPES)}"))
    elif g.instance_type not in INSTANCE_TYPES:
        add(problem(f"{path}.instance_type", g.instance_type,
                    "not in the kit's instance catalog",
                    f"use one of {', '.join(INSTANCE_TYPES)}"))
    elif (gpu := INSTANCE_TYPES[g.instance_type].gpu_model) not in GPUS:
        # A catalog entry added without its GPU's record: nothing could size or build for it.
        add(problem(f"{path}.instance_type", g.instance_type,
                    f"its catalog entry names GPU model {gpu!r}, which has no record in the GPU "
                    f"catalog (infra/catalog/gpus.py knows {', '.join(GPUS)})",
                    f"add a GpuSpec for {gpu} to GPUS in infra/catalog/gpus.py"))
    if g.instance_type in INSTANCE_TYPES:
        ultraserver_group_problems(cfg, path, g, INSTANCE_TYPES[g.instance_type], add)
    if g.min_size < 0 or g.max_size < 1 or not g.min_size <= g.desired_size <= g.max_size:
        add(problem(path, {"min_size": g.min_size, "desired_size": g.desired_size,
                           "max_size": g.max_size},
                    "sizes must satisfy 0 <= min_size <= desired_size <= max_size and max_size >= 1",
                    f"e.g. min_size: 0, desired_size: {max(g.desired_size, 1)}, "
                    f"max_size: {max(g.desired_size, g.max_size, 1)}"))
    if g.availability_zone not in cfg.availability_zones + cfg.local_zones and \
            not default_zones_elsewhere(cfg):  # the zones' own problem says what to list
        add(problem(f"{path}.availability_zone", g.availability_zone,
                    f"not among the VPC's AZs {cfg.availability_zones}"
                    + (f" or Local Zones {cfg.local_zones}" if cfg.local_zones else ""),
                    "use one of availability_zones (or local_zones), or add this AZ there"))
    cap = g.capacity
    if cap.type in ("capacity-block", "odcr"):
        if cap.reservation_id is None:
            add(problem(f"{path}.capacity.reservation_id", None,
                        f"capacity type {cap.type} needs the reservation it launches into",
                        "set reservation_id to the cr-... ID from the EC2 console or "
                        "`aws ec2 describe-capacity-reservations`"))
        elif not _RESERVATION_RE.fullmatch(cap.reservation_id):
            add(problem(f"{path}.capacity.reservation_id", cap.reservation_id,
                        "not a capacity reservation ID", "use cr- followed by 17 hex digits"))
    elif cap.reservation_id is not None:
        add(problem(f"{path}.capacity.reservation_id", cap.reservation_id,
                    "on-demand groups do not use a reservation",
                    "remove reservation_id or set capacity.type to odcr or capacity-block"))
    if not 50 <= g.root_volume_gib <= 16384:
        add(problem(f"{path}.root_volume_gib", g.root_volume_gib,
                    "must be 50 to 16384 GiB (the NVIDIA AMI and images need room)",
                    "use e.g. 200"))
    if g.placement_group_name is not None:
        if g.placement_group:
            add(problem(f"{path}.placement_group", True,
                        "placement_group: true creates a new group, placement_group_name selects an "
                        "existing one; a node group launches into one",
                        "remove placement_group (or placement_group_name)"))
        if not _PLACEMENT_GROUP_RE.fullmatch(g.placement_group_name):
            add(problem(f"{path}.placement_group_name", g.placement_group_name,
                        "not a placement group name (1-255 ASCII characters, no spaces)",
                        "use the name shown by `aws ec2 describe-placement-groups`"))
    for key, value in g.labels.items():
        if key.startswith(names.LABEL_PREFIX + "/"):
            add(problem(f"{path}.labels.{key}", value, f"the {names.LABEL_PREFIX}/ prefix is "
                        "reserved for labels the kit sets", "use another prefix"))
        elif not LABEL_KEY_RE.fullmatch(key) or not LABEL_VALUE_RE.fullmatch(value):
            add(problem(f"{path}.labels.{key}", value, "not a valid Kubernetes label",
                        "keys are [prefix/]name of up to 63 characters; values up to 63 "
                        "alphanumerics, '-', '_' or '.'"))
    for i, t in enumerate(g.taints):
        if t.key in (names.GPU_TAINT.key, names.FSX_AGENT_NOT_READY_TAINT.key):
            add(problem(f"{path}.taints[{i}].key", t.key,
                        "the kit already sets this taint on every GPU node",
                        "remove this taint"))


def _validate_training(cfg: KitConfig, add) -> None:
    t = cfg.training
    if t.model not in MODEL_CATALOG:
        # Sizing, the trainer's layout rules and the fabric benchmark's shape all read the
        # catalog entry: a model without one used to pass here and fail at render.
        close = close_match(t.model, MODEL_CATALOG)
        known = ", ".join(MODEL_CATALOG)
        add(problem("training.model", t.model,
                    "not a model in the catalog (infra/catalog/models.py MODEL_CATALOG)",
                    f"did you mean {close!r}? The catalog has {known}" if close else
                    f"use one of {known}, or add the model's config.json values to "
                    "MODEL_CATALOG in infra/catalog/models.py"))
    if not _DNS_LABEL_RE.fullmatch(t.run_name) or len(t.run_name) > 40:
        add(problem("training.run_name", t.run_name,
                    "must be a DNS label of at most 40 characters (it names Kubernetes objects)",
                    "use lowercase letters, digits and '-'"))
    group = cfg.gpu_node_groups.get(t.node_group)
    if group is None:
        add(problem("training.node_group", t.node_group, "no GPU node group has this name",
                    f"use one of {', '.join(cfg.gpu_node_groups) or '(none configured)'}"))
        return
    if not 1 <= t.nodes <= group.max_size:
        add(problem("training.nodes", t.nodes,
                    f"must be 1 to the group's max_size ({group.max_size})",
                    f"lower training.nodes or raise gpu_node_groups.{t.node_group}.max_size"))
    itype = INSTANCE_TYPES.get(group.instance_type)
    if itype is None:
        return  # already reported on the group
    # How the GPUs divide among tp, pp, cp, ep and the rollout engines, and Miles' batch invariant,
    # are the trainer's rules: trainer_problems reports them with these fields' paths.
    par = t.parallel
    for field in ("tp", "pp", "cp", "ep", "etp"):
        if getattr(par, field) < 1:
            add(problem(f"training.parallel.{field}", getattr(par, field), "must be at least 1",
                        "use 1 to disable this kind of parallelism"))
    if min(par.tp, par.pp, par.cp, par.ep, par.etp) < 1:
        return
    if par.tp > itype.gpu_count:
        add(problem("training.parallel.tp", par.tp,
                    f"tensor parallelism must stay inside one node ({itype.gpu_count} GPUs)",
                    f"use tp <= {itype.gpu_count}"))
    if par.vpp is not None and par.vpp > 1:
        # the trainer's run config has no virtual-pipeline size (infra/config/run_config.py), so
        # the launcher never passes one and Megatron runs vpp 1 (`rlkit plan` plans vpp 1 too)
        add(problem("training.parallel.vpp", par.vpp,
                    "the kit's launcher runs no interleaved pipeline: the trainer's run config has "
                    "no virtual-pipeline size, so Megatron would run vpp 1 and this value would be "
                    "ignored", "remove vpp (or set it to null)"))
    elif par.vpp is not None and (par.vpp < 1 or par.pp == 1):
        add(problem("training.parallel.vpp", par.vpp,
                    "virtual pipeline stages need pp > 1 and vpp >= 1",
                    "remove vpp or raise pp"))

    _validate_rollout_mode(cfg, add)

    ep = t.expert_parallel
    if ep.backend not in EP_BACKENDS:
        add(problem("training.expert_parallel.backend", ep.backend,
                    "unknown expert-parallel backend", f"use one of {', '.join(EP_BACKENDS)}"))
    if ep.gin_mode is not None and ep.backend != "deepep-gin":
        add(problem("training.expert_parallel.gin_mode", ep.gin_mode,
                    "gin_mode applies only to the deepep-gin backend",
                    "remove gin_mode or set backend: deepep-gin"))
    ultraserver_training_problems(cfg, group, itype, add)
    if ep.backend == "deepep-gin" and ep.gin_mode == "gpu" and not itype.gin_gpu:
        gin = gin_gpu_types()
        add(problem("training.expert_parallel.gin_mode", "gpu",
                    f"GPU-initiated NCCL GIN runs only on {gin}, not {itype.name}",
                    f"set gin_mode: proxy (CPU proxy) or use a node group of {gin}"))

    if not 0 <= t.backoff_limit <= MAX_BACKOFF_LIMIT:
        add(problem("training.backoff_limit", t.backoff_limit,
                    f"must be 0 to {MAX_BACKOFF_LIMIT} (each retry starts a new Ray cluster on the GPU "
                    "nodes)", "use a small number such as 2; 0 turns retries off"))
    if t.start_deadline_minutes != 0 and not (
            MIN_START_DEADLINE_MINUTES <= t.start_deadline_minutes <= MAX_START_DEADLINE_MINUTES):
        add(problem("training.start_deadline_minutes", t.start_deadline_minutes,
                    f"must be 0 (no deadline) or {MIN_START_DEADLINE_MINUTES} to "
                    f"{MAX_START_DEADLINE_MINUTES} minutes (pulling the trainer image onto fresh GPU "
                    "nodes takes minutes)", "use the default, 60, or 0 for no deadline"))
    for name in ("startup_minutes", "rollout_minutes", "save_upload_minutes"):
        value = getattr(t, name)
        if value is not None and not value > 0:  # startup/save_upload unset: the kit's estimate
            add(problem(f"training.{name}", value, "must be more than 0 minutes",
                        "set an estimate from an earlier run (the launcher logs what it measures)"))



def _validate_rollout_mode(cfg: KitConfig, add) -> None:
    """training.rollout's placement, pool and overlap: the combinations Miles v0.1.0 runs.
    train_async.py:23 refuses --colocate, and so does --fully-async (miles/utils/arguments.py:59);
    a disaggregated pool is the GPUs after the training ones (miles/ray/placement_group.py:105)."""
    t = cfg.training
    r = t.rollout
    group = f"gpu_node_groups.{t.node_group}.max_size"
    if r.placement == "colocated" and r.nodes is not None:
        add(problem("training.rollout.nodes", r.nodes,
                    "a colocated rollout runs on the training GPUs and has no pool of its own",
                    "remove training.rollout.nodes, or set training.rollout.placement: disaggregated"))
    elif r.placement == "disaggregated":
        if r.nodes is None or r.nodes < 1:
            add(problem("training.rollout.nodes", r.nodes,
                        "a disaggregated rollout needs a pool of at least 1 of the run's nodes",
                        f"set training.rollout.nodes to {_one_to(t.nodes - 1)} (the rest of "
                        f"training.nodes = {t.nodes} train), e.g. from `rlkit plan --rl "
                        "--write-config`"))
        elif r.nodes >= t.nodes:
            add(problem("training.rollout.nodes", r.nodes,
                        f"the rollout pool is part of training.nodes ({t.nodes}) and at least one "
                        "node must train",
                        (f"use {_one_to(t.nodes - 1)}, or " if t.nodes > 1 else "")
                        + f"raise training.nodes (up to {group})"))
    if r.overlap != "none" and r.placement == "colocated":
        add(problem("training.rollout.overlap", r.overlap,
                    "an overlapped rollout needs GPUs of its own: Miles' train_async.py refuses "
                    "--colocate", "set training.rollout.placement: disaggregated with "
                    "training.rollout.nodes, or overlap: none"))
    if r.off_policy_steps < 0 or (r.overlap == "none" and r.off_policy_steps):
        add(problem("training.rollout.off_policy_steps", r.off_policy_steps,
                    "must be 0 without overlap (generation can run ahead only while it overlaps "
                    "training)", "set training.rollout.overlap to batch or stream, or "
                    "off_policy_steps to 0"))
    elif r.overlap != "none" and r.off_policy_steps < 1:
        add(problem("training.rollout.off_policy_steps", r.off_policy_steps,
                    f"overlap {r.overlap} runs generation at least one optimizer step ahead",
                    "set off_policy_steps to 1 or more"))


def _one_to(n: int) -> str:
    return "1" if n <= 1 else f"1 to {n}"

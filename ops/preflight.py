"""Read-only checks that catch expensive mistakes before `cdk deploy` asks for GPU nodes.

Each check is a plain function taking the boto3 clients it needs (so tests pass moto-backed or
Stubber-wrapped ones), or, where other checks need the same answer, the run's
``ops.preflight_reads.PreflightReads`` (its clients, and each stack, node group and reservation
read once for every check), and returning ``Check`` results: pass, warn or fail, with the fix for
anything that is not a pass. ``run_preflight`` runs them all for one config. Nothing here
creates, changes or deletes an AWS resource.
"""

from __future__ import annotations

import importlib.metadata
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable

from infra import names
from infra.cdk_cli import cdk_command
from infra.catalog import INSTANCE_TYPES, P_ON_DEMAND_QUOTA_CODE, P_ON_DEMAND_QUOTA_NAME
from infra.config import GpuNodeGroupConfig, KitConfig, config_warnings
from infra.problems import FAIL, PASS, WARN
from infra.versions import (
    AL2023_NVIDIA_DRIVER_BRANCH,
    KUBERNETES_VERSIONS,
    TRAINER_IMAGE_CUDA_MAJOR,
    TRAINER_IMAGE_MIN_DRIVER_BRANCH,
    standard_support_warning,
)
from ops import ultraserver_preflight
from ops.aws import AWS_ERRORS, CREDENTIALS_FIX, AwsClients, describe_error
from ops.check_result import Check
from ops.preflight_observability import check_gpu_metrics
from ops.preflight_reads import PreflightReads, list_prefixed_stacks, not_deployed
from ops.preflight_replace import replacement_checks
from ops.preflight_reservation import (
    check_reservation, check_shared_reservations, group_subject as _group_subject)
from ops.preflight_services import offline_service_checks, service_checks
from ops.preflight_stacks import (LEFT_OUT, app_stack_names, check_log_groups_outside_stack,
                                  check_stacks_left_out)
from ops.preflight_upgrade import upgrade_checks
from ops.preflight_vpc import vpc_checks

# Stack states CloudFormation cannot update: deleted first, except UPDATE_ROLLBACK_FAILED, whose
# rollback can be continued (_ROLLBACK_TO_CONTINUE).
_STUCK_STACK_STATES = {"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED",
                       "UPDATE_ROLLBACK_FAILED"}


# --- identity ------------------------------------------------------------------------------------


def check_identity(sts: Any, cfg: KitConfig, region: str) -> Check:
    """Credentials work (STS GetCallerIdentity) and belong to the config's account, if it names one."""
    try:
        ident = sts.get_caller_identity()
    except AWS_ERRORS as err:
        return Check("credentials", "account", FAIL,
                     f"{describe_error(err)} (region {region})", CREDENTIALS_FIX)
    account, arn = ident.get("Account", "?"), ident.get("Arn", "?")
    if cfg.account is not None and cfg.account != account:
        return Check("credentials", "account", FAIL,
                     f"credentials are for account {account} ({arn}) but the config's account is "
                     f"{cfg.account}",
                     f"switch to credentials for account {cfg.account} (e.g. another AWS_PROFILE), "
                     "or correct `account` in the config")
    return Check("credentials", "account", PASS, f"account {account} as {arn}, region {region}")


# --- instance type offered in the AZ -------------------------------------------------------------


def check_offering(reads: PreflightReads, group_name: str, group: GpuNodeGroupConfig,
                   region: str) -> Check:
    """The group's instance type is offered in its AZ (DescribeInstanceTypeOfferings, read once
    per instance type for all the groups)."""
    subject, itype, az = _group_subject(group_name), group.instance_type, group.availability_zone
    name = "instance type offered"
    try:
        zones = reads.offered_zones(itype)
    except AWS_ERRORS as err:
        return Check(name, subject, FAIL, describe_error(err),
                     "allow ec2:DescribeInstanceTypeOfferings for your credentials")
    if az in zones:
        return Check(name, subject, PASS, f"{itype} is offered in {az}")
    elsewhere = ", ".join(zones) if zones else f"no AZ of {region}"
    if group.capacity.type != "on-demand":
        # Reserved capacity can exist where on-demand is not listed; the reservation check decides.
        return Check(name, subject, WARN,
                     f"{itype} is not listed as offered in {az} (offered in: {elsewhere}); your "
                     f"{group.capacity.type} reservation is what counts, see the reservation checks",
                     "nothing to do if the reservation checks pass")
    fix = (f"set {subject}.availability_zone to one of {elsewhere} (and add it to "
           "availability_zones)" if zones else
           f"deploy to a region that offers {itype}, or use a capacity block / ODCR")
    return Check(name, subject, FAIL, f"{itype} is not offered in {az}; offered in: {elsewhere}",
                 fix)


# --- on-demand vCPU quota ------------------------------------------------------------------------


def check_quota(quotas: Any, cfg: KitConfig, region: str) -> Check:
    """On-demand P-instance vCPU quota covers the on-demand groups' nodes x vCPUs."""
    name, subject = "on-demand P vCPU quota", f"{P_ON_DEMAND_QUOTA_CODE} ({region})"
    on_demand = {n: g for n, g in cfg.gpu_node_groups.items()
                 if g.capacity.type == "on-demand"
                 and INSTANCE_TYPES[g.instance_type].quota_code == P_ON_DEMAND_QUOTA_CODE}
    if not on_demand:
        return Check(name, subject, PASS, "no on-demand P-instance groups: reservations do not "
                     "count against this quota")
    desired = sum(g.desired_size * INSTANCE_TYPES[g.instance_type].vcpus for g in on_demand.values())
    maximum = sum(g.max_size * INSTANCE_TYPES[g.instance_type].vcpus for g in on_demand.values())
    request = (f"request an increase to at least {{n}} vCPUs: aws service-quotas "
               f"request-service-quota-increase --service-code ec2 --quota-code "
               f"{P_ON_DEMAND_QUOTA_CODE} --desired-value {{n}} --region {region}")
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=P_ON_DEMAND_QUOTA_CODE)[
            "Quota"]["Value"]
    except AWS_ERRORS as err:
        return Check(name, subject, WARN, f"could not read the quota: {describe_error(err)}",
                     "allow servicequotas:GetServiceQuota, or check the quota "
                     f"'{P_ON_DEMAND_QUOTA_NAME}' in the Service Quotas console")
    value = int(value)
    groups = ", ".join(f"{n}: {g.desired_size} desired / {g.max_size} max x {g.instance_type} "
                       f"({INSTANCE_TYPES[g.instance_type].vcpus} vCPUs each)"
                       for n, g in on_demand.items())
    if value < desired:
        return Check(name, subject, FAIL,
                     f"quota {value} vCPUs < {desired} vCPUs the desired nodes need "
                     f"({groups})", request.format(n=maximum))
    if value < maximum:
        return Check(name, subject, WARN,
                     f"quota {value} vCPUs covers the desired {desired} but not max_size "
                     f"({maximum} vCPUs; {groups})", request.format(n=maximum))
    return Check(name, subject, PASS,
                 f"quota {value} vCPUs >= {maximum} vCPUs at max_size ({groups}); instances "
                 "already running in the region count against it too")


def check_placement(group_name: str, group: GpuNodeGroupConfig) -> Check:
    """A cluster placement group forced onto a reservation can starve it (eksctl issue 7949)."""
    subject = _group_subject(group_name)
    wanted = group.uses_placement_group or group.placement_group_name is not None
    if group.capacity.type == "capacity-block" and wanted:
        # A Capacity Block is bought with no placement group (EC2 API PurchaseCapacityBlock takes
        # only the offering ID, platform and tags; botocore 1.44.8), so none is the block's own.
        return Check("placement group", subject, WARN,
                     "a placement group is requested for a Capacity Block group; a block is bought "
                     "without one (EC2 PurchaseCapacityBlock takes none), and a placement group "
                     "can limit how many reserved instances launch (eksctl-io/eksctl issue 7949)",
                     f"remove {subject}.placement_group and {subject}.placement_group_name")
    if group.capacity.type != "on-demand" and group.uses_placement_group:
        return Check("placement group", subject, WARN,
                     f"a cluster placement group is requested together with a {group.capacity.type} "
                     "reservation; a placement group the reservation was not made in can limit how "
                     "many reserved instances launch (eksctl-io/eksctl issue 7949)",
                     f"remove {subject}.placement_group, or set {subject}.placement_group_name to "
                     "the placement group the reservation was created in")
    if group.placement_group_name:
        return Check("placement group", subject, PASS,
                     f"existing placement group {group.placement_group_name}")
    where = "on" if group.uses_placement_group else "off"
    return Check("placement group", subject, PASS, f"new cluster placement group {where}")


def check_instance_facts(group_name: str, group: GpuNodeGroupConfig) -> Check:
    """The catalog facts the launch template and the pods are built from (GPU and EFA counts,
    which network cards carry EFA) are verified for this instance type, or the user hears it."""
    subject, itype = _group_subject(group_name), INSTANCE_TYPES[group.instance_type]
    if not itype.facts_verified:
        return Check("instance facts", subject, WARN,
                     f"the catalog's facts for {itype.name} are not verified: {itype.note}",
                     "after deploying, run `rlkit gate`: its node check compares each node's "
                     "allocatable vpc.amazonaws.com/efa and GPUs with what the pods request")
    return Check("instance facts", subject, PASS,
                 f"{itype.name}: {itype.gpu_count} GPUs, {itype.efa_devices} EFA on "
                 f"{itype.network_cards} network cards (verified catalog entry)")


# --- no update while a Capacity Block's nodes run ---------------------------------------------------

CAPACITY_BLOCK_UPDATE = "capacity block update"
_UPDATE_RULE = ("EKS updates a Capacity Block node group only at desired size 0 [EKS user guide, "
                "capacity-blocks-mng]")


def scale_command(cfg: KitConfig, group: GpuNodeGroupConfig, cluster: str, nodegroup: str,
                  desired: int, deployed_min: int | None = None) -> str:
    """The CLI command that sets the node group's desired size. A minSize above the target is
    lowered with it: minSize is "the minimum number of nodes that the managed node group can
    scale in to" (EKS API, NodegroupScalingConfig, in botocore's eks model). It is the deployed
    group's minSize (EKS DescribeNodegroup) that counts, when known; the config's may not be
    deployed yet, and CLI scaling changes the group outside the template."""
    min_size = group.min_size if deployed_min is None else deployed_min
    scaling = f"desiredSize={desired}" if desired or min_size == 0 else \
        "minSize=0,desiredSize=0"
    return (f"aws eks update-nodegroup-config --cluster-name {cluster} --nodegroup-name "
            f"{nodegroup} --scaling-config {scaling} --region {cfg.region}")


def check_capacity_block_update_offline(group_name: str, group: GpuNodeGroupConfig) -> Check | None:
    """`rlkit check` reads no AWS: it names the rule, and `rlkit preflight` applies it."""
    if group.capacity.type != "capacity-block":
        return None
    return Check(CAPACITY_BLOCK_UPDATE, _group_subject(group_name), PASS,
                 f"{_UPDATE_RULE}; `rlkit preflight` reads the deployed group and refuses a deploy "
                 "while its nodes run")


def _stack_outputs(reads: PreflightReads, stack: str) -> dict[str, str] | None:
    """A stack's outputs (None: no such stack)."""
    try:
        return reads.stack_outputs(stack)
    except AWS_ERRORS as err:
        if not_deployed(err):
            return None
        raise


def check_capacity_block_update(reads: PreflightReads, cfg: KitConfig, group_name: str,
                                group: GpuNodeGroupConfig) -> Check | None:
    """A deploy must not roll a Capacity Block group while its nodes run: the deployed group's
    desired size (EKS DescribeNodegroup) must be 0. None for other capacity types."""
    if group.capacity.type != "capacity-block":
        return None
    subject, stack = _group_subject(group_name), names.gpu_stack_name(cfg.name, group_name)
    try:
        gpu = _stack_outputs(reads, stack)
        if gpu is None:
            return Check(CAPACITY_BLOCK_UPDATE, subject, PASS,
                         f"{stack} is not deployed: the first deploy creates the group")
        cluster_outputs = _stack_outputs(reads, names.stack_names(cfg.name)["cluster"]) or {}
        nodegroup = gpu.get(names.OutputKeys.NODEGROUP_NAME)
        cluster = cluster_outputs.get(names.OutputKeys.CLUSTER_NAME)
        if not nodegroup or not cluster:
            return Check(CAPACITY_BLOCK_UPDATE, subject, WARN,
                         f"cannot tell whether the block's nodes run: {stack} or the cluster stack "
                         "has no node group or cluster name output",
                         "deploy the cluster stack first; then run preflight again")
        scaling = reads.nodegroup(cluster, nodegroup).get("scalingConfig", {})
    except AWS_ERRORS as err:
        return Check(CAPACITY_BLOCK_UPDATE, subject, WARN,
                     f"cannot tell whether the block's nodes run: {describe_error(err)}",
                     "allow cloudformation:DescribeStacks and eks:DescribeNodegroup, then run "
                     "preflight again before deploying the GPU stack")
    desired = int(scaling.get("desiredSize", 0) or 0)
    deployed_min = scaling.get("minSize")  # None when EKS gives none: the config's then
    if desired == 0:
        return Check(CAPACITY_BLOCK_UPDATE, subject, PASS,
                     f"node group {nodegroup} is at desired size 0: a deploy may update it")
    down = scale_command(cfg, group, cluster, nodegroup, 0, deployed_min)
    up = scale_command(cfg, group, cluster, nodegroup, desired, deployed_min)
    return Check(
        CAPACITY_BLOCK_UPDATE, subject, FAIL,
        f"node group {nodegroup} runs at desired size {desired}; {_UPDATE_RULE}, so a deploy that "
        f"changes its launch template or node group in {stack} rolls nodes the block cannot "
        "replace, under the running job",
        "while the block's nodes run, deploy the other stacks only (`"
        f"{cdk_command('deploy', '--exclusively', f'<every stack but {stack}>')}`); to update this group, stop the run (its last save is "
        f"in S3), scale to 0 with `{down}`, deploy, and scale back up with `{up}` "
        "(docs/operations.md, \"A reservation's end\")")


def offline_checks(cfg: KitConfig, installed: Callable[[str], bool] | None = None,
                   today: date | None = None) -> list[Check]:
    """The checks that need no AWS call: Kubernetes version and support window, cluster access,
    placement, instance facts and GPU metrics per GPU node group (`rlkit check` runs these
    too)."""
    checks = [check_kubernetes_version(cfg, installed, today), check_gpu_driver(cfg),
              check_admin_access(cfg)]
    for n, g in cfg.gpu_node_groups.items():
        checks += [check_placement(n, g), check_instance_facts(n, g)]
        update = check_capacity_block_update_offline(n, g)
        if update is not None:
            checks.append(update)
    return checks + check_gpu_metrics(cfg) + offline_service_checks(cfg)


def check_kubernetes_version(cfg: KitConfig,
                             installed: Callable[[str], bool] | None = None,
                             today: date | None = None) -> Check:
    """The Kubernetes version is one the kit pins, its kubectl Lambda layer is installed, and it
    is not within SUPPORT_WARNING_DAYS of leaving EKS standard support."""
    subject = "kubernetes_version"
    version = cfg.kubernetes_version
    entry = KUBERNETES_VERSIONS.get(version)
    if entry is None:
        return Check("kubernetes version", subject, FAIL,
                     f"{version} is not a version the kit supports",
                     f"use one of {', '.join(KUBERNETES_VERSIONS)}")
    package = entry["layer_module"].replace("_", "-")  # aws-cdk.lambda-layer-kubectl-vNN
    installed = installed or _distribution_installed
    if not installed(package):
        return Check("kubernetes version", subject, FAIL,
                     f"{version} needs the kubectl layer package {package}, which is not installed",
                     f"pip install {package} (it is listed in requirements.txt)")
    warning = standard_support_warning(version, today or date.today())
    if warning is not None:
        detail, _, fix = warning.partition(" Fix: ")
        return Check("kubernetes version", subject, WARN, detail.rstrip("."), fix.rstrip("."))
    return Check("kubernetes version", subject, PASS,
                 f"{version} with {package}; standard support until "
                 f"{entry['end_of_standard_support']}")


def check_gpu_driver(cfg: KitConfig) -> Check:
    """The AMI's NVIDIA driver branch runs the trainer image's CUDA."""
    branch = AL2023_NVIDIA_DRIVER_BRANCH.get(cfg.kubernetes_version)
    subject = "kubernetes_version"
    need = TRAINER_IMAGE_MIN_DRIVER_BRANCH
    if branch is None or branch < need:
        return Check("gpu driver", subject, FAIL,
                     f"the AL2023 NVIDIA AMI for Kubernetes {cfg.kubernetes_version} installs "
                     f"driver branch {branch or 'unknown'}; the trainer image (CUDA "
                     f"{TRAINER_IMAGE_CUDA_MAJOR}) needs R{need} or newer",
                     "use a Kubernetes version whose AMI ships a newer driver (infra/versions.py)")
    return Check("gpu driver", subject, PASS,
                 f"AL2023 NVIDIA AMI driver branch R{branch} runs the trainer image's CUDA "
                 f"{TRAINER_IMAGE_CUDA_MAJOR} (needs R{need}+); node groups created earlier keep "
                 "their AMI release until updated, and rlkit gate's node check reads the real driver")


def check_admin_access(cfg: KitConfig) -> Check:
    """Someone must be able to use the cluster: API authentication mode grants no one by default."""
    warnings = config_warnings(cfg)
    admin = [w for w in warnings if w.startswith("admin_role_arns")]
    if admin:
        detail, _, fix = admin[0].partition(" Fix: ")
        return Check("cluster access", "admin_role_arns", WARN, detail.rstrip("."), fix.rstrip("."))
    return Check("cluster access", "admin_role_arns", PASS,
                 f"{len(cfg.admin_role_arns)} admin role(s) get cluster-admin access entries")


def _distribution_installed(package: str) -> bool:
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def kit_stack_names(cfg: KitConfig) -> list[str]:
    stacks = list(names.stack_names(cfg.name).values())
    return stacks + [names.gpu_stack_name(cfg.name, g) for g in cfg.gpu_node_groups]


# Of _STUCK_STACK_STATES, this one is not deleted: ContinueUpdateRollback returns such a stack "to
# a working state (the UPDATE_ROLLBACK_COMPLETE state)" [CloudFormation API reference,
# ContinueUpdateRollback, botocore's cloudformation model], with its resources; deleting the
# cluster or storage stack would destroy the environment.
_ROLLBACK_TO_CONTINUE = {"UPDATE_ROLLBACK_FAILED"}


def _unstick(stack: dict[str, str]) -> str:
    name = stack["name"]
    if stack["status"] in _ROLLBACK_TO_CONTINUE:
        return (f"continue {name}'s rollback, which keeps its resources and returns it to "
                f"UPDATE_ROLLBACK_COMPLETE (aws cloudformation continue-update-rollback "
                f"--stack-name {name}; if it fails again, fix the resource named in its stack "
                "events and rerun it)")
    return f"delete {name} (aws cloudformation delete-stack --stack-name {name})"


def check_existing_stacks(cfn: Any, cfg: KitConfig,
                          reads: PreflightReads | None = None) -> Check:
    """Stacks that already use this name prefix: a deploy updates them (or cannot). With
    ``reads``, the run's one listing (the stacks left out check reads it too)."""
    subject = f"name = {cfg.name!r}"
    try:
        stacks = (reads.prefixed_stacks(cfg.name) if reads is not None
                  else list_prefixed_stacks(cfn, cfg.name))
    except AWS_ERRORS as err:
        return Check("existing stacks", subject, WARN, describe_error(err),
                     "allow cloudformation:ListStacks for your credentials")
    if not stacks:
        return Check("existing stacks", subject, PASS, f"no CloudFormation stacks named {cfg.name}-*")
    listing = ", ".join(f"{s['name']} ({s['status']})" for s in stacks)
    ours = set(kit_stack_names(cfg))
    foreign = [s["name"] for s in stacks if s["name"] not in ours]
    extra = (f"; {', '.join(foreign)} share the prefix but are not stacks of this config"
             if foreign else "")
    # The environment's stacks this config no longer builds: a deploy leaves them as they are.
    left_out = [s["name"] for s in stacks if s["name"] not in set(app_stack_names(cfg))
                and names.environment_of_stack(s["name"]) == cfg.name]
    if left_out:
        extra += (f"; {', '.join(left_out)} this config no longer builds: a deploy leaves them "
                  f"(the {LEFT_OUT} check)")
    # Only this config's own stacks block its deploy, and only they are its to fix: `rl-prod-*`
    # starts with `rl-` but is another environment's.
    stuck = [s for s in stacks if s["name"] in ours and s["status"] in _STUCK_STACK_STATES]
    if stuck:
        blocked = ", ".join(f"{s['name']} ({s['status']})" for s in stuck)
        return Check("existing stacks", subject, FAIL,
                     f"stack(s) of this config that CloudFormation cannot update: {blocked}; "
                     f"all: {listing}{extra}",
                     "; ".join(_unstick(s) for s in stuck) + "; then deploy")
    return Check("existing stacks", subject, WARN,
                 f"already deployed: {listing}{extra}",
                 "a deploy updates these stacks: fine if they are this environment; if another "
                 "team or run owns them, choose a different `name`")


# --- all together --------------------------------------------------------------------------------


def check_ultraserver_block(reads: PreflightReads, cfg: KitConfig, group_name: str,
                            group: GpuNodeGroupConfig) -> list[Check]:
    """UltraServer Capacity Block checks: type, Local Zone, opt-in (ops.ultraserver_preflight)."""
    return [Check(c.name, c.subject, c.status, c.detail, c.fix)
            for c in ultraserver_preflight.check_ultraserver_block(reads, cfg, group_name, group)]


def run_preflight(cfg: KitConfig, clients: AwsClients, region: str | None = None,
                  now: datetime | None = None,
                  installed: Callable[[str], bool] | None = None,
                  config: str | Path | None = None) -> list[Check]:
    """Every check for one config; AWS checks are skipped (one failure) without credentials. A
    Capacity Block group's offline note is replaced by the live check. The checks share one
    ``PreflightReads``: each stack, node group, reservation and offering is read once.
    ``config``: the config file, which the printed CDK commands name."""
    region = region or cfg.region
    checks = offline_checks(cfg, installed)
    identity = check_identity(clients.sts, cfg, region)
    if identity.status != FAIL:
        checks = [c for c in checks if c.name != CAPACITY_BLOCK_UPDATE]
    if identity.status == FAIL:
        skipped = "; the AWS checks (offering, quota, reservations, stacks) did not run"
        return [Check(identity.name, identity.subject, identity.status,
                      identity.detail + skipped, identity.fix)] + checks
    checks.insert(0, identity)
    reads = PreflightReads(clients)
    for n, g in cfg.gpu_node_groups.items():
        checks.append(check_offering(reads, n, g, region))
        checks += check_reservation(reads, n, g, region, now, environment=cfg.name)
        checks += check_ultraserver_block(reads, cfg, n, g)
        update = check_capacity_block_update(reads, cfg, n, g)
        checks += [update] if update is not None else []
    checks += check_shared_reservations(reads, cfg.gpu_node_groups)
    checks.append(check_quota(clients.quotas, cfg, region))
    checks += service_checks(clients.ec2, clients.quotas, cfg, region)  # FSx AZ, CodeBuild
    checks += vpc_checks(clients.ec2, cfg)  # an imported VPC: DNS, subnets, egress
    checks += replacement_checks(reads, cfg)
    checks += upgrade_checks(reads, cfg)  # Kubernetes version, node groups, add-on builds
    checks.append(check_stacks_left_out(reads, cfg, region, config))
    checks.append(check_log_groups_outside_stack(reads, cfg, region))
    checks.append(check_existing_stacks(clients.cloudformation, cfg, reads))
    return checks


def aws_unanswered(checks: list[Check]) -> bool:
    """AWS could not be asked at all (no or expired credentials, AWS unreachable): the credentials
    check failed on an AWS error, so no AWS check ran. `rlkit preflight` then exits 2 (nothing
    was checked), not 1 (a check failed), so CI can tell the two apart."""
    return any(c.name == "credentials" and c.status == FAIL and c.fix == CREDENTIALS_FIX
               for c in checks)


def summary(checks: list[Check]) -> dict[str, int]:
    return {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL)}

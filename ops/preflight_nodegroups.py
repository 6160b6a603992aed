"""Preflight checks that read the deployed node groups and say what the next `cdk deploy` of this
config would do to their running nodes (read-only; ``ops.preflight_replace.replacement_checks``
runs them):

- **A GPU group's launch template** (CloudFormation GetTemplate): its instances, volumes and
  network interfaces carry the config's ``tags`` and ``cost_guard.ttl_hours`` (tag
  specifications), and its root volume is ``root_volume_gib``. Changing either gives the template
  a new version, and EKS replaces every node of the group in a rolling update (UpdateNodegroupVersion).
  The RL job's disruption budget then stops the drain, the update fails after EKS's drain timeout
  and the deploy rolls back; with ``force_update`` the drain evicts the job instead. A group with
  a kit placement group is left to the "placement group kept" check for its tags (the same roll).
  A deployed group (EKS DescribeNodegroup) at another Kubernetes version than the config's is
  rolled the same way: the kit names ``kubernetes_version`` as each group's ``Version``
  (ops.preflight_upgrade has the rules of an upgrade), and CloudFormation refuses that change
  together with a new launch template version in one update (aws/containers-roadmap#1258).
- **A GPU group's node group** (CloudFormation GetTemplate and DescribeStackResources, EKS
  DescribeNodegroup, EC2 DescribeSubnets): its subnets (the group's ``availability_zone``),
  capacity type (on-demand and ODCR vs capacity-block) and AMI type (x86_64 vs arm64 instance
  types) are create-only. Changing one replaces the group: CloudFormation creates the new group,
  then deletes the old one, whose nodes EKS drains for at most 5 minutes before it terminates
  them, disruption budget or not [EKS User Guide, "Delete a managed node group"]. A group that
  moves its zone while its cluster placement group stays fails to launch: the old group's nodes
  still hold that placement group in the old zone, and a cluster placement group lies in one
  AZ [botocore 1.44.8 autoscaling model, CreateAutoScalingGroup PlacementGroup].
- **The system node group** (CloudFormation GetTemplate): its instance types are create-only
  too; changing ``system_nodes.instance_type`` replaces the group, and the KubeRay operator and
  CoreDNS move to new nodes. Its root volume is its launch template's, so
  changing ``root_volume_gib`` rolls its nodes instead. A group deployed by a kit before the
  system launch template has none and is replaced once (docs/operations.md, "IMDS on the system
  nodes").

The create-only properties are those of the AWS::EKS::Nodegroup resource schema (its
``createOnlyProperties``; cfn-lint==1.58.0
``cfnlint/data/schemas/resources/e703fb10b42108ae.json``, which ``providers/us-east-1.json`` maps
the type to, and which the tests read). Capacity Block groups are not checked here:
`check_capacity_block_update` refuses any deploy of one while its nodes run, and with none running
nothing is lost. Each check passes before its stack is deployed and warns when what it needs
cannot be read.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import GpuNodeGroupConfig, KitConfig
from infra.config.derived import node_group_tags, resource_tags
from infra.problems import FAIL, PASS, WARN
from ops.aws import AWS_ERRORS, describe_error, tag_dict
from ops.check_result import Check
from ops.deployed import deployed_template, nodegroup_id, tag_changes
from ops.node_templates import launch_template_data, node_root_volume_gib, root_volume_gib
from ops.preflight_reads import PreflightReads

NODE_ROLL = "GPU node roll"
NODEGROUP_KEPT = "node group kept"
# AWS::EKS::Nodegroup CapacityType of a config's capacity.type (an ODCR is on-demand capacity
# aimed at a reservation by the launch template).
CAPACITY_TYPES = {"on-demand": "ON_DEMAND", "odcr": "ON_DEMAND", "capacity-block": "CAPACITY_BLOCK"}
_ROLL_PERMISSIONS = ("cloudformation:GetTemplate, cloudformation:DescribeStackResources, "
                     "eks:DescribeNodegroup and ec2:DescribeSubnets")


def _properties(template: dict, resource_type: str) -> list[dict]:
    return [r.get("Properties") or {} for r in template.get("Resources", {}).values()
            if r.get("Type") == resource_type]


@dataclass(frozen=True)
class RunningGroup:
    """What runs in a deployed GPU node group, as EKS and EC2 report it."""
    nodegroup: str
    desired: int
    zones: list[str]
    version: str | None = None  # its Kubernetes version


def _running_group(reads: PreflightReads, check: str, subject: str, stack: str) -> RunningGroup | Check:
    """The node group of ``stack``, its desired size and its subnets' zones; or the verdict that
    ends the check."""
    try:
        found = nodegroup_id(reads.stack_resources(stack))
        if found is None:
            return Check(check, subject, PASS, f"{stack} has no node group yet: this deploy creates it")
        cluster, nodegroup = found
        described = reads.nodegroup(cluster, nodegroup)
        desired = int((described.get("scalingConfig") or {}).get("desiredSize") or 0)
        subnets = described.get("subnets") or []
        zones = sorted({s["AvailabilityZone"] for s in reads.clients.ec2.describe_subnets(
            SubnetIds=subnets)["Subnets"]}) if desired and subnets else []
    except AWS_ERRORS as err:
        return Check(check, subject, WARN,
                     f"cannot read the nodes of {stack}'s node group: {describe_error(err)}",
                     f"allow {_ROLL_PERMISSIONS}, then run preflight again")
    return RunningGroup(nodegroup, desired, zones, described.get("version"))


def gpu_group_checks(reads: PreflightReads, cfg: KitConfig, group_name: str,
                     group: GpuNodeGroupConfig) -> list[Check]:
    """Would a deploy roll (launch template) or replace (node group) the running nodes of GPU
    group ``group_name``? Nothing for a Capacity Block group (see the module docstring)."""
    if group.capacity.type == "capacity-block":
        return []
    stack = names.gpu_stack_name(cfg.name, group_name)
    subject = f"gpu_node_groups.{group_name} ({stack})"
    template = deployed_template(reads, NODE_ROLL, subject, stack, "the node group")
    if isinstance(template, Check):
        return [template]
    running = _running_group(reads, NODE_ROLL, subject, stack)
    if isinstance(running, Check):
        return [running]
    if running.desired == 0:
        return [Check(NODE_ROLL, subject, PASS,
                      f"node group {running.nodegroup} has no nodes (desired size 0): a deploy "
                      "that rolls or replaces it stops no job")]
    return [check_launch_template_roll(cfg, group_name, group, template, running),
            check_nodegroup_kept(cfg, group_name, group, template, running)]


def check_launch_template_roll(cfg: KitConfig, group_name: str, group: GpuNodeGroupConfig,
                               template: dict, running: RunningGroup) -> Check:
    """Would a deploy give the group's launch template a new version (its instance tags or root
    volume changed), or move the group to another Kubernetes version (the kit names
    ``kubernetes_version`` as its Version), and so roll the group's running nodes? Both at once
    fail: CloudFormation refuses a Version change combined with another change of the group."""
    subject = f"gpu_node_groups.{group_name} ({names.gpu_stack_name(cfg.name, group_name)})"
    data = next((p.get("LaunchTemplateData") or {} for p in
                 _properties(template, "AWS::EC2::LaunchTemplate")), {})
    changes, keep = [], []
    if not group.uses_placement_group:  # else "placement group kept" warns of this same roll
        specs = [s for s in data.get("TagSpecifications") or [] if s.get("ResourceType") == "instance"]
        deployed = tag_dict(specs[0].get("Tags")) if specs else {}
        wanted = node_group_tags(cfg, group_name)
        if deployed != wanted:
            changes.append(f"instance tags {tag_changes(deployed, wanted)}")
            keep.append("tags and cost_guard.ttl_hours")
    volume = root_volume_gib(data)
    if volume is not None and volume != group.root_volume_gib:
        changes.append(f"root volume {volume} -> {group.root_volume_gib} GiB")
        keep.append(f"gpu_node_groups.{group_name}.root_volume_gib: {volume}")
    moves = running.version is not None and running.version != cfg.kubernetes_version
    if moves and changes:
        return Check(
            NODE_ROLL, subject, FAIL,
            f"the deploy moves node group {running.nodegroup} from Kubernetes {running.version} "
            f"to {cfg.kubernetes_version} and gives its launch template a new version "
            f"({'; '.join(changes)}) in one update, which CloudFormation refuses (\"Version and "
            "ReleaseVersion updates cannot be combined with other updates\", "
            "aws/containers-roadmap#1258): the stack would roll back",
            f"keep {' and '.join(keep)} as deployed in this deploy, and make that change in a "
            "deploy of its own after it")
    if moves:
        return Check(
            NODE_ROLL, subject, WARN,
            f"the deploy moves node group {running.nodegroup} from Kubernetes {running.version} "
            f"to {cfg.kubernetes_version} (the kit names kubernetes_version as each group's "
            f"Version), and EKS replaces each of its {running.desired} nodes in a rolling update: "
            + _drain(group),
            "deploy when no job runs on the group (rlkit status), with no other change to it in "
            "the same deploy (docs/operations.md, \"Kubernetes upgrades\")")
    if not changes:
        return Check(NODE_ROLL, subject, PASS,
                     "the deploy changes neither the instance tags nor the root volume of the "
                     "group's launch template" if not group.uses_placement_group else
                     "the deploy does not change the root volume of the group's launch template "
                     "(its tags: the placement group kept check)")
    return Check(
        NODE_ROLL, subject, WARN,
        f"the deploy gives the group's launch template a new version ({'; '.join(changes)}), and "
        f"EKS replaces each of the {running.desired} nodes of node group {running.nodegroup} in a "
        f"rolling update: {_drain(group)}",
        f"deploy when no job runs on the group (rlkit status), or keep {' and '.join(keep)} as "
        "deployed")


def _drain(group: GpuNodeGroupConfig) -> str:
    """What a rolling update of the group's nodes does to the run on them."""
    return ("force_update is on, so the drain evicts the job's pods" if group.force_update else
            "the RL job's disruption budget stops the drain, so the update fails after EKS's "
            "drain timeout and CloudFormation rolls the deploy back (force_update is off)")


def _keeps_placement_group(cfg: KitConfig, group: GpuNodeGroupConfig, template: dict) -> str | None:
    """The placement group the deployed launch template names that this deploy keeps, in words,
    if any: ``placement_group_name`` when deployed already, or the kit's own when its tags
    (create-only) stay the config's."""
    data = next((p.get("LaunchTemplateData") or {} for p in
                 _properties(template, "AWS::EC2::LaunchTemplate")), {})
    deployed = (data.get("Placement") or {}).get("GroupName")
    if group.placement_group_name is not None:
        return f"placement group {deployed}" if deployed == group.placement_group_name else None
    if group.uses_placement_group and isinstance(deployed, dict):  # {"Ref": the kit's group}
        groups = _properties(template, "AWS::EC2::PlacementGroup")
        if groups and tag_dict(groups[0].get("Tags")) == resource_tags(cfg):
            return "the placement group the kit made for it"
    return None


def check_nodegroup_kept(cfg: KitConfig, group_name: str, group: GpuNodeGroupConfig,
                         template: dict, running: RunningGroup) -> Check:
    """Would a deploy replace the group's running node group (its zone, capacity type or AMI
    type changed: create-only)?"""
    stack = names.gpu_stack_name(cfg.name, group_name)
    subject = f"gpu_node_groups.{group_name} ({stack})"
    deployed = next(iter(_properties(template, "AWS::EKS::Nodegroup")), {})
    field = f"gpu_node_groups.{group_name}"
    changes, keep = [], []
    zone_moves = running.zones and running.zones != [group.availability_zone]
    if zone_moves:
        changes.append(f"its zone {', '.join(running.zones)} -> {group.availability_zone}")
        keep.append(f"{field}.availability_zone: {', '.join(running.zones)}")
    capacity = CAPACITY_TYPES[group.capacity.type]
    if deployed.get("CapacityType", capacity) != capacity:
        changes.append(f"its capacity type {deployed['CapacityType']} -> {capacity}")
        keep.append(f"{field}.capacity.type")
    ami = INSTANCE_TYPES[group.instance_type].ami_type
    if str(deployed.get("AmiType", ami)).upper() != ami.upper():
        changes.append(f"its AMI type {deployed['AmiType']} -> {ami} ({group.instance_type})")
        keep.append(f"an instance type of AMI type {deployed['AmiType']}")
    if not changes:
        return Check(NODEGROUP_KEPT, subject, PASS,
                     f"node group {running.nodegroup} stays: same zone ({group.availability_zone}), "
                     f"capacity type ({capacity}) and AMI type ({ami})")
    replaced = (f"a deploy would replace node group {running.nodegroup}: this config changes "
                f"{' and '.join(changes)}, which a node group cannot change in place")
    placement_group = _keeps_placement_group(cfg, group, template) if zone_moves else None
    if placement_group is not None:
        return Check(
            NODEGROUP_KEPT, subject, FAIL,
            f"{replaced}; CloudFormation creates the new group first, in "
            f"{group.availability_zone}, in {placement_group}, which the old "
            f"group's {running.desired} nodes hold in {', '.join(running.zones)}: a cluster "
            "placement group lies in one AZ, so the new nodes fail to launch and the deploy "
            "rolls back",
            f"keep {' and '.join(keep)} while the group has nodes; to move it, stop the run (its "
            f"last save is in S3), delete {stack} (its node group and nodes go with it), then "
            "deploy: the group is created again in the new zone")
    return Check(
        NODEGROUP_KEPT, subject, WARN,
        f"{replaced}; CloudFormation creates a new group, then deletes this one: EKS drains each "
        f"of its {running.desired} nodes for at most 5 minutes and terminates it, whatever the "
        "RL job's disruption budget says, so the run on them dies",
        f"keep {' and '.join(keep)}; to change it, stop the run first (its last save is in S3; "
        "rlkit status), then deploy; or add a group under a new name with the new settings, "
        f"move the run to it, then delete {stack}")


def check_system_nodes_kept(reads: PreflightReads, cfg: KitConfig) -> Check:
    """Would a deploy replace the system node group (its instance type changed: create-only; or
    it was created without the launch template the kit now gives it), or roll its nodes (its
    root volume changed: a new launch template version)?"""
    stack = names.stack_names(cfg.name)["cluster"]
    subject = f"system_nodes ({stack})"
    template = deployed_template(reads, NODEGROUP_KEPT, subject, stack, "the node group")
    if isinstance(template, Check):
        return template
    groups = _properties(template, "AWS::EKS::Nodegroup")  # the cluster stack's one: the system group
    if not groups:
        return Check(NODEGROUP_KEPT, subject, PASS, f"{stack} has no node group yet: this deploy creates it")
    deployed, wanted = groups[0], cfg.system_nodes
    moved = "the KubeRay operator and CoreDNS move to new nodes, mid-run if one runs"
    types = deployed.get("InstanceTypes") or []
    new_type = (f"its instance type {', '.join(types)} -> {wanted.instance_type}"
                if types and types != [wanted.instance_type] else None)
    if launch_template_data(template, deployed) is None:
        return _system_group_without_launch_template(subject, new_type, moved)
    if new_type:
        return Check(
            NODEGROUP_KEPT, subject, WARN,
            f"a deploy would replace the system node group: this config changes {new_type}, "
            f"which a node group cannot change in place; {moved}",
            f"deploy it when no job runs (rlkit status), or keep system_nodes.instance_type: "
            f"{types[0]}")
    disk = node_root_volume_gib(template, deployed)
    if disk is not None and disk != wanted.root_volume_gib:
        return Check(
            NODEGROUP_KEPT, subject, WARN,
            f"a deploy would replace every system node in a rolling update: this config changes "
            f"their root volume {disk} -> {wanted.root_volume_gib} GiB, a new version of their "
            f"launch template; {moved}",
            f"deploy it when no job runs (rlkit status), or keep system_nodes.root_volume_gib: {disk}")
    return Check(NODEGROUP_KEPT, subject, PASS,
                 f"the system node group stays: {wanted.instance_type}, {wanted.root_volume_gib} GiB")


def _system_group_without_launch_template(subject: str, new_type: str | None, moved: str) -> Check:
    """The system group a kit before the system launch template deployed: EKS gives a launch
    template only to a group created with one (botocore 1.44.8 EKS model,
    UpdateNodegroupVersionRequest.launchTemplate), and its DiskSize, which the new template
    leaves out (EKS refuses both together: CreateNodegroupRequest.diskSize), is create-only, so
    CloudFormation replaces it. The group has no fixed name, so the new one is created first."""
    also = f"; this config also changes {new_type}" if new_type else ""
    return Check(
        NODEGROUP_KEPT, subject, WARN,
        "a deploy would replace the system node group once: system nodes now come from a launch "
        "template (IMDSv2 with one hop, so pods cannot take the node role; an encrypted gp3 root "
        "volume), which a node group created without one cannot be given in place" + also + ". "
        "CloudFormation creates the new group and waits for its nodes to join, then deletes this "
        "one: EKS drains its nodes for at most 5 minutes each and terminates them. The deploy "
        "takes some 10-20 minutes longer, both groups' nodes run meanwhile, and " + moved,
        "deploy it when no job runs (rlkit status); it happens once, on the first deploy of a kit "
        "with the system launch template (docs/operations.md, \"IMDS on the system nodes\")")

"""Preflight checks that read what is deployed and say what the next `cdk deploy` of this config
would replace. CloudFormation replaces a resource when a create-only property changes (the
``createOnlyProperties`` of its resource schema, as cfn-lint==1.58.0 ships it:
``cfnlint/data/schemas/resources/<hash>.json``, the hash from ``providers/us-east-1.json``;
AWS::FSx::FileSystem is ``eac496c3918e66ed.json``, AWS::EC2::PlacementGroup
``0d14fade154ad02f.json``; the tests read them); two of the kit's resources hold something that
a replacement loses:

- **The shared file system** (CloudFormation DescribeStacks, FSx DescribeFileSystems, EC2
  DescribeSubnets, KMS DescribeKey): its subnets and KMS key are create-only, so a config that
  moves the file system's AZ or switches ``storage.kms`` makes the deploy create a new, empty file
  system. The old one, with the saves on it, is then retained outside any stack and still billed,
  or deleted with them when the environment is ephemeral.
- **A GPU group's placement group** (CloudFormation DescribeStackResources, EC2
  DescribePlacementGroups): its tags are create-only, and the kit tags every resource with the
  config's ``tags`` and ``cost_guard.ttl_hours``. A change to either replaces the placement
  group, the launch template then names another group, and EKS replaces every node of the group
  in a rolling update, under a running job.

- **The cluster's admin access entries** (CloudFormation GetTemplate): one entry per
  ``admin_role_arns`` item, keyed by its position. An entry's principal is create-only and, with
  the cluster, its identifier, and CloudFormation creates a replacement before it deletes the old
  resource; so removing or reordering roles moves a role that still has its entry to another
  position, the create fails (an entry for that principal exists), and the stack rolls back.

- **The order of ``availability_zones``** (CloudFormation GetTemplate): the VPC's subnets are
  numbered by their zone's position in the list, and a subnet's zone is create-only. Inserting,
  removing or reordering zones moves numbered subnets to other zones: they would be replaced,
  while the cluster, storage and GPU stacks import them, so the network stack update fails. Adding
  a zone at the end only adds subnets, but it also changes the system node group's subnets
  (create-only), which replaces that group: the KubeRay operator and CoreDNS move to new
  nodes.
  ``local_zones`` are numbered the same way, each subnet with a CIDR block by position: a zone
  moved to another position keeps the block, which CloudFormation refuses, and a removed one is
  still imported by its group's GPU stack.

- **A GPU group's taints** (CloudFormation GetTemplate): EKS applies a node group's taints to the
  nodes it has (UpdateNodegroupConfig: "taints to be applied to the nodes in the node group after
  the update"). A taint the deploy adds reaches running nodes: a NoExecute one evicts every pod
  without a toleration, the job included, and the FSx startup taint (added when the environment
  gains the file system, or by the first deploy of a kit that has it) then stays on nodes whose
  FSx CSI node plugin already ran, until that plugin restarts.

- **The node AMI release** (CloudFormation DescribeStackResources, EKS DescribeNodegroup), when
  the config names one (``node_ami_release_version``): EKS moves a node group to another release
  by replacing every node, cannot move it back to an earlier one (UpdateNodegroupVersion API
  reference), and CloudFormation refuses a release change combined with any other change of the
  group ("Version and ReleaseVersion updates cannot be combined with other updates",
  aws/aws-cdk#13602).

- **CRDs a Helm release gains on a later deploy** (CloudFormation GetTemplate): CDK's Helm
  handler runs `helm upgrade --install`, and Helm applies a chart's ``crds/`` only when it first
  installs a release. The device plugin's release turns on its node-feature-discovery subchart
  (and its three CRDs) only when an UltraServer group is configured, so adding one to a deployed
  cluster would leave NFD without its CRDs, and GPU feature discovery's clique labels, which
  ComputeDomains and the run's pod affinity need, would never come. For the same reason, a
  deploy that moves an enabled add-on to another chart version leaves the cluster on the CRDs of
  the version its release was first installed at: the API server then drops the fields the new
  version added to RayJobs or ComputeDomains, while offline validation (against the new CRDs)
  passes. The CRDs are read from the locked chart archives (``ops.chart_crds``), not the cluster.

Each passes before its stack is deployed, and warns when what it needs cannot be read.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any, Callable

import yaml

from infra import names
from infra.addons import ADDONS, HelmAddon, dra_driver, nvidia_device_plugin
from infra.config import GpuNodeGroupConfig, KitConfig, has_shared_fs
from infra.config.derived import (
    chart_values,
    gpu_group_taints,
    resource_tags,
    shared_fs_availability_zone,
    shared_fs_availability_zone_field,
)
from infra.problems import FAIL, PASS, WARN
from infra.versions import AMI_RELEASE_RE
from ops import artifacts, chart_crds
from ops.aws import AWS_ERRORS, describe_error, tag_dict
from ops.check_result import Check
from ops.deployed import (
    deployed_resources,
    deployed_template,
    nodegroup_id,
    read_stack,
    stacks_importing,
    tag_changes,
)
from ops.preflight_nodegroups import check_system_nodes_kept, gpu_group_checks
from ops.preflight_reads import PreflightReads

FSX_KEPT = "shared file system kept"
PLACEMENT_GROUP_KEPT = "placement group kept"
ADMIN_ENTRIES = "admin access entries"
ZONE_ORDER = "availability zone order"
NODE_TAINTS = "node taints"
CHART_CRDS = "chart CRDs"
AMI_RELEASE = "node AMI release"
# CDK's logical ID of the access entry of admin_role_arns[i] (infra/constructs/cluster.py
# `Admin{i}` under the cluster construct): the path, then an 8-character hash.
_ADMIN_ENTRY_ID = re.compile(r"Admin(\d+)[0-9A-F]{8}$")
# CDK's logical ID of the VPC's n-th private subnet (ec2.Vpc, subnet group "private").
_PRIVATE_SUBNET_ID = re.compile(r"privateSubnet(\d+)Subnet[0-9A-F]{8}$")
# ... and of the subnet of local_zones[n-1] (infra/constructs/network.py `LocalZone{n}`).
_LOCAL_ZONE_SUBNET_ID = re.compile(r"LocalZone(\d+)Subnet[0-9A-F]{8}$")
# CloudFormation's spelling of a taint effect (AWS::EKS::Nodegroup Taint) -> Kubernetes'.
_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute",
            "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def check_fsx_kept(reads: PreflightReads, cfg: KitConfig) -> Check:
    """Would a deploy of this config replace the deployed shared file system (its AZ or its KMS
    key changed)? PASS when the storage stack is not deployed yet."""
    stack = names.stack_names(cfg.name)["storage"]
    zone = shared_fs_availability_zone(cfg)
    subject = f"{stack} (storage.shared_filesystem)"
    outputs = read_stack(FSX_KEPT, subject, stack, lambda: reads.stack_outputs(stack),
                         f"the file system in {zone}", "cloudformation:DescribeStacks")
    if isinstance(outputs, Check):
        return outputs
    fs_id = (outputs or {}).get(names.OutputKeys.SHARED_FS_ID)
    if not fs_id:
        return Check(FSX_KEPT, subject, PASS,
                     f"{stack} has no file system yet: the next deploy creates it in {zone}")
    clients = reads.clients
    try:
        fs = clients.fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]
        deployed_zone = clients.ec2.describe_subnets(SubnetIds=fs["SubnetIds"][:1])[
            "Subnets"][0]["AvailabilityZone"]
        key = fs.get("KmsKeyId")
        customer_key = bool(key) and clients.kms.describe_key(KeyId=key)[
            "KeyMetadata"].get("KeyManager") == "CUSTOMER"
    except AWS_ERRORS as err:
        return Check(FSX_KEPT, subject, WARN,
                     f"cannot tell whether a deploy would replace {fs_id}: {describe_error(err)}",
                     "allow fsx:DescribeFileSystems, ec2:DescribeSubnets and kms:DescribeKey, then "
                     "run preflight again before deploying the storage stack")
    keys = {True: "the kit's customer-managed key", False: "the AWS-managed key"}
    moves, keep = [], []
    if deployed_zone != zone:
        field = shared_fs_availability_zone_field(cfg)
        moves.append(f"its AZ from {deployed_zone} to {zone}")
        keep.append(f"{field}: {deployed_zone}")
    if customer_key != cfg.storage.kms:
        moves.append(f"its encryption from {keys[customer_key]} to {keys[cfg.storage.kms]}")
        keep.append(f"storage.kms: {str(customer_key).lower()}")
    if not moves:
        return Check(FSX_KEPT, subject, PASS,
                     f"{fs_id} stays: same AZ ({zone}) and {keys[customer_key]}")
    on_purpose = (f"let the run's last save reach S3, delete {stack} (rlkit teardown removes it "
                  "with the cluster), then deploy: the new file system reads the bucket again")
    if customer_key and not cfg.storage.kms:
        # The data stack deploys first and drops its key with storage.kms off, while this stack
        # still imports the key's ARN: the update fails before anything is replaced.
        data = names.stack_names(cfg.name)["data"]
        return Check(
            FSX_KEPT, subject, FAIL,
            f"this config turns storage.kms off, but {fs_id} is encrypted with {data}'s key, whose "
            f"ARN {stack} imports: {data} deploys first and cannot remove that export while "
            f"{stack} uses it, so the deploy fails",
            f"keep {' and '.join(keep)}; to drop the key on purpose, {on_purpose}")
    fate = ("deleted with everything on it (an ephemeral environment, or storage.retain: false)"
            if cfg.ephemeral or not cfg.storage.retain else
            "retained outside any stack, still billed, with the saves on it")
    return Check(
        FSX_KEPT, subject, FAIL,
        f"a deploy would replace {fs_id}: this config changes {' and '.join(moves)}, which a file "
        f"system cannot change in place; CloudFormation would create a new, empty one, and {fs_id} "
        f"would be {fate}",
        f"keep {' and '.join(keep)}; to move it on purpose, {on_purpose}")


def check_placement_group_kept(reads: PreflightReads, cfg: KitConfig, group_name: str,
                               group: GpuNodeGroupConfig) -> Check | None:
    """Would a deploy replace the placement group the kit made for this GPU group (its tags
    changed)? None when the kit makes none for it."""
    if not group.uses_placement_group:
        return None
    stack = names.gpu_stack_name(cfg.name, group_name)
    subject = f"gpu_node_groups.{group_name} ({stack})"
    found = deployed_resources(reads, PLACEMENT_GROUP_KEPT, subject, stack, "the placement group")
    if isinstance(found, Check):
        return found
    pg = next((r["PhysicalResourceId"] for r in found
               if r["ResourceType"] == "AWS::EC2::PlacementGroup" and r.get("PhysicalResourceId")), None)
    if pg is None:
        return Check(PLACEMENT_GROUP_KEPT, subject, PASS,
                     f"{stack} has no placement group yet: this deploy creates it")
    try:
        [described] = reads.clients.ec2.describe_placement_groups(GroupNames=[pg])["PlacementGroups"]
    except (*AWS_ERRORS, ValueError) as err:
        return Check(PLACEMENT_GROUP_KEPT, subject, WARN,
                     f"cannot tell whether a deploy would replace placement group {pg}: "
                     f"{describe_error(err) if isinstance(err, AWS_ERRORS) else err}",
                     "allow ec2:DescribePlacementGroups, then run preflight again")
    # aws:cloudformation:* tags are CloudFormation's own, not in the template
    deployed = {k: v for k, v in tag_dict(described.get("Tags")).items() if not k.startswith("aws:")}
    wanted = resource_tags(cfg)
    if deployed == wanted:
        return Check(PLACEMENT_GROUP_KEPT, subject, PASS, f"placement group {pg} keeps its tags")
    return Check(
        PLACEMENT_GROUP_KEPT, subject, WARN,
        f"a deploy would replace placement group {pg} (its tags cannot change in place: "
        f"{tag_changes(deployed, wanted)}), and EKS then replaces every node of the group in a rolling update",
        "deploy when no job runs on the group (rlkit status), or keep the tags and "
        "cost_guard.ttl_hours as they were")


def _numbered(reads: PreflightReads, check: str, subject: str, stack: str, creates: str,
              resource_type: str, logical_id: re.Pattern, prop: str) -> dict[int, Any] | Check:
    """In the deployed template of ``stack``: number (``logical_id``'s group 1) -> ``prop`` of
    each ``resource_type`` resource whose logical ID matches; or the verdict that ends the check
    (``ops.deployed.read_stack``)."""
    template = deployed_template(reads, check, subject, stack, creates)
    if isinstance(template, Check):
        return template
    return _numbered_in(template, resource_type, logical_id, prop)


def _numbered_in(template: dict, resource_type: str, logical_id: re.Pattern,
                 prop: str) -> dict[int, Any]:
    return {int(m.group(1)): resource.get("Properties", {}).get(prop)
            for name, resource in template.get("Resources", {}).items()
            if resource.get("Type") == resource_type and (m := logical_id.search(name))}


def check_admin_entries(reads: PreflightReads, cfg: KitConfig) -> Check:
    """Would a deploy create an admin access entry for a role whose deployed entry sits at
    another position of admin_role_arns (a failed deploy and a rollback)?"""
    stack = names.stack_names(cfg.name)["cluster"]
    subject = f"admin_role_arns ({stack})"
    found = _numbered(reads, ADMIN_ENTRIES, subject, stack, "the entries",
                      "AWS::EKS::AccessEntry", _ADMIN_ENTRY_ID, "PrincipalArn")
    if isinstance(found, Check):
        return found
    deployed = {i: arn for i, arn in found.items() if isinstance(arn, str)}
    wanted = dict(enumerate(cfg.admin_role_arns))
    moved = [f"{arn} (deployed at {[j for j, a in deployed.items() if a == arn][0]}, now at {i})"
             for i, arn in wanted.items() if deployed.get(i) != arn and arn in deployed.values()]
    if not moved:
        return Check(ADMIN_ENTRIES, subject, PASS,
                     "no role moves to another position: no entry is created twice")
    order = [deployed[i] for i in sorted(deployed)]
    return Check(
        ADMIN_ENTRIES, subject, FAIL,
        f"a deploy would create a second access entry for {'; '.join(moved)}: entries are keyed by "
        "position, CloudFormation creates the new one before it deletes the old, and EKS refuses a "
        "second entry for a principal, so the cluster stack would roll back",
        f"keep the deployed order ({', '.join(order)}) and add new roles at the end; to remove or "
        "reorder, deploy once with the list cut before the first role that moves, then deploy the "
        "list you want")


def check_zone_order(reads: PreflightReads, cfg: KitConfig) -> Check | None:
    """Would a deploy move the VPC's numbered subnets to other zones (availability_zones or
    local_zones changed other than at their end)? None for an existing VPC (the kit owns no
    subnets then)."""
    if cfg.vpc.existing is not None:
        return None
    stack = names.stack_names(cfg.name)["network"]
    subject = f"availability_zones ({stack})"
    template = deployed_template(reads, ZONE_ORDER, subject, stack, "the subnets")
    if isinstance(template, Check):
        return template
    numbered = _numbered_in(template, "AWS::EC2::Subnet", _PRIVATE_SUBNET_ID, "AvailabilityZone")
    deployed = [numbered[n] for n in sorted(numbered)]
    wanted = list(cfg.availability_zones)
    if wanted[:len(deployed)] != deployed:
        return Check(
            ZONE_ORDER, subject, FAIL,
            f"the deployed VPC's subnets are numbered for {deployed}, this config lists {wanted}: a "
            "deploy would move or remove numbered subnets (a subnet's zone cannot change: "
            "replacement), and the cluster, storage and GPU stacks import them, so the network "
            "stack update fails",
            f"keep availability_zones starting with {deployed}, and add zones at the end")
    local = _numbered_in(template, "AWS::EC2::Subnet", _LOCAL_ZONE_SUBNET_ID, "AvailabilityZone")
    deployed_local = [local[n] for n in sorted(local)]
    wanted_local = list(cfg.local_zones)
    dropped = deployed_local[len(wanted_local):]
    if deployed_local[:len(wanted_local)] == wanted_local and dropped:
        # Zones dropped from the end only: their subnets go, which works once no stack imports
        # them (the GPU stacks of groups placed there destroyed first).
        users = _local_zone_importers(reads, template, sorted(local)[len(wanted_local):])
        if isinstance(users, Check):
            return users
        if users:
            return Check(
                ZONE_ORDER, f"local_zones ({stack})", FAIL,
                f"this config drops {', '.join(dropped)} from local_zones, but {', '.join(users)} "
                "still imports its subnet (\"Export ... cannot be deleted as it is in use\"), so "
                "the network stack update fails",
                f"destroy {', '.join(users)} first (cdk destroy {' '.join(users)} -c config=<your "
                "config file>, with the groups in that zone still in it), then deploy this config")
    elif wanted_local[:len(deployed_local)] != deployed_local:
        # A Local Zone subnet's CIDR follows its position, so one moved to another zone keeps its
        # CIDR, which CloudFormation refuses ("CIDR Block must change if Availability Zone is
        # changed and VPC ID is not changed").
        return Check(
            ZONE_ORDER, f"local_zones ({stack})", FAIL,
            f"the deployed Local Zone subnets are numbered for {deployed_local}, this config lists "
            f"{wanted_local}: a deploy would move a subnet to another zone under the same CIDR "
            "block, which CloudFormation refuses, so the network stack update fails",
            f"keep local_zones starting with {deployed_local} and add zones at the end; to drop "
            "or replace a Local Zone, drop the zones from the end of the list (destroying the GPU "
            "stacks of the groups in them first), deploy, then add the new one at the end")
    if len(wanted) > len(deployed):
        return Check(
            ZONE_ORDER, subject, WARN,
            f"{', '.join(wanted[len(deployed):])} added at the end: new subnets only, but the "
            "system node group's subnets change, which replaces that group (the KubeRay operator "
            "and CoreDNS move to new nodes)",
            "deploy it when no job runs")
    return Check(ZONE_ORDER, subject, PASS,
                 f"the subnets stay in {deployed + deployed_local[:len(wanted_local)]}"
                 + (f"; the subnets of {', '.join(dropped)} go (no stack imports them)"
                    if dropped else ""))


def _local_zone_importers(reads: PreflightReads, template: dict, numbers: list[int]
                          ) -> list[str] | Check:
    """The stacks importing the subnets of the Local Zones numbered ``numbers`` (the exports the
    deployed network template gives them, then ListImports)."""
    ids = {name for name, r in template.get("Resources", {}).items()
           if (m := _LOCAL_ZONE_SUBNET_ID.search(name)) and int(m.group(1)) in numbers}
    exports = [o["Export"]["Name"] for o in template.get("Outputs", {}).values()
               if isinstance(o.get("Export", {}).get("Name"), str)
               and o.get("Value") in [{"Ref": i} for i in ids]]
    try:
        return sorted({s for e in exports for s in stacks_importing(reads.clients.cloudformation, e)})
    except AWS_ERRORS as err:
        return Check(ZONE_ORDER, "local_zones", WARN,
                     f"cannot tell which stacks still import the dropped Local Zones' subnets: "
                     f"{describe_error(err)}", "allow cloudformation:ListImports, then run "
                     "preflight again before deploying the network stack")


def check_node_taints(reads: PreflightReads, cfg: KitConfig, group_name: str) -> Check:
    """Would a deploy add a taint to the running nodes of GPU group ``group_name``?"""
    stack = names.gpu_stack_name(cfg.name, group_name)
    subject = f"gpu_node_groups.{group_name} ({stack})"
    template = deployed_template(reads, NODE_TAINTS, subject, stack, "the node group")
    if isinstance(template, Check):
        return template
    deployed = {(t.get("Key"), _EFFECTS.get(t.get("Effect"), t.get("Effect")))
                for r in template.get("Resources", {}).values() if r.get("Type") == "AWS::EKS::Nodegroup"
                for t in r.get("Properties", {}).get("Taints") or []}
    added = [t for t in gpu_group_taints(cfg, group_name) if (t.key, t.effect) not in deployed]
    if not added:
        return Check(NODE_TAINTS, subject, PASS, "the deploy adds no taint to the group's nodes")
    restart = [f"kubectl -n kube-system rollout restart daemonset/{names.SELF_REMOVING_TAINTS[t.key]}"
               for t in added if t.key in names.SELF_REMOVING_TAINTS]
    return Check(
        NODE_TAINTS, subject, WARN,
        f"the deploy adds {', '.join(f'{t.key}:{t.effect}' for t in added)} to the group's running "
        "nodes (EKS applies a node group's taints to the nodes it has)"
        + (": NoExecute evicts every pod without a toleration, the job included"
           if any(t.effect == "NoExecute" for t in added) else ""),
        "deploy when no job runs on the group"
        + (f", then restart the agent that removes the taint: {'; '.join(restart)}" if restart else ""))


def _release_order(release: str) -> tuple | None:
    """An EKS AMI release version (1.35.6-20260714) as (Kubernetes minor, date, patch)."""
    m = AMI_RELEASE_RE.fullmatch(release or "")
    return (tuple(map(int, m.group(1).split("."))), m.group(3), int(m.group(2))) if m else None


def check_ami_release(reads: PreflightReads, cfg: KitConfig, stack: str, nodes: str,
                      harm: str) -> Check | None:
    """Would a deploy move the node group of ``stack`` to another AMI release: every node
    replaced, or, to an earlier release, a failed update? None when the config names no release.
    ``nodes`` names the group's nodes, ``harm`` what their replacement does."""
    wanted = cfg.node_ami_release_version
    if wanted is None:
        return None
    subject = f"node_ami_release_version ({stack})"
    found = deployed_resources(reads, AMI_RELEASE, subject, stack, "the node group")
    if isinstance(found, Check):
        return found
    if (ids := nodegroup_id(found)) is None:
        return Check(AMI_RELEASE, subject, PASS, f"{stack} has no node group yet: it starts on {wanted}")
    cluster, nodegroup = ids
    try:
        running = reads.nodegroup(cluster, nodegroup).get("releaseVersion", "")
    except AWS_ERRORS as err:
        return Check(AMI_RELEASE, subject, WARN,
                     f"cannot read the AMI release node group {nodegroup} runs: {describe_error(err)}",
                     "allow eks:DescribeNodegroup, then run preflight again")
    if running == wanted:
        return Check(AMI_RELEASE, subject, PASS, f"{nodes} stay on AMI release {wanted}")
    now, then = _release_order(running), _release_order(wanted)
    if now is not None and then is not None and then < now:
        return Check(
            AMI_RELEASE, subject, FAIL,
            f"node group {nodegroup} runs AMI release {running}, newer than {wanted}: EKS cannot "
            "move a node group back to an earlier release, so the deploy would fail and roll back",
            f"set node_ami_release_version to {running} or a later release of "
            f"Kubernetes {cfg.kubernetes_version}")
    return Check(
        AMI_RELEASE, subject, WARN,
        f"the deploy moves {nodes} from AMI release {running or '(unknown)'} to {wanted}: EKS "
        f"replaces every node of the group in a rolling update, {harm}; and CloudFormation refuses "
        "a release change combined with any other change of the group",
        "deploy it when no job runs (rlkit status), with no other change to the node groups in the "
        "same deploy (sizes, taints, labels, capacity)")


def check_nfd_crds(reads: PreflightReads, cfg: KitConfig) -> Check | None:
    """Would a deploy turn on the device plugin release's NFD subchart, whose CRDs Helm installs
    only with a release's first install? None when this config has no UltraServer group."""
    if not dra_driver.ultraservers_configured(cfg.gpu_instance_types()):
        return None
    addon = nvidia_device_plugin.ADDON
    stack = names.stack_names(cfg.name)["cluster"]
    subject = f"{addon.key} ({stack})"
    template = deployed_template(reads, CHART_CRDS, subject, stack, "the release with its CRDs")
    if isinstance(template, Check):
        return template
    values = [r.get("Properties", {}).get("Values") for r in template.get("Resources", {}).values()
              if r.get("Type") == "Custom::AWSCDK-EKS-HelmChart"
              and r.get("Properties", {}).get("Release") == addon.release]
    if not values:
        return Check(CHART_CRDS, subject, PASS,
                     f"{stack} has no {addon.release} release yet: its first install brings the CRDs")
    deployed = values[0] if isinstance(values[0], dict) else json.loads(values[0] or "{}")
    if (deployed.get("nfd") or {}).get("enabled"):
        return Check(CHART_CRDS, subject, PASS, f"the {addon.release} release has run NFD since its install")
    chart = f"{addon.chart}/charts/node-feature-discovery/crds/"
    return Check(
        CHART_CRDS, subject, FAIL,
        f"this config adds an UltraServer group, which turns on the {addon.release} release's "
        "node-feature-discovery subchart; Helm installs a chart's CRDs only with a release's first "
        "install, so NFD would run without its CRDs and the GPU clique labels (ComputeDomains, the "
        "run's pod affinity) would never appear",
        f"before deploying, apply the CRDs: helm pull {addon.chart} --repo {addon.repository} "
        f"--version {addon.pinned.version} --untar --untardir /tmp/nfd-crds && kubectl apply "
        f"--server-side -f /tmp/nfd-crds/{chart}")


def _helm_releases(template: dict) -> dict[str, dict]:
    """Release name -> properties of each CDK Helm chart resource in a deployed template."""
    return {r["Properties"]["Release"]: r["Properties"] for r in template.get("Resources", {}).values()
            if r.get("Type") == "Custom::AWSCDK-EKS-HelmChart"
            and isinstance(r.get("Properties", {}).get("Release"), str)}


def check_chart_version_crds(reads: PreflightReads, cfg: KitConfig,
                             locate: Callable[[str], Path | None] = chart_crds.locked_chart,
                             ) -> list[Check]:
    """For each enabled add-on: would a deploy move its release to a chart version whose CRDs
    differ, which ``helm upgrade`` never applies? One GetTemplate of the cluster stack; the CRDs
    come from the chart archives ``locate`` finds by name (default: the locked copies)."""
    addons = [a for a in ADDONS if cfg.addon_enabled(a.key)]
    stack = names.stack_names(cfg.name)["cluster"]
    if not addons:
        return []
    template = deployed_template(reads, CHART_CRDS, f"addons ({stack})", stack,
                                  "the releases with their CRDs")
    if isinstance(template, Check):
        return [template]
    releases = _helm_releases(template)
    return [_version_crds(cfg, a, releases.get(a.release), stack, locate) for a in addons]


def _version_crds(cfg: KitConfig, addon: HelmAddon, deployed: dict | None, stack: str,
                  locate: Callable[[str], Path | None]) -> Check:
    subject = f"addons.{addon.key}.version ({stack})"
    wanted = cfg.addons.chart_version(addon.key)
    if deployed is None:
        return Check(CHART_CRDS, subject, PASS,
                     f"{stack} has no {addon.release} release yet: its first install applies the "
                     f"CRDs of chart {wanted}")
    # CDK writes the version it was given; absent or a token: unknown, so never the same
    was = deployed.get("Version") if isinstance(deployed.get("Version"), str) else "(unknown)"
    if was == wanted:
        return Check(CHART_CRDS, subject, PASS, f"the {addon.release} release stays at chart {wanted}")
    values = chart_values(addon.key, cfg)
    archive = f"{addon.chart}-{wanted}.tgz"
    try:
        change = chart_crds.crd_change(addon.chart, was, wanted, values, locate,
                                       deployed_chart=str(deployed.get("Chart") or addon.chart))
    except (OSError, EOFError, ValueError, KeyError, TypeError, tarfile.TarError,
            yaml.YAMLError) as err:
        return Check(CHART_CRDS, subject, WARN,
                     f"cannot read the CRDs of chart archive {archive}: {err}",
                     f"{artifacts.FETCH_HINT}, then run preflight again")
    if change is None:
        return Check(CHART_CRDS, subject, WARN,
                     f"the deploy moves the {addon.release} release from chart {was} to {wanted}, "
                     f"and {archive} is not in the locked copies (../shared/charts, the artifact "
                     "cache): cannot tell whether it brings CRDs Helm would not apply",
                     f"{artifacts.FETCH_HINT}, then run preflight again")
    if not change.wanted.crds:
        return Check(CHART_CRDS, subject, PASS,
                     f"chart {wanted} installs no CRDs with the kit's values: the move from {was} "
                     "leaves none behind")
    if not change.changed:
        return Check(CHART_CRDS, subject, PASS,
                     f"charts {was} and {wanted} define the same CRDs: the move from {was} changes none")
    untar = f"/tmp/{addon.release}-{wanted}-crds"
    unread = "" if change.deployed_read else (
        f" (the {was} archive is not in the locked copies, so each counts as changed)")
    return Check(
        CHART_CRDS, subject, FAIL,
        f"this config moves the {addon.release} release from chart {was} to {wanted}, whose "
        f"CRDs {', '.join(change.changed)} differ from {was}'s{unread}; CDK's Helm handler runs "
        "`helm upgrade`, which never applies a chart's CRDs, so the cluster would keep the old "
        "ones and the API server would drop the new fields of their objects, while offline "
        "validation (against the new CRDs) passes",
        # --force-conflicts: Helm created these CRDs, so their fields have Helm as manager, and
        # server-side apply refuses to take a field over from another manager without it
        f"before deploying, apply the {wanted} CRDs: helm pull {addon.chart} --repo "
        f"{addon.repository} --version {wanted} --untar --untardir {untar} && kubectl apply "
        "--server-side --force-conflicts "
        + " ".join(f"-f {untar}/{folder}" for folder in change.wanted.folders))


def replacement_checks(reads: PreflightReads, cfg: KitConfig) -> list[Check]:
    """Every check here for one config (read-only), and those of ops.preflight_nodegroups. They
    share ``reads``: each stack's template, resources and outputs are read once for all of them."""
    checks = [check_admin_entries(reads, cfg), check_nfd_crds(reads, cfg),
              *check_chart_version_crds(reads, cfg),
              check_zone_order(reads, cfg),
              check_fsx_kept(reads, cfg) if has_shared_fs(cfg) else None,
              check_ami_release(reads, cfg, names.stack_names(cfg.name)["cluster"],
                                "the system nodes",
                                "moving the KubeRay operator and CoreDNS"),
              check_system_nodes_kept(reads, cfg)]
    for name, group in cfg.gpu_node_groups.items():
        checks += [check_placement_group_kept(reads, cfg, name, group),
                   check_node_taints(reads, cfg, name),
                   check_ami_release(reads, cfg, names.gpu_stack_name(cfg.name, name),
                                     f"GPU group {name}'s nodes", "under a running job"),
                   *gpu_group_checks(reads, cfg, name, group)]
    return [c for c in checks if c is not None]

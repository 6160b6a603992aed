"""One EFA GPU managed node group: the `enable_efa_support` switch of this kit.

Everything EFA needs comes together here, so a fork changes it in one place: a security group
that allows all traffic from and to itself, a launch template with the catalog's interface layout,
a cluster placement group, exactly one subnet in the group's AZ, the capacity wiring (on-demand,
capacity block or ODCR), the GPU taint and the labels the manifests select on.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import CfnTag, Fn, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from infra import names
from infra.catalog import InstanceType
from infra.config import GpuNodeGroupConfig
from infra.constructs import node_hardening
from infra.constructs.nag import acknowledge_eks_node_role
from infra.constructs.node_roles import restrict_node_role

_CAPACITY_TYPE = {
    "on-demand": eks.CapacityType.ON_DEMAND,
    "odcr": eks.CapacityType.ON_DEMAND,
    "capacity-block": eks.CapacityType.CAPACITY_BLOCK,
}
_TAINT_EFFECT = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}



def ami_type(instance: InstanceType) -> eks.NodegroupAmiType:
    """The managed node group AMI type the catalog names for ``instance`` (EKS spells the value
    ``AL2023_x86_64_NVIDIA``; the CDK enum member is its upper-case form)."""
    for member in eks.NodegroupAmiType:
        if member.name.lower() == instance.ami_type.lower():
            return member
    raise ValueError(f"{instance.name}: catalog ami_type {instance.ami_type!r} is not an EKS "
                     "managed node group AMI type; fix the entry in infra/catalog/instances.py")


# 2 MiB pages to reserve per node: what the one GPU pod per node requests.
HUGEPAGES_2MI_PAGES = names.HUGEPAGES_2MI_MIB // 2

# Two MIME parts, merged by managed node groups with the NodeConfig EKS generates:
# 1. AL2023 nodeadm NodeConfig: stripe the instance-store NVMe devices into one RAID0 array and put
#    containerd and kubelet state on it (awslabs/amazon-eks-ami, nodeadm `localStorage.strategy`).
# 2. A boot script reserving the huge pages the GPU pods request. The AMI runs the EFA installer
#    with --minimal and promises none. User-data scripts run in cloud-final, and nodeadm-run (which
#    starts kubelet) is ordered after cloud-final [awslabs/amazon-eks-ami 81fec2e
#    templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service], so kubelet sees the
#    pages when it first reports the node's allocatable hugepages-2Mi.
_USER_DATA = f"""MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="RLKIT"

--RLKIT
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0

--RLKIT
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
set -euo pipefail
echo "vm.nr_hugepages = {HUGEPAGES_2MI_PAGES}" > /etc/sysctl.d/90-rlkit-hugepages.conf
sysctl -w vm.nr_hugepages={HUGEPAGES_2MI_PAGES}

--RLKIT--
"""


class EfaNodeGroup(Construct):
    """An EKS managed node group of EFA GPU instances in one AZ.

    The instance type lives in the launch template, not in the node group: aws_eks_v2's
    GPU-family list lacks P5/P5e/P5en, so ``instance_types=[p5.48xlarge]`` with the NVIDIA AMI
    type fails its validation (measured with aws-cdk-lib 2.275).
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, vpc: ec2.IVpc,
                 group_name: str, group: GpuNodeGroupConfig, instance: InstanceType,
                 cluster_security_group_id: str, auto_repair: bool,
                 instance_tags: dict[str, str], taints: Sequence[names.Taint],
                 kubernetes_version: str, ami_release_version: str | None = None,
                 subnet: ec2.ISubnet | None = None) -> None:
        super().__init__(scope, id)
        self.security_group = ec2.SecurityGroup(
            self, "EfaSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"EFA traffic between {group_name} nodes (all traffic to and from itself)",
        )
        # EFA's SRD transport needs every protocol and port open between members, both ways.
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(),
                                             "EFA: all traffic from group members")
        self.security_group.add_egress_rule(self.security_group, ec2.Port.all_traffic(),
                                            "EFA: all traffic to group members")

        # ``subnet`` is given for a Local Zone (UltraServer blocks): not among vpc's subnets.
        subnet_given = subnet is not None
        subnet = subnet or vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                              availability_zones=[group.availability_zone]
                                              ).subnets[0]

        self.placement_group = None
        placement_group_name = group.placement_group_name  # an existing group, e.g. an ODCR's
        if group.uses_placement_group:
            self.placement_group = ec2.CfnPlacementGroup(self, "PlacementGroup",
                                                         strategy="cluster")
            placement_group_name = self.placement_group.ref

        # The cluster security group keeps node <-> control plane traffic working: with explicit
        # interfaces in the launch template EKS does not attach it by itself.
        groups = [self.security_group.security_group_id, cluster_security_group_id]
        interfaces = [
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                network_card_index=spec.network_card_index,
                device_index=spec.device_index,
                interface_type=spec.interface_type.value,
                groups=groups,
                delete_on_termination=True,
                description=f"{group_name} card {spec.network_card_index}",
            )
            for spec in instance.interfaces
        ]
        self.launch_template = ec2.CfnLaunchTemplate(
            self, "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type=instance.name,
                network_interfaces=interfaces,
                # IMDSv2, one hop; encrypted gp3 root: as on the system nodes (node_hardening).
                metadata_options=node_hardening.metadata_options(),
                block_device_mappings=[node_hardening.root_volume(group.root_volume_gib)],
                user_data=Fn.base64(_USER_DATA),
                placement=(ec2.CfnLaunchTemplate.PlacementProperty(
                    group_name=placement_group_name) if placement_group_name else None),
                instance_market_options=(
                    ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(
                        market_type="capacity-block")
                    if group.capacity.type == "capacity-block" else None),
                capacity_reservation_specification=(
                    ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                        capacity_reservation_target=ec2.CfnLaunchTemplate
                        .CapacityReservationTargetProperty(
                            capacity_reservation_id=group.capacity.reservation_id))
                    if group.capacity.reservation_id else None),
                # Tags on the node group (and on this template) do not reach what EC2 launches
                # from it: the instances, their interfaces and volumes carry the environment's tags
                # only through the template's own tag specifications. Teardown's check for
                # leftovers and the cost trail both find GPU nodes by these tags
                # (infra.config.derived.node_group_tags: the environment's and the group's name).
                tag_specifications=[
                    ec2.CfnLaunchTemplate.TagSpecificationProperty(
                        resource_type=kind,
                        tags=[CfnTag(key=k, value=v) for k, v in instance_tags.items()])
                    for kind in ("instance", "volume", "network-interface")],
            ),
        )

        if subnet_given:
            # cfn-lint's us-east-1 instance-type list (E3628) lacks p6e-gb200.36xlarge, which is
            # sold only as UltraServer Capacity Blocks in a Local Zone; preflight checks the
            # reservation's type and zone instead.
            self.launch_template.add_metadata("cfn-lint", {"config": {"ignore_checks": ["E3628"]}})

        self.nodegroup = eks.Nodegroup(
            self, "Nodegroup",
            cluster=cluster,
            ami_type=ami_type(instance),
            release_version=ami_release_version,  # None: the release EKS chooses
            capacity_type=_CAPACITY_TYPE[group.capacity.type],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref,
                version=self.launch_template.attr_latest_version_number),
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            min_size=group.min_size,
            desired_size=group.desired_size,
            max_size=group.max_size,
            labels=group.node_labels(group_name),
            taints=[eks.TaintSpec(key=t.key, value=t.value or None,
                                  effect=_TAINT_EFFECT[t.effect])
                    for t in taints],
            enable_node_auto_repair=auto_repair,
            # Without force, an update does not evict pods a disruption budget protects (the RL
            # job's, manifests/templates/disruption-budget.yaml.j2): it fails and rolls back.
            force_update=group.force_update,
            # Reserved capacity has no spare instance for a surge: replace all nodes in place.
            # On-demand p5s have spares in principle, but a surged node must fit the cluster
            # placement group (which may have no room left: InsufficientInstanceCapacity) and the
            # account's P-instance vCPU quota (192 vCPUs a node), so they go one at a time.
            max_unavailable_percentage=100 if group.is_reserved else None,
            max_unavailable=None if group.is_reserved else 1,
        )
        # MINIMAL terminates old nodes before launching new ones, so an update needs no instance
        # beyond the group's own: it fits the reservation, the placement group and the vCPU quota.
        # The default strategy launches new nodes first [EKS API reference,
        # NodegroupUpdateConfig.updateStrategy].
        cfn_nodegroup = self.nodegroup.node.default_child
        cfn_nodegroup.add_property_override("UpdateConfig.UpdateStrategy", "MINIMAL")
        node_hardening.node_version_override(self.nodegroup, kubernetes_version)
        Tags.of(self.nodegroup).add(names.NODE_GROUP_TAG, group_name)
        # No pod-network rights on the node: the VPC CNI has its own role (node_roles.py).
        restrict_node_role(self.nodegroup.role)
        acknowledge_eks_node_role(self.nodegroup.role)

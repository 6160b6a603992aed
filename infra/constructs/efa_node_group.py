"""One EFA GPU managed node group: the `enable_efa_support` switch of this kit.

Everything EFA needs comes together here, so a fork changes it in one place: a security group
that allows all traffic from and to itself, a launch template with the catalog's interface layout,
a cluster placement group, exactly one subnet in the group's AZ, the capacity wiring (on-demand,
capacity block or ODCR), the GPU taint and the labels the manifests select on.
"""

from __future__ import annotations

from aws_cdk import Fn, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from infra.catalog import InstanceType
from infra.config import GpuNodeGroupConfig
from infra.constructs.nag import acknowledge_eks_node_role

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

# AL2023 nodeadm NodeConfig: stripe the instance-store NVMe devices into one RAID0 array and put
# containerd and kubelet state on it (awslabs/amazon-eks-ami, nodeadm `localStorage.strategy`).
# Managed node groups merge this MIME part with the NodeConfig EKS generates.
_USER_DATA = """MIME-Version: 1.0
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
                 cluster_security_group_id: str) -> None:
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

        subnet = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                    availability_zones=[group.availability_zone]).subnets[0]

        self.placement_group = None
        if group.uses_placement_group:
            self.placement_group = ec2.CfnPlacementGroup(self, "PlacementGroup",
                                                         strategy="cluster")

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
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="required",  # IMDSv2 only
                    http_endpoint="enabled",
                    http_put_response_hop_limit=2,
                ),
                block_device_mappings=[ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name="/dev/xvda",
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=group.root_volume_gib, volume_type="gp3",
                        encrypted=True, delete_on_termination=True,
                    ),
                )],
                user_data=Fn.base64(_USER_DATA),
                placement=(ec2.CfnLaunchTemplate.PlacementProperty(
                    group_name=self.placement_group.ref) if self.placement_group else None),
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
            ),
        )

        self.nodegroup = eks.Nodegroup(
            self, "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=_CAPACITY_TYPE[group.capacity.type],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref,
                version=self.launch_template.attr_latest_version_number),
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            min_size=group.min_size,
            desired_size=group.desired_size,
            max_size=group.max_size,
            labels=group.node_labels(group_name),
            taints=[eks.TaintSpec(key=t.key, value=t.value, effect=_TAINT_EFFECT[t.effect])
                    for t in group.node_taints()],
        )
        Tags.of(self.nodegroup).add("rlkit:node-group", group_name)
        acknowledge_eks_node_role(self.nodegroup.role)

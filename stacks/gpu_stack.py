"""GPU stack: one EFA node group. Replaceable without touching the cluster (capacity blocks end)."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from infra.catalog import INSTANCE_TYPES
from infra.config import KitConfig
from infra.config.derived import gpu_group_taints, node_group_tags
from infra.constructs.efa_node_group import EfaNodeGroup
from infra.names import OutputKeys


class GpuStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, group_name: str,
                 cluster: eks.Cluster, vpc: ec2.IVpc,
                 local_zone_subnets: dict[str, ec2.ISubnet] | None = None, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        group = config.gpu_node_groups[group_name]
        subnet = None
        if group.availability_zone in config.local_zones:
            # A Local Zone subnet is not among the VPC's private subnets (the control plane must
            # not use it): the network stack's own subnet, or the imported VPC's named one.
            if local_zone_subnets is not None:
                subnet = local_zone_subnets[group.availability_zone]
            else:
                subnet = ec2.Subnet.from_subnet_attributes(
                    self, "LocalZoneSubnet",
                    subnet_id=config.vpc.existing.private_subnet_ids[group.availability_zone],
                    availability_zone=group.availability_zone)
        self.node_group = EfaNodeGroup(
            self, "EfaNodeGroup", cluster=cluster, vpc=vpc, group_name=group_name, group=group,
            subnet=subnet,
            instance=INSTANCE_TYPES[group.instance_type],
            cluster_security_group_id=cluster.cluster_security_group_id,
            auto_repair=config.node_health.auto_repair,
            instance_tags=node_group_tags(config, group_name),
            taints=gpu_group_taints(config, group_name),
            kubernetes_version=config.kubernetes_version,
            ami_release_version=config.node_ami_release_version,
        )
        CfnOutput(self, OutputKeys.NODEGROUP_NAME,
                  value=self.node_group.nodegroup.nodegroup_name)
        CfnOutput(self, OutputKeys.NODE_ROLE_ARN, value=self.node_group.nodegroup.role.role_arn)

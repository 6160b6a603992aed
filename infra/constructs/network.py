"""The kit's VPC: a new one across explicitly named AZs, or an existing one imported by IDs."""

from __future__ import annotations

import ipaddress

from aws_cdk import Annotations, RemovalPolicy, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from infra.config import ExistingVpc
from infra.config.derived import PRIVATE_SUBNET_BITS
from infra.constructs.nag import skip_checkov_log_group_kms


class KitVpc(Construct):
    """A VPC sized for GPU nodes: small public subnets, large private ones, NAT, S3 endpoint.

    AZ names come from the config, so synth needs no AZ lookup and records no missing context.
    Private subnets get 1/8 of the VPC each (a /19 in a /16): every GPU pod takes a VPC IP, while
    EFA-only interfaces take none.
    """

    def __init__(self, scope: Construct, id: str, *, cidr: str, availability_zones: list[str],
                 nat_gateways: int, log_retention_days: int,
                 local_zones: tuple[str, ...] = ()) -> None:
        super().__init__(scope, id)
        prefix = ipaddress.ip_network(cidr).prefixlen
        self.vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=availability_zones,
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC,
                                        cidr_mask=prefix + 8, map_public_ip_on_launch=False),
                ec2.SubnetConfiguration(name="private",
                                        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                        cidr_mask=prefix + PRIVATE_SUBNET_BITS),
            ],
            gateway_endpoints={
                # Checkpoints and datasets move between nodes and S3 without NAT charges.
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
            },
            flow_logs={"FlowLogs": ec2.FlowLogOptions(traffic_type=ec2.FlowLogTrafficType.REJECT)},
        )
        # AZs are named in the config on purpose (offline synth, EFA groups pinned to one AZ), so
        # cfn-lint's "avoid hard-coded AZs" warning (W3010) is expected on exactly these subnets.
        for subnet in self.vpc.public_subnets + self.vpc.private_subnets:
            subnet.node.default_child.add_metadata("cfn-lint",
                                                   {"config": {"ignore_checks": ["W3010"]}})
        flow_log_group = self.vpc.node.find_child("FlowLogs").node.find_child("LogGroup")
        skip_checkov_log_group_kms(flow_log_group)
        # Deleted with the VPC it records, like the cluster's log groups: CDK's default (retain)
        # left one tagged group per environment behind, which teardown then reports as a leftover.
        flow_log_group.apply_removal_policy(RemovalPolicy.DESTROY)
        # observability.log_retention_days, like every other kit log group, not CDK's default of
        # 731 days: the network stack (and so this group) stays while a retained file system
        # lives in the VPC. Only LogGroupName is create-only (AWS::Logs::LogGroup's schema,
        # cfn-lint==1.58.0 cfnlint/data/schemas/resources/8614d83fb64a3f33.json,
        # createOnlyProperties) and this group has none, so a change updates it in place.
        flow_log_group.node.default_child.retention_in_days = log_retention_days
        # Subnet tags the AWS Load Balancer Controller uses to pick subnets.
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
        self.local_zone_subnets = self._local_zone_subnets(cidr, local_zones)

    def _local_zone_subnets(self, cidr: str, local_zones: tuple[str, ...]) -> dict[str, ec2.ISubnet]:
        """One private subnet per Local Zone, outside ``vpc.private_subnets`` so the EKS control
        plane (which cannot use Local Zone subnets) never selects it. Its CIDR is one of the last
        two /19-equivalents of the plan, which up to four AZs never reach (public subnets sit in
        the first, private ones in the next four). Default route: the first NAT gateway, in the
        parent region (Local Zones generally have no NAT gateway)."""
        if not local_zones:
            return {}
        plan = list(ipaddress.ip_network(cidr).subnets(prefixlen_diff=PRIVATE_SUBNET_BITS))
        nat = self.vpc.public_subnets[0].node.find_child("NATGateway")
        subnets: dict[str, ec2.ISubnet] = {}
        for i, zone in enumerate(local_zones):
            subnet = ec2.PrivateSubnet(self, f"LocalZone{i + 1}", vpc_id=self.vpc.vpc_id,
                                       availability_zone=zone,
                                       cidr_block=str(plan[len(plan) - 1 - i]),
                                       map_public_ip_on_launch=False)
            subnet.add_default_nat_route(nat.ref)
            subnet.node.default_child.add_metadata("cfn-lint",
                                                   {"config": {"ignore_checks": ["W3010"]}})
            subnets[zone] = subnet
        # S3 (image layers from ECR, checkpoints, datasets) through the gateway endpoint, not
        # the NAT gateway in the parent region: Local Zone subnets "follow the same routing rules
        # as Availability Zone subnets, including the use of route tables" (AWS Local Zones user
        # guide, "How Local Zones work"). Without it every node of a block pulled its image
        # through NAT at $0.045/GB.
        endpoint = self.vpc.node.find_child("S3").node.default_child
        endpoint.route_table_ids = [*endpoint.route_table_ids,
                                    *(s.route_table.route_table_id for s in subnets.values())]
        return subnets


def import_existing_vpc(scope: Construct, id: str, *, existing: ExistingVpc,
                        availability_zones: list[str]) -> ec2.IVpc:
    """Reference an existing VPC by IDs only (``from_vpc_attributes``: no lookup at synth)."""
    public = [existing.public_subnet_ids[az] for az in availability_zones
              if az in existing.public_subnet_ids]
    vpc = ec2.Vpc.from_vpc_attributes(
        scope, id,
        vpc_id=existing.vpc_id,
        availability_zones=availability_zones,
        private_subnet_ids=[existing.private_subnet_ids[az] for az in availability_zones],
        public_subnet_ids=public if len(public) == len(availability_zones) else None,
    )
    Annotations.of(vpc).acknowledge_warning(
        "@aws-cdk/aws-ec2:noSubnetRouteTableId",
        "The kit never reads an imported subnet's route table (it adds no routes or gateway "
        "endpoints to a VPC it does not own), so the config asks for no route table IDs.")
    return vpc

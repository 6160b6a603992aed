"""Network stack: the VPC. Lives longest; everything else sits inside it."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra.config import KitConfig
from infra.constructs.network import KitVpc
from infra.names import OutputKeys


class NetworkStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        network = KitVpc(self, "Network", cidr=config.vpc.cidr,
                         availability_zones=config.availability_zones,
                         nat_gateways=config.vpc.nat_gateways,
                         log_retention_days=config.observability.log_retention_days,
                         local_zones=tuple(config.local_zones))
        self.vpc = network.vpc
        self.local_zone_subnets = network.local_zone_subnets
        CfnOutput(self, OutputKeys.VPC_ID, value=self.vpc.vpc_id)

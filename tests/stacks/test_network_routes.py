"""Every subnet the kit creates for nodes reaches S3 through the VPC's gateway endpoint.

Image layers (ECR serves them from S3), checkpoints and datasets are the nodes' largest traffic;
through the NAT gateway they cost $0.045/GB. The Local Zone subnet of a P6e-GB200 group was left
out of the endpoint's route tables, so every node of a block pulled its image through NAT in the
parent region. Local Zone subnets "follow the same routing rules as Availability Zone subnets,
including the use of route tables" (AWS Local Zones user guide, "How Local Zones work")."""

from __future__ import annotations

import pytest

from tests.support.cdk import NEW_VPC_EXAMPLES, resources


@pytest.mark.parametrize("example", NEW_VPC_EXAMPLES)
def test_every_private_route_table_uses_the_s3_gateway_endpoint(synth, example):
    network = synth(example).template("network")
    (endpoint,) = resources(network, "AWS::EC2::VPCEndpoint").values()
    routed = {r["Ref"] for r in endpoint["Properties"]["RouteTableIds"]}
    private = {a["Properties"]["RouteTableId"]["Ref"]
               for a in resources(network, "AWS::EC2::SubnetRouteTableAssociation").values()
               if "public" not in a["Properties"]["SubnetId"]["Ref"]}
    assert private and private <= routed, sorted(private - routed)

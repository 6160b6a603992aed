"""A GPU group in an AZ without a NAT gateway is warned about before the first deploy.

The warning relies on where CDK puts the NAT gateways of a new VPC: in the first
``vpc.nat_gateways`` of ``availability_zones``. Every example's synthesized network template is
read for that; the warning itself is checked on a variant of an example."""

from __future__ import annotations

import pytest

from infra.config import config_warnings, load_config
from tests.support.cdk import NEW_VPC_EXAMPLES, REPO_ROOT, resources


@pytest.mark.parametrize("example", NEW_VPC_EXAMPLES)
def test_cdk_puts_the_nat_gateways_in_the_first_azs(synth, example):
    s = synth(example)
    network = s.template("network")
    subnets = resources(network, "AWS::EC2::Subnet")
    zones = sorted(subnets[nat["Properties"]["SubnetId"]["Ref"]]["Properties"]["AvailabilityZone"]
                   for nat in resources(network, "AWS::EC2::NatGateway").values())
    assert zones == sorted(s.config.availability_zones[:s.config.vpc.nat_gateways])


def test_a_gpu_group_without_a_nat_gateway_in_its_az_is_warned_about():
    cfg = load_config(REPO_ROOT / "examples" / "p5en-capacity-block.yaml")
    assert not [w for w in config_warnings(cfg) if "NAT gateway" in w]
    one = cfg.model_copy(update={"vpc": cfg.vpc.model_copy(update={"nat_gateways": 1})})
    (warning,) = [w for w in config_warnings(one) if "NAT gateway" in w]
    assert warning.startswith("gpu_node_groups.p5en is in us-east-2b, which has no NAT gateway "
                              "(vpc.nat_gateways: 1 puts them in us-east-2a)")
    assert "Fix: raise vpc.nat_gateways to 2" in warning

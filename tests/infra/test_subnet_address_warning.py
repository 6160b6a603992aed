"""A new VPC's private subnet too small for the addresses its AZ's GPU nodes hold is warned about
before the first deploy (a VPC's CIDR cannot change afterwards).

The warning relies on the subnet sizes the network stack creates (checked on every example's
synthesized template) and on per-type address facts the catalog cross-checks with EC2's data
(tests/infra/test_catalog.py). Before it, a /18 VPC took its 21st p5 node in one AZ with no word:
the VPC CNI holds about 100 addresses a node (its primary and one spare interface of 50 on network
card 0, WARM_ENI_TARGET 1), so that node's pods never got an address."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from infra.config import config_warnings, parse_config
from infra.config.derived import PRIVATE_SUBNET_BITS
from tests.support.cdk import NEW_VPC_EXAMPLES, REPO_ROOT, resources


def group(instance_type="p5.48xlarge", zone="us-east-1a", max_size=2) -> dict:
    return {"instance_type": instance_type, "availability_zone": zone, "min_size": 0,
            "desired_size": min(2, max_size), "max_size": max_size}


def address_warnings(**data) -> list[str]:
    return [w for w in config_warnings(parse_config(data)) if "VPC addresses" in w]


@pytest.mark.parametrize("example", NEW_VPC_EXAMPLES)
def test_each_private_subnet_is_the_size_the_warning_assumes(synth, example):
    s = synth(example)
    masks = {ipaddress.ip_network(r["Properties"]["CidrBlock"]).prefixlen
             for r in resources(s.template("network"), "AWS::EC2::Subnet").values()
             if r["Properties"]["AvailabilityZone"] in s.config.local_zones
             or any(t["Value"] == "Private" for t in r["Properties"].get("Tags", [])
                    if t["Key"] == "aws-cdk:subnet-type")}
    assert masks == {ipaddress.ip_network(s.config.vpc.cidr).prefixlen + PRIVATE_SUBNET_BITS}


def test_the_node_past_the_subnet_is_warned_about_with_the_numbers():
    assert address_warnings(vpc={"cidr": "10.0.0.0/18"}, gpu_node_groups={"p5": group(max_size=19)}) == []
    (warning,) = address_warnings(vpc={"cidr": "10.0.0.0/18"},
                                  gpu_node_groups={"p5": group(max_size=20)})
    assert warning == (
        "the nodes in us-east-1a can hold 2,092 VPC addresses at max_size (gpu_node_groups.p5: "
        "20 nodes x 100; system_nodes: 2 nodes x 30; EKS control plane and FSx interfaces: 32): "
        "the VPC CNI keeps a spare network interface with all its addresses on each "
        "node (WARM_ENI_TARGET 1), and the zone's private subnet (a /21 of vpc.cidr 10.0.0.0/18) has "
        "2,043. Pods on the nodes past that get no address and never start. Fix: set "
        "vpc.pod_addresses (warm_ip_target 2, minimum_ip_target 12: about 15 a node), use a larger "
        "vpc.cidr before the first deploy (a /16 gives each subnet 8,187 addresses), lower the "
        "groups' max_size there, or import a VPC with larger private subnets (vpc.existing).")


def test_groups_of_one_zone_add_up_and_other_zones_do_not():
    both = address_warnings(vpc={"cidr": "10.0.0.0/18"}, gpu_node_groups={
        "p5": group(max_size=10), "p5en": group("p5en.48xlarge", max_size=11)})
    assert len(both) == 1 and "(gpu_node_groups.p5: 10 nodes x 100; gpu_node_groups.p5en: 11 " \
        "nodes x 100; system_nodes: 2 nodes x 30;" in both[0]
    assert address_warnings(vpc={"cidr": "10.0.0.0/18"}, gpu_node_groups={
        "p5": group(max_size=19), "p5en": group("p5en.48xlarge", "us-east-1b", max_size=19)}) == []


def test_a_16_has_no_larger_cidr_to_offer_and_an_imported_vpc_is_not_judged():
    (warning,) = address_warnings(gpu_node_groups={"p5": group(max_size=82)})
    assert "about 15 a node), lower the groups' max_size there" in warning
    assert "larger vpc.cidr" not in warning
    existing = {"vpc_id": "vpc-0123456789abcdef0",
                "private_subnet_ids": {"us-east-1a": "subnet-0123456789abcdef0",
                                       "us-east-1b": "subnet-0123456789abcdef1"}}
    assert address_warnings(vpc={"existing": existing},
                            gpu_node_groups={"p5": group(max_size=200)}) == []


def test_pod_addresses_hold_a_floor_and_a_warm_pool_per_node():
    """vpc.pod_addresses: the VPC CNI keeps MINIMUM_IP_TARGET addresses, WARM_IP_TARGET more once
    pods fill them, plus the interface's own (aws/amazon-vpc-cni-k8s@0c65d58cf2b4, tag v1.23.0,
    docs/eni-and-ip-target.md:34,38: a p3dn with 5/10 holds 10 secondary addresses at 0 pods, not
    49)."""
    few = {"cidr": "10.0.0.0/16", "pod_addresses": {}}
    fleet = {name: group(max_size=200) for name in ("p5", "p5-b", "p5-c")}  # at most 256 a group
    assert address_warnings(vpc=few, gpu_node_groups=dict(list(fleet.items())[:2])) == []
    (warning,) = address_warnings(vpc=few, gpu_node_groups=fleet)
    assert warning.startswith(
        "the nodes in us-east-1a can hold 9,062 VPC addresses at max_size (gpu_node_groups.p5: "
        "200 nodes x 15; gpu_node_groups.p5-b: 200 nodes x 15; gpu_node_groups.p5-c: 200 nodes x "
        "15; system_nodes: 2 nodes x 15; EKS control plane and FSx interfaces: 32): each node holds its vpc.pod_addresses floor (12) and warm pool (2) and its "
        "interface's own address, and the zone's private subnet (a /19 of vpc.cidr 10.0.0.0/16) has "
        "8,187.")
    assert "set vpc.pod_addresses" not in warning  # already set: the other fixes remain


def test_pod_addresses_without_a_floor_hold_the_pods_addresses():
    """A floor of 0 (or under the pods) does not make a node hold fewer than its pods' addresses:
    it holds those, the warm pool and the interface's own (about 10 pods: 10 + 2 + 1)."""
    few = {"cidr": "10.0.0.0/16", "pod_addresses": {"warm_ip_target": 2, "minimum_ip_target": 0}}
    fleet = {name: group(max_size=210) for name in ("p5", "p5-b", "p5-c")}
    (warning,) = address_warnings(vpc=few, gpu_node_groups=fleet)
    assert warning.startswith(
        "the nodes in us-east-1a can hold 8,248 VPC addresses at max_size (gpu_node_groups.p5: "
        "210 nodes x 13; gpu_node_groups.p5-b: 210 nodes x 13; gpu_node_groups.p5-c: 210 nodes x "
        "13; system_nodes: 2 nodes x 13; EKS control plane and FSx interfaces: 32): each node holds an address for each of its pods (about 10, above its "
        "vpc.pod_addresses floor of 0) and warm pool (2) and its interface's own address, and the "
        "zone's private subnet (a /19 of vpc.cidr 10.0.0.0/16) has 8,187.")


def test_the_system_nodes_and_a_margin_share_the_subnet():
    """81 p5 nodes need 8,100 of a /19's 8,187 addresses: with the system nodes' share (2 of the 4
    per AZ, 30 each) and the EKS control plane's and FSx's interfaces (32) they need 8,192."""
    assert address_warnings(gpu_node_groups={"p5": group(max_size=80)}) == []
    (warning,) = address_warnings(gpu_node_groups={"p5": group(max_size=81)})
    assert warning.startswith("the nodes in us-east-1a can hold 8,192 VPC addresses")


def test_a_local_zone_subnet_holds_only_its_gpu_nodes():
    from infra.config.warnings import system_node_addresses
    data = yaml.safe_load((REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml").read_text())
    cfg = parse_config(data)
    assert system_node_addresses(cfg) == (2, 2 * 15)
    assert address_warnings(**data) == []


def test_the_default_system_type_holds_15_addresses_an_interface():
    """The figure warnings.py counts for m7i.xlarge, against moto 5.2.5's EC2 instance data."""
    import gzip
    import json

    import moto
    from infra.config.warnings import SYSTEM_NODE_IPV4_PER_INTERFACE
    from infra.versions import DEFAULT_SYSTEM_INSTANCE_TYPE

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    data = json.loads(gzip.decompress(path.read_bytes()))
    assert SYSTEM_NODE_IPV4_PER_INTERFACE == {DEFAULT_SYSTEM_INSTANCE_TYPE: data[
        DEFAULT_SYSTEM_INSTANCE_TYPE]["NetworkInfo"]["Ipv4AddressesPerInterface"]}

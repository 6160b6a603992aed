"""Preflight of an imported VPC (ops/preflight_vpc.py): DNS, the subnets as listed, egress.
botocore's Stubber answers, so requests and answers are checked against EC2's model."""

from __future__ import annotations

from infra.config import load_config
from infra.problems import FAIL, PASS, WARN
from ops import preflight_vpc
from tests.support import REPO_ROOT
from tests.support.preflight import stubbed

CFG = load_config(REPO_ROOT / "examples" / "existing-vpc.yaml")
VPC = CFG.vpc.existing.vpc_id
PRIVATE = CFG.vpc.existing.private_subnet_ids  # eu-north-1a/b -> subnet ids
PUBLIC = CFG.vpc.existing.public_subnet_ids


def subnets(**moved) -> list[dict]:
    """The example's subnets as EC2 describes them; ``moved`` maps a subnet ID to other fields."""
    listed = {**{sid: z for z, sid in PRIVATE.items()}, **{sid: z for z, sid in PUBLIC.items()}}
    return [{"SubnetId": sid, "VpcId": VPC, "AvailabilityZone": zone, **moved.get(sid, {})}
            for sid, zone in sorted(listed.items())]


def ec2_answering(dns=(True, True), found=None, tables=None):
    ec2, stub = stubbed("ec2", "eu-north-1")
    for attribute, key, value in (("enableDnsSupport", "EnableDnsSupport", dns[0]),
                                  ("enableDnsHostnames", "EnableDnsHostnames", dns[1])):
        stub.add_response("describe_vpc_attribute", {"VpcId": VPC, key: {"Value": value}},
                          {"VpcId": VPC, "Attribute": attribute})
    ids = sorted({*PRIVATE.values(), *PUBLIC.values()})
    if found is None:
        stub.add_client_error("describe_subnets", "InvalidSubnetID.NotFound",
                              f"The subnet ID '{ids[0]}' does not exist",
                              expected_params={"SubnetIds": ids})
    else:
        stub.add_response("describe_subnets", {"Subnets": found}, {"SubnetIds": ids})
    if tables is not None:
        stub.add_response("describe_route_tables", {"RouteTables": tables},
                          {"Filters": [{"Name": "vpc-id", "Values": [VPC]}]})
    stub.activate()
    return ec2


def table(routes, *, main=False, subnet_ids=()):
    return {"RouteTableId": f"rtb-{len(subnet_ids)}{int(main)}0123456789abcde", "VpcId": VPC,
            "Associations": ([{"Main": True}] if main else [])
            + [{"Main": False, "SubnetId": s} for s in subnet_ids],
            "Routes": [{"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active"},
                       *routes]}


NAT = {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123456789abcdef0", "State": "active"}
IGW = {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0123456789abcdef0", "State": "active"}


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_vpc_the_kit_creates_is_not_checked():
    assert preflight_vpc.vpc_checks(None, load_config(None)) == []


def test_a_sound_imported_vpc_passes_every_check():
    checks = by_name(preflight_vpc.vpc_checks(
        ec2_answering(found=subnets(), tables=[table([NAT], subnet_ids=list(PRIVATE.values()))]), CFG))
    assert {n: c.status for n, c in checks.items()} == {
        preflight_vpc.VPC_DNS: PASS, preflight_vpc.VPC_SUBNETS: PASS, preflight_vpc.VPC_EGRESS: PASS}


def test_dns_hostnames_off_fails_naming_the_attribute_and_the_command():
    check = by_name(preflight_vpc.vpc_checks(
        ec2_answering(dns=(True, False), found=subnets(), tables=[table([NAT], main=True)]), CFG))[
        preflight_vpc.VPC_DNS]
    assert (check.status, check.detail) == (
        FAIL, "enableDnsHostnames is off: nodes register through the cluster's private endpoint, "
              "which they resolve only with both on")
    assert f"aws ec2 modify-vpc-attribute --vpc-id {VPC}" in check.fix


def test_a_subnet_in_another_zone_or_vpc_fails_naming_the_field():
    """The stacks take each subnet's zone from the config: listed under the wrong zone, a GPU
    group would be placed away from its reservation."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    check = by_name(preflight_vpc.vpc_checks(ec2_answering(found=subnets(**{
        a: {"AvailabilityZone": "eu-north-1b"}, b: {"VpcId": "vpc-0fedcba9876543210"}})), CFG))[
        preflight_vpc.VPC_SUBNETS]
    assert check.status == FAIL
    assert check.detail == (
        f"vpc.existing.private_subnet_ids.eu-north-1a = '{a}': in eu-north-1b, not eu-north-1a; "
        f"vpc.existing.private_subnet_ids.eu-north-1b = '{b}': in vpc-0fedcba9876543210, not {VPC}")
    assert preflight_vpc.VPC_EGRESS not in by_name(preflight_vpc.vpc_checks(
        ec2_answering(found=subnets(**{a: {"AvailabilityZone": "eu-north-1b"}})), CFG))


def test_a_missing_subnet_fails_with_ec2s_words():
    check = by_name(preflight_vpc.vpc_checks(ec2_answering(), CFG))[preflight_vpc.VPC_SUBNETS]
    assert check.status == FAIL and "does not exist" in check.detail


def test_private_subnets_without_a_usable_default_route_fail():
    """A subnet on the main table with no default route, and one whose default route goes to an
    internet gateway (nodes have no public address), both fail: the cluster stack's Helm handler
    runs in these subnets and fetches the charts from the internet, which VPC endpoints do not
    reach; the other's NAT route passes."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    tables = [table([], main=True), table([IGW], subnet_ids=[b])]
    check = by_name(preflight_vpc.vpc_checks(ec2_answering(found=subnets(), tables=tables), CFG))[
        preflight_vpc.VPC_EGRESS]
    assert check.status == FAIL
    assert check.detail == (
        f"{a} (eu-north-1a, route table rtb-010123456789abcde): no default route; "
        f"{b} (eu-north-1b, route table rtb-100123456789abcde): only to an internet gateway, which "
        "nodes without a public address cannot use: nothing there reaches the internet, and the "
        "cluster stack's Helm handler (in these subnets) downloads the add-on charts from "
        "aws.github.io, nvidia.github.io, ray-project.github.io, and the nodes pull the add-ons' "
        "images from nvcr.io, quay.io and registry.k8s.io; VPC endpoints reach AWS services only")
    assert check.fix.startswith("route 0.0.0.0/0 to a NAT gateway")
    blackhole = dict(NAT, State="blackhole")
    assert by_name(preflight_vpc.vpc_checks(ec2_answering(found=subnets(), tables=[
        table([blackhole], main=True)]), CFG))[preflight_vpc.VPC_EGRESS].status == FAIL


def test_a_firewall_endpoint_passes_and_a_virtual_private_gateway_warns():
    """EC2 reports a Gateway Load Balancer endpoint (a firewall on the way out) and a virtual
    private gateway under GatewayId, like an internet gateway: only igw- reaches nothing."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    firewall = dict(IGW, GatewayId="vpce-0123456789abcdef0")
    on_prem = dict(IGW, GatewayId="vgw-0123456789abcdef0")
    egress = lambda tables: by_name(preflight_vpc.vpc_checks(  # noqa: E731
        ec2_answering(found=subnets(), tables=tables), CFG))[preflight_vpc.VPC_EGRESS]
    assert egress([table([firewall], main=True)]).status == PASS
    check = egress([table([firewall], main=True), table([on_prem], subnet_ids=[b])])
    assert check.status == WARN and check.detail.startswith(
        f"{b} (eu-north-1b, route table rtb-100123456789abcde): to a virtual private gateway "
        "(your own network): whether that reaches the internet is not visible from here")
    assert a not in check.detail


def test_chart_hosts_follow_the_enabled_add_ons():
    """Each host is an enabled add-on record's repository: the DRA driver's OCI registry only
    where it is on (GB200)."""
    gb200 = load_config(REPO_ROOT / "examples/p6e-gb200-ultraserver.yaml")
    assert preflight_vpc.chart_hosts(CFG) == ["aws.github.io", "nvidia.github.io",
                                              "ray-project.github.io"]
    assert preflight_vpc.chart_hosts(gb200)[-1] == "registry.k8s.io"

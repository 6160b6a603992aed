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


def ec2_answering(dns=(True, True), found=None, tables=None, endpoints=()):
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
        stub.add_response("describe_vpc_endpoints", {"VpcEndpoints": list(endpoints)},
                          {"Filters": [{"Name": "vpc-id", "Values": [VPC]}]})
    stub.activate()
    return ec2


def table(routes, *, main=False, subnet_ids=()):
    return {"RouteTableId": f"rtb-{len(subnet_ids)}{int(main)}0123456789abcde", "VpcId": VPC,
            "Associations": ([{"Main": True}] if main else [])
            + [{"Main": False, "SubnetId": s} for s in subnet_ids],
            "Routes": [{"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active"},
                       *routes]}


def s3_endpoint(*route_table_ids, service="com.amazonaws.eu-north-1.s3", type_="Gateway",
                state="available"):
    """A VPC endpoint as EC2 describes it (the state in the lower case EC2 answers)."""
    return {"VpcEndpointId": "vpce-0123456789abcdef0", "VpcEndpointType": type_, "VpcId": VPC,
            "ServiceName": service, "State": state, "RouteTableIds": list(route_table_ids)}


NAT = {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123456789abcdef0", "State": "active"}
IGW = {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0123456789abcdef0", "State": "active"}


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_vpc_the_kit_creates_is_not_checked():
    assert preflight_vpc.vpc_checks(None, load_config(None)) == []


def test_a_sound_imported_vpc_passes_every_check():
    private = table([NAT], subnet_ids=list(PRIVATE.values()))
    checks = by_name(preflight_vpc.vpc_checks(ec2_answering(
        found=subnets(), tables=[private], endpoints=[s3_endpoint(private["RouteTableId"])]), CFG))
    assert {n: c.status for n, c in checks.items()} == {
        preflight_vpc.VPC_DNS: PASS, preflight_vpc.VPC_SUBNETS: PASS, preflight_vpc.VPC_EGRESS: PASS,
        preflight_vpc.VPC_S3_ENDPOINT: PASS}


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


def s3_check(tables, endpoints=(), cfg=CFG):
    return by_name(preflight_vpc.vpc_checks(ec2_answering(
        found=subnets(), tables=tables, endpoints=endpoints), cfg))[preflight_vpc.VPC_S3_ENDPOINT]


def test_node_subnets_without_an_s3_gateway_endpoint_warn_naming_the_cost_and_the_command():
    """A NAT route and no S3 gateway endpoint: every checkpoint save and restore and every image
    layer (ECR serves them from S3) goes through the NAT gateway, billed per GB. Before: this
    passed preflight. The example's GPU group and file system are in eu-north-1a, so only that
    subnet's route table is named (eu-north-1b holds system nodes only)."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    rtb_a, rtb_b = table([NAT], subnet_ids=[a]), table([NAT], main=True)
    check = s3_check([rtb_a, rtb_b])
    assert check.status == WARN
    assert check.detail == (
        f"route table {rtb_a['RouteTableId']} ({a}: GPU group p5 and the file system): no route "
        f"to S3 through a gateway endpoint of {VPC}, so S3 traffic from there takes the default "
        "route, and a NAT gateway bills each GB it processes (the rate is not verified here): "
        "every checkpoint save and restore (hundreds of GB each for a large model) and every "
        "image layer the nodes pull from ECR (ECR serves the layers from S3)")
    assert check.fix == (
        f"create an S3 gateway endpoint for these route tables (aws ec2 create-vpc-endpoint "
        f"--vpc-id {VPC} --vpc-endpoint-type Gateway --service-name com.amazonaws.eu-north-1.s3 "
        f"--route-table-ids {rtb_a['RouteTableId']}), or ask the VPC's owner to")
    # An interface endpoint for S3, a gateway endpoint of another service or region, or one being
    # deleted does not route these tables: still a warning.
    for other in (s3_endpoint(rtb_a["RouteTableId"], type_="Interface"),
                  s3_endpoint(rtb_a["RouteTableId"], service="com.amazonaws.eu-north-1.dynamodb"),
                  s3_endpoint(rtb_a["RouteTableId"], service="com.amazonaws.eu-west-1.s3"),
                  s3_endpoint(rtb_a["RouteTableId"], state="deleting")):
        assert s3_check([rtb_a, rtb_b], [other]).status == WARN, other
    assert s3_check([rtb_a, rtb_b], [s3_endpoint(rtb_a["RouteTableId"])]).status == PASS
    assert b not in check.detail


def test_each_node_route_table_without_the_endpoint_is_named_and_added_to_the_existing_one():
    """A GPU group in each zone: the route table the existing S3 endpoint leaves out is named, and
    the fix adds it to that endpoint; a subnet on the VPC's main table is checked by that table."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    groups = dict(CFG.gpu_node_groups)
    groups["p5b"] = groups["p5"].model_copy(update={"availability_zone": "eu-north-1b"})
    cfg = CFG.model_copy(update={"gpu_node_groups": groups})
    rtb_a, main = table([NAT], subnet_ids=[a]), table([NAT], main=True)
    check = s3_check([rtb_a, main], [s3_endpoint(rtb_a["RouteTableId"])], cfg)
    assert check.status == WARN
    assert check.detail.startswith(
        f"route table {main['RouteTableId']} ({b}: GPU group p5b): no route to S3 through a "
        f"gateway endpoint of {VPC}")
    assert check.fix == (
        "add these route tables to the VPC's S3 gateway endpoint (aws ec2 modify-vpc-endpoint "
        f"--vpc-endpoint-id vpce-0123456789abcdef0 --add-route-table-ids {main['RouteTableId']}), "
        "or ask the VPC's owner to")
    assert s3_check([rtb_a, main], [s3_endpoint(rtb_a["RouteTableId"], main["RouteTableId"])],
                    cfg).status == PASS


def test_the_file_systems_subnet_is_checked_in_its_own_zone():
    """The file system (and the pods that mount it) may sit in another zone than the GPU group."""
    a, b = PRIVATE["eu-north-1a"], PRIVATE["eu-north-1b"]
    storage = CFG.storage.model_copy(update={"shared_filesystem": CFG.storage.shared_filesystem
                                             .model_copy(update={"availability_zone": "eu-north-1b"})})
    cfg = CFG.model_copy(update={"storage": storage})
    rtb_a, rtb_b = table([NAT], subnet_ids=[a]), table([NAT], main=True)
    check = s3_check([rtb_a, rtb_b], [s3_endpoint(rtb_a["RouteTableId"])], cfg)
    assert check.status == WARN and check.detail.startswith(
        f"route table {rtb_b['RouteTableId']} ({b}: the file system): no route to S3")


def test_unreadable_vpc_endpoints_warn_naming_the_permission():
    ec2, stub = stubbed("ec2", "eu-north-1")
    stub.add_client_error("describe_vpc_endpoints", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.",
                          expected_params={"Filters": [{"Name": "vpc-id", "Values": [VPC]}]})
    stub.activate()
    check = preflight_vpc.check_s3_endpoint(ec2, [table([NAT], main=True)], CFG)
    assert (check.status, check.detail, check.fix) == (
        WARN, "cannot read the VPC endpoints: DescribeVpcEndpoints failed: UnauthorizedOperation: "
              "You are not authorized to perform this operation.",
        "allow ec2:DescribeVpcEndpoints, then run preflight again")


def test_the_check_reads_moto_s3_gateway_endpoint_as_ec2_answers(monkeypatch):
    """The requests and answers through moto's EC2 (lower-case state, RouteTableIds): a VPC with
    a NAT route warns until a gateway endpoint for the region's S3 lists its route table."""
    import boto3
    from moto import mock_aws

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with mock_aws():
        _moto_vpc_warns_until_its_route_table_has_the_endpoint(boto3.client("ec2", "eu-north-1"))


def _moto_vpc_warns_until_its_route_table_has_the_endpoint(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
        ec2.modify_vpc_attribute(VpcId=vpc, **{attribute: {"Value": True}})
    ids = {zone: ec2.create_subnet(VpcId=vpc, CidrBlock=cidr,
                                   AvailabilityZone=zone)["Subnet"]["SubnetId"]
           for zone, cidr in (("eu-north-1a", "10.0.0.0/19"), ("eu-north-1b", "10.0.32.0/19"))}
    rtb = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    for sid in ids.values():
        ec2.associate_route_table(RouteTableId=rtb, SubnetId=sid)
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.255.0/24",
                               AvailabilityZone="eu-north-1a")["Subnet"]["SubnetId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=ec2.allocate_address(
        Domain="vpc")["AllocationId"])["NatGateway"]["NatGatewayId"]
    ec2.create_route(RouteTableId=rtb, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    cfg = CFG.model_copy(update={"vpc": CFG.vpc.model_copy(update={"existing": CFG.vpc.existing
                         .model_copy(update={"vpc_id": vpc, "private_subnet_ids": ids,
                                             "public_subnet_ids": {}})})})
    checks = by_name(preflight_vpc.vpc_checks(ec2, cfg))
    assert checks[preflight_vpc.VPC_EGRESS].status == PASS
    assert checks[preflight_vpc.VPC_S3_ENDPOINT].status == WARN
    assert f"route table {rtb} ({ids['eu-north-1a']}: GPU group p5 and the file system)" in \
        checks[preflight_vpc.VPC_S3_ENDPOINT].detail
    endpoint = ec2.create_vpc_endpoint(
        VpcId=vpc, VpcEndpointType="Gateway", ServiceName="com.amazonaws.eu-north-1.s3",
        RouteTableIds=[rtb])["VpcEndpoint"]["VpcEndpointId"]
    # EC2 (here moto) adds a route to S3's prefix list through the endpoint to the table.
    assert [r["GatewayId"] for r in ec2.describe_route_tables(RouteTableIds=[rtb])[
        "RouteTables"][0]["Routes"] if r.get("DestinationPrefixListId")] == [endpoint]
    checks = by_name(preflight_vpc.vpc_checks(ec2, cfg))
    assert {n: c.status for n, c in checks.items()} == dict.fromkeys(checks, PASS)


def test_unreadable_route_tables_warn_once_naming_the_permission():
    """Neither egress nor the S3 endpoint can be judged without the route tables: one warning."""
    ec2, stub = stubbed("ec2", "eu-north-1")
    for attribute, key in (("enableDnsSupport", "EnableDnsSupport"),
                           ("enableDnsHostnames", "EnableDnsHostnames")):
        stub.add_response("describe_vpc_attribute", {"VpcId": VPC, key: {"Value": True}},
                          {"VpcId": VPC, "Attribute": attribute})
    stub.add_response("describe_subnets", {"Subnets": subnets()},
                      {"SubnetIds": sorted({*PRIVATE.values(), *PUBLIC.values()})})
    stub.add_client_error("describe_route_tables", "UnauthorizedOperation", "not authorized",
                          expected_params={"Filters": [{"Name": "vpc-id", "Values": [VPC]}]})
    stub.activate()
    checks = by_name(preflight_vpc.vpc_checks(ec2, CFG))
    assert preflight_vpc.VPC_S3_ENDPOINT not in checks
    egress = checks[preflight_vpc.VPC_EGRESS]
    assert (egress.status, egress.fix) == (WARN, "allow ec2:DescribeRouteTables, then run "
                                                 "preflight again")
    assert egress.detail.startswith("cannot read the route tables: DescribeRouteTables failed: "
                                    "UnauthorizedOperation")

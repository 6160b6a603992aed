"""Preflight checks of an imported VPC (``vpc.existing``): what EKS and the nodes need from a VPC
the kit does not create, read before a deploy that would otherwise fail twenty minutes in.

- **DNS** (EC2 DescribeVpcAttribute): the kit always turns on the cluster endpoint's private
  access, and nodes register through it only when the VPC resolves and names hosts
  (``enableDnsSupport`` and ``enableDnsHostnames``; EKS user guide, cluster endpoint access).
- **Subnets** (EC2 DescribeSubnets): each configured subnet exists, belongs to ``vpc_id`` and sits
  in the zone it is listed under. The stacks import them by ID with the zone from the config (no
  lookup at synth), so a wrong zone places a GPU group away from its reservation, and a subnet of
  another VPC fails the cluster's creation.
- **Egress** (EC2 DescribeRouteTables): a private subnet's route table (its own, else the VPC's
  main one) has a default route the nodes can use: a NAT gateway, transit gateway, peering,
  network interface or Gateway Load Balancer endpoint (a firewall); one to a virtual private
  gateway warns (the user's own network decides). Nodes have no public address (the launch
  template gives none), so a default route to an internet gateway reaches nothing. VPC endpoints are not a way around it here (they
  are for the EKS user guide's private clusters): CDK runs the cluster stack's Helm handler in
  these subnets whenever the endpoint has private access, which the kit always gives it
  (aws-cdk-lib 2.275.0 ``aws-eks-v2/lib/cluster.js``), and it downloads each add-on's chart from
  its repository on the internet (the records' ``repository``); the nodes pull the add-ons'
  images from registries outside AWS (nvcr.io, quay.io, registry.k8s.io). Without a way out the
  cluster stack fails and rolls back.
- **S3 endpoint** (EC2 DescribeVpcEndpoints): the route table of each GPU group's subnet and of the
  file system's (where the pods that mount it run) is one of the route tables of a gateway
  endpoint of the VPC for the region's S3 (``com.amazonaws.<region>.s3``). The endpoint names its
  route tables itself (``RouteTableIds``; EC2 adds a route to S3's prefix list through the
  endpoint to each), so no prefix list is looked up. Without one, S3 traffic takes the default
  route: every checkpoint save and restore and every image layer pulled from ECR (ECR serves
  layers from S3) is then billed per GB by the NAT gateway. A warning, not a failure: it works,
  at a cost. The kit's own VPC has the endpoint on every private route table
  (``infra/constructs/network.py``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from infra.addons import ADDONS
from infra.config import KitConfig
from infra.config.derived import has_shared_fs, shared_fs_availability_zone
from infra.problems import FAIL, PASS, WARN
from ops.aws import AWS_ERRORS, describe_error
from ops.check_result import Check

VPC_DNS = "existing VPC DNS"
VPC_SUBNETS = "existing VPC subnets"
VPC_EGRESS = "existing VPC egress"
VPC_S3_ENDPOINT = "existing VPC S3 endpoint"
# Route targets that carry a private node's traffic out (Route members of the EC2 model).
_EGRESS_TARGETS = ("NatGatewayId", "TransitGatewayId", "NetworkInterfaceId",
                   "VpcPeeringConnectionId", "InstanceId", "CoreNetworkArn")


def vpc_checks(ec2: Any, cfg: KitConfig) -> list[Check]:
    """The checks of ``vpc.existing``; none for a VPC the kit creates."""
    existing = cfg.vpc.existing
    if existing is None:
        return []
    return [check_dns(ec2, existing.vpc_id), *check_subnets_and_egress(ec2, cfg)]


def check_dns(ec2: Any, vpc_id: str) -> Check:
    subject = f"vpc.existing.vpc_id = {vpc_id!r}"
    off = []
    try:
        for attribute, key in (("enableDnsSupport", "EnableDnsSupport"),
                               ("enableDnsHostnames", "EnableDnsHostnames")):
            answer = ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute=attribute)
            if not answer.get(key, {}).get("Value"):
                off.append(attribute)
    except AWS_ERRORS as err:
        return Check(VPC_DNS, subject, FAIL, f"cannot read the VPC: {describe_error(err)}",
                     "check vpc.existing.vpc_id and the region, and allow ec2:DescribeVpcAttribute")
    if off:
        return Check(VPC_DNS, subject, FAIL,
                     f"{' and '.join(off)} {'is' if len(off) == 1 else 'are'} off: nodes register "
                     "through the cluster's private endpoint, which they resolve only with both on",
                     f"turn on both (aws ec2 modify-vpc-attribute --vpc-id {vpc_id} "
                     "--enable-dns-support '{\"Value\":true}', then the same with "
                     "--enable-dns-hostnames), or ask the VPC's owner to")
    return Check(VPC_DNS, subject, PASS, "DNS resolution and hostnames are on")


def check_subnets_and_egress(ec2: Any, cfg: KitConfig) -> list[Check]:
    existing = cfg.vpc.existing
    listed = {**{(f"vpc.existing.private_subnet_ids.{zone}", zone): sid
                 for zone, sid in existing.private_subnet_ids.items()},
              **{(f"vpc.existing.public_subnet_ids.{zone}", zone): sid
                 for zone, sid in existing.public_subnet_ids.items()}}
    subject = "vpc.existing"
    try:
        found = {s["SubnetId"]: s for s in ec2.describe_subnets(
            SubnetIds=sorted(set(listed.values())))["Subnets"]}
    except AWS_ERRORS as err:
        return [Check(VPC_SUBNETS, subject, FAIL, describe_error(err),
                      "list subnets that exist in this region under vpc.existing, each under the "
                      "zone it is in (aws ec2 describe-subnets --filters "
                      f"Name=vpc-id,Values={existing.vpc_id})")]
    wrong = []
    for (path, zone), sid in listed.items():
        subnet = found.get(sid)
        if subnet is None:
            wrong.append(f"{path} = {sid!r}: not found")
        elif subnet.get("VpcId") != existing.vpc_id:
            wrong.append(f"{path} = {sid!r}: in {subnet.get('VpcId')}, not {existing.vpc_id}")
        elif subnet.get("AvailabilityZone") != zone:
            wrong.append(f"{path} = {sid!r}: in {subnet.get('AvailabilityZone')}, not {zone}")
    if wrong:
        return [Check(VPC_SUBNETS, subject, FAIL, "; ".join(wrong),
                      f"list each subnet of {existing.vpc_id} under the zone it is in (aws ec2 "
                      f"describe-subnets --filters Name=vpc-id,Values={existing.vpc_id} --query "
                      "'Subnets[].[AvailabilityZone,SubnetId]')")]
    checks = [Check(VPC_SUBNETS, subject, PASS,
                    f"{len(listed)} subnet(s) of {existing.vpc_id}, each in its zone")]
    try:
        pages = ec2.get_paginator("describe_route_tables").paginate(
            Filters=[{"Name": "vpc-id", "Values": [existing.vpc_id]}])
        tables = [t for page in pages for t in page.get("RouteTables", [])]
    except AWS_ERRORS as err:  # neither egress nor the S3 endpoint can be seen without them
        return checks + [Check(VPC_EGRESS, "vpc.existing.private_subnet_ids", WARN,
                               f"cannot read the route tables: {describe_error(err)}",
                               "allow ec2:DescribeRouteTables, then run preflight again")]
    return checks + [check_egress(tables, existing.private_subnet_ids, cfg),
                     check_s3_endpoint(ec2, tables, cfg)]


def route_table(tables: list[dict], subnet_id: str) -> dict:
    """A subnet's route table: the one associated with it, else the VPC's main one ({} if none)."""
    mine = [t for t in tables for a in t.get("Associations", []) if a.get("SubnetId") == subnet_id]
    main = [t for t in tables for a in t.get("Associations", []) if a.get("Main")]
    return (mine or main or [{}])[0]


def chart_hosts(cfg: KitConfig) -> list[str]:
    """The hosts the enabled add-ons' charts are downloaded from, in registry order."""
    hosts = [urlparse(a.repository).hostname or a.repository for a in ADDONS
             if cfg.addon_enabled(a.key)]
    return list(dict.fromkeys(hosts))


def check_egress(tables: list[dict], private: dict[str, str], cfg: KitConfig) -> Check:
    subject = "vpc.existing.private_subnet_ids"
    without, unsure = [], []
    for zone, sid in sorted(private.items()):
        table = route_table(tables, sid)
        where = f"{sid} ({zone}, route table {table.get('RouteTableId', '?')})"
        defaults = [r for r in table.get("Routes", []) if r.get("DestinationCidrBlock") == "0.0.0.0/0"
                    and r.get("State", "active") == "active"]
        gateways = [r.get("GatewayId", "") for r in defaults]
        # EC2 reports a Gateway Load Balancer endpoint (a firewall in the path) and a virtual
        # private gateway under GatewayId too, beside an internet gateway's igw-.
        if any(key in r for r in defaults for key in _EGRESS_TARGETS) or \
                any(g.startswith("vpce-") for g in gateways):
            continue
        if any(g.startswith("vgw-") for g in gateways):
            unsure.append(f"{where}: to a virtual private gateway (your own network)")
        else:
            without.append(f"{where}: " + ("only to an internet gateway, which nodes without a "
                                           "public address cannot use" if defaults else
                                           "no default route"))
    hosts = chart_hosts(cfg)
    needs = ((f"the cluster stack's Helm handler (in these subnets) downloads the add-on charts "
              f"from {', '.join(hosts)}, and " if hosts else "")
             + "the nodes pull the add-ons' images from nvcr.io, quay.io and registry.k8s.io")
    if without:
        return Check(VPC_EGRESS, subject, FAIL,
                     "; ".join(without) + f": nothing there reaches the internet, and {needs}; "
                     "VPC endpoints reach AWS services only",
                     "route 0.0.0.0/0 to a NAT gateway, or to a transit gateway or firewall with "
                     "internet egress, then run preflight again")
    if unsure:
        return Check(VPC_EGRESS, subject, WARN,
                     "; ".join(unsure) + f": whether that reaches the internet is not visible "
                     f"from here, and {needs}",
                     "make sure that network sends internet traffic on (a proxy does not do: the "
                     "kit sets none), or route 0.0.0.0/0 to a NAT gateway")
    return Check(VPC_EGRESS, subject, PASS, "every private subnet has a default route for its nodes")


def node_subnets(cfg: KitConfig) -> dict[str, list[str]]:
    """Private subnet ID -> what runs there that moves data to and from S3: the GPU groups, and
    the file system (the pods that mount it run in its zone)."""
    existing = cfg.vpc.existing
    users: dict[str, list[str]] = {}
    for name, group in sorted(cfg.gpu_node_groups.items()):
        sid = existing.private_subnet_ids.get(group.availability_zone)
        if sid:
            users.setdefault(sid, []).append(f"GPU group {name}")
    if has_shared_fs(cfg):
        sid = existing.private_subnet_ids.get(shared_fs_availability_zone(cfg))
        if sid:
            users.setdefault(sid, []).append("the file system")
    return users


def check_s3_endpoint(ec2: Any, tables: list[dict], cfg: KitConfig) -> Check:
    """Whether S3 traffic of the nodes' subnets goes through a gateway endpoint of the VPC, or out
    the default route (a NAT gateway bills each GB it processes)."""
    vpc_id, region = cfg.vpc.existing.vpc_id, cfg.region
    subject = "vpc.existing.private_subnet_ids"
    service = f"com.amazonaws.{region}.s3"
    try:
        pages = ec2.get_paginator("describe_vpc_endpoints").paginate(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
        endpoints = [e for page in pages for e in page.get("VpcEndpoints", [])]
    except AWS_ERRORS as err:
        return Check(VPC_S3_ENDPOINT, subject, WARN,
                     f"cannot read the VPC endpoints: {describe_error(err)}",
                     "allow ec2:DescribeVpcEndpoints, then run preflight again")
    # The state in either case: EC2's model lists "Available", its vpc-endpoint-state filter
    # and moto (5.2.5, ec2/models/vpcs.py) "available".
    s3 = [e for e in endpoints if e.get("ServiceName") == service
          and e.get("VpcEndpointType") == "Gateway" and str(e.get("State", "")).lower() == "available"]
    routed = {t for e in s3 for t in e.get("RouteTableIds", [])}
    missing: dict[str, list[str]] = {}
    for sid, users in node_subnets(cfg).items():
        table_id = route_table(tables, sid).get("RouteTableId")
        if table_id and table_id not in routed:
            missing.setdefault(table_id, []).append(f"{sid}: {' and '.join(users)}")
    if not missing:
        return Check(VPC_S3_ENDPOINT, subject, PASS,
                     "the route tables of the GPU groups' and the file system's subnets send S3 "
                     f"traffic through a gateway endpoint ({service})")
    ids = sorted(missing)
    detail = ("; ".join(f"route table {t} ({', '.join(missing[t])})" for t in ids)
              + f": no route to S3 through a gateway endpoint of {vpc_id}, so S3 traffic from "
              "there takes the default route, and a NAT gateway bills each GB it processes (the "
              "rate is not verified here): every checkpoint save and restore (hundreds of GB each "
              "for a large model) and every image layer the nodes pull from ECR (ECR serves the "
              "layers from S3)")
    if s3:
        fix = (f"add these route tables to the VPC's S3 gateway endpoint (aws ec2 "
               f"modify-vpc-endpoint --vpc-endpoint-id {s3[0]['VpcEndpointId']} "
               f"--add-route-table-ids {' '.join(ids)}), or ask the VPC's owner to")
    else:
        fix = (f"create an S3 gateway endpoint for these route tables (aws ec2 create-vpc-endpoint "
               f"--vpc-id {vpc_id} --vpc-endpoint-type Gateway --service-name {service} "
               f"--route-table-ids {' '.join(ids)}), or ask the VPC's owner to")
    return Check(VPC_S3_ENDPOINT, subject, WARN, detail, fix)

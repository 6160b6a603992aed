"""Warnings about a valid config: what it allows but a user should hear before deploying."""

from __future__ import annotations

import ipaddress

from infra.catalog.instances import INSTANCE_TYPES
from infra.config.derived import PRIVATE_SUBNET_BITS, VPC_PREFIX_RANGE
from infra.config.model import KitConfig
from infra.config.save_period import save_period_check

# Interfaces, with all their addresses, the VPC CNI holds on a node with a few pods: the one its
# pods use and WARM_ENI_TARGET (default 1) spare ones [cni, infra/catalog/instances.py].
VPC_CNI_INTERFACES_HELD = 2


# Pods a GPU node runs that take a VPC address, as the kit assumes them: about 10, the count the
# VPC CNI docs' advice (MINIMUM_IP_TARGET 12, WARM_IP_TARGET 2: the kit's defaults) is for
# (aws/amazon-vpc-cni-k8s@0c65d58cf2b4, tag v1.23.0, docs/eni-and-ip-target.md:15;
# docs/operations.md).
GPU_NODE_PODS = 10


def pod_addresses_held(warm_ip_target: int, minimum_ip_target: int) -> int:
    """Addresses a GPU node holds under vpc.pod_addresses (an upper bound for its few pods): the
    floor, or its pods' addresses where the floor is lower (0 is no floor), the warm pool above
    them, and the network interface's own address (aws/amazon-vpc-cni-k8s@0c65d58cf2b4
    docs/eni-and-ip-target.md:38-41: the secondary addresses held are the floor or pods +
    warm)."""
    return max(minimum_ip_target, GPU_NODE_PODS) + warm_ip_target + 1


# Addresses AWS reserves in every subnet (the first four and the last).
SUBNET_RESERVED_ADDRESSES = 5

# What else takes addresses in a regional AZ's private subnet, besides the GPU nodes (a Local
# Zone's subnet holds GPU nodes only: the control plane and the file system stay regional):
# - the system nodes, spread by their Auto Scaling group over the AZs: ceil(max_size / AZs) a
#   subnet, each holding two interfaces' addresses without vpc.pod_addresses (as GPU nodes do).
#   IPv4 addresses per interface: the default m7i.xlarge's 15 (moto 5.2.5
#   moto/ec2/resources/instance_types.json.gz, EC2 DescribeInstanceTypes
#   NetworkInfo.Ipv4AddressesPerInterface; a test checks it); for another type 50, the figure of
#   EC2's larger general-purpose sizes (a type with more is undercounted).
# - a fixed margin: 16 for the EKS control plane's network interfaces (the EKS user guide,
#   network-reqs, recommends at least 16 free addresses in each cluster subnet: up to 4 interfaces
#   and as many new ones during an upgrade), and 16 for the FSx for Lustre file system's network
#   interfaces (no AWS page read gives their count, only that a Lustre file system can have more
#   than one, FSx API FileSystem.NetworkInterfaceIds: an allowance, not a figure).
SYSTEM_NODE_IPV4_PER_INTERFACE = {"m7i.xlarge": 15}
SYSTEM_NODE_IPV4_OTHER = 50
EKS_CONTROL_PLANE_ADDRESSES = 16
FSX_ADDRESS_ALLOWANCE = 16
SUBNET_MARGIN = EKS_CONTROL_PLANE_ADDRESSES + FSX_ADDRESS_ALLOWANCE


def system_node_addresses(cfg: KitConfig) -> tuple[int, int]:
    """(nodes, addresses held by each) of the system group in one regional AZ's subnet."""
    sn, pods = cfg.system_nodes, cfg.vpc.pod_addresses
    nodes = -(-sn.max_size // max(len(cfg.availability_zones), 1))
    per_if = SYSTEM_NODE_IPV4_PER_INTERFACE.get(sn.instance_type, SYSTEM_NODE_IPV4_OTHER)
    held = (VPC_CNI_INTERFACES_HELD * per_if if pods is None
            else pod_addresses_held(pods.warm_ip_target, pods.minimum_ip_target))
    return nodes, held


def config_warnings(cfg: KitConfig) -> list[str]:
    """Things a valid config allows but a user should hear about before deploying."""
    warnings = []
    if cfg.endpoint_access.mode == "private":
        warnings.append(
            "endpoint_access.mode is private: the Kubernetes API is reachable only from inside "
            "the VPC (VPN, bastion, peered network), so kubectl and rlkit gate/launch/status must "
            "run there. Fix: to use them from your workstation or CI, set mode: "
            "public-and-private and public_cidrs: [<your egress CIDR>].")
    elif "0.0.0.0/0" in cfg.endpoint_access.public_cidrs:
        warnings.append(
            "endpoint_access.public_cidrs contains 0.0.0.0/0: the Kubernetes API endpoint is open "
            "to the internet (authentication still applies). Fix: list only your egress CIDRs.")
    if not cfg.admin_role_arns:
        warnings.append(
            "admin_role_arns is empty: NO IAM principal you use will have Kubernetes access to "
            "this cluster (API authentication mode; the creator gets no admin access entry, and "
            "the creator is CloudFormation's role anyway; only CDK's kubectl handler, which applies "
            "the kit's charts at deploy time, has one). kubectl, rlkit gate and rlkit launch will "
            "get Unauthorized. Fix: list the IAM role ARN you (or your CI) deploy and operate with "
            "under admin_role_arns, e.g. arn:aws:iam::123456789012:role/ml-platform-admin.")
    if (cfg.observability.enabled and cfg.addons.enabled("dcgm_exporter")
            and not cfg.addons.dcgm_exporter.service_monitor):
        warnings.append(
            "addons.dcgm_exporter is on (with no ServiceMonitor) and so is observability: the "
            "CloudWatch observability add-on already runs a DCGM exporter on every GPU node, so "
            "each node gets two. Fix: turn addons.dcgm_exporter off unless your own Prometheus "
            "scrapes it.")
    if cfg.addons.enabled("dcgm_exporter") and cfg.addons.dcgm_exporter.service_monitor:
        # The chart's templates/service-monitor.yaml is guarded by serviceMonitor.enabled alone
        # (dcgm-exporter-4.8.2.tgz in ../shared/charts), and no check here can see the cluster.
        warnings.append(
            "addons.dcgm_exporter.service_monitor is true: the dcgm-exporter chart then creates a "
            "ServiceMonitor (monitoring.coreos.com/v1), a kind only the Prometheus Operator's "
            "CRDs define; the kit does not install them and a cluster this deploy creates has "
            "none, so the Helm install fails and the cluster stack rolls back (this check cannot "
            "see the cluster's CRDs). Fix: install the Prometheus Operator CRDs "
            "(servicemonitors.monitoring.coreos.com) on the cluster before the deploy that turns "
            "service_monitor on (never on a first deploy), or set "
            "addons.dcgm_exporter.service_monitor: false.")
    if cfg.vpc.existing is None:
        # CDK puts the NAT gateways in the first vpc.nat_gateways AZs; a private subnet elsewhere
        # routes through one of those.
        with_nat = cfg.availability_zones[:cfg.vpc.nat_gateways]
        for name, g in cfg.gpu_node_groups.items():
            if g.availability_zone in cfg.availability_zones and g.availability_zone not in with_nat:
                warnings.append(
                    f"gpu_node_groups.{name} is in {g.availability_zone}, which has no NAT gateway "
                    f"(vpc.nat_gateways: {cfg.vpc.nat_gateways} puts them in "
                    f"{', '.join(with_nat)}): the group's traffic to AWS APIs other than S3 (ECR, "
                    "credentials, logs, metrics) crosses AZs at $0.01/GB each way and stops when "
                    f"{with_nat[0]} is impaired. Fix: raise vpc.nat_gateways to "
                    f"{cfg.availability_zones.index(g.availability_zone) + 1}, or, before the "
                    f"first deploy, list {g.availability_zone} first in availability_zones.")
    warnings += _subnet_address_warnings(cfg)
    if isinstance(lag := save_period_check(cfg), str):  # a refusal is a problem (rules)
        warnings.append(lag)
    return warnings


def _subnet_address_warnings(cfg: KitConfig) -> list[str]:
    """A new VPC's private subnet of an AZ (or Local Zone) too small for the addresses its GPU
    groups' nodes hold at max_size. Types whose address facts the catalog lacks are left out."""
    if cfg.vpc.existing is not None:
        return []
    vpc_prefix = ipaddress.ip_network(cfg.vpc.cidr).prefixlen
    prefix = vpc_prefix + PRIVATE_SUBNET_BITS

    def addresses(subnet_prefix: int) -> int:
        return 2 ** (32 - subnet_prefix) - SUBNET_RESERVED_ADDRESSES

    size = addresses(prefix)
    pods = cfg.vpc.pod_addresses
    by_zone: dict[str, list[tuple[str, int, int]]] = {}
    for name, g in cfg.gpu_node_groups.items():
        itype = INSTANCE_TYPES.get(g.instance_type)
        if pods is None and (itype is None or not (itype.ipv4_per_interface
                                                  and itype.card0_interfaces)):
            continue
        held = (min(VPC_CNI_INTERFACES_HELD, itype.card0_interfaces) * itype.ipv4_per_interface
                if pods is None else pod_addresses_held(pods.warm_ip_target, pods.minimum_ip_target))
        by_zone.setdefault(g.availability_zone, []).append((name, g.max_size, held))
    warnings = []
    sys_nodes, sys_held = system_node_addresses(cfg)
    for zone, groups in by_zone.items():
        gpu_need = sum(nodes * held for _, nodes, held in groups)
        regional = zone in cfg.availability_zones
        need = gpu_need + (sys_nodes * sys_held + SUBNET_MARGIN if regional else 0)
        if need <= size:
            continue
        others = (f"; system_nodes: {sys_nodes} nodes x {sys_held}; EKS control plane and FSx "
                  f"interfaces: {SUBNET_MARGIN}" if regional else "")
        largest = VPC_PREFIX_RANGE[0]
        larger = (f"use a larger vpc.cidr before the first deploy (a /{largest} gives each subnet "
                  f"{addresses(largest + PRIVATE_SUBNET_BITS):,} addresses), "
                  if vpc_prefix > largest else "")
        why = ("the VPC CNI keeps a spare network interface with all its addresses on each node "
               "(WARM_ENI_TARGET 1)" if pods is None else
               f"each node holds its vpc.pod_addresses floor ({pods.minimum_ip_target}) and warm "
               f"pool ({pods.warm_ip_target}) and its interface's own address"
               if pods.minimum_ip_target >= GPU_NODE_PODS else
               f"each node holds an address for each of its pods (about {GPU_NODE_PODS}, above "
               f"its vpc.pod_addresses floor of {pods.minimum_ip_target}) and warm pool "
               f"({pods.warm_ip_target}) and its interface's own address")
        fewer = ("" if pods is not None else
                 f"set vpc.pod_addresses (warm_ip_target 2, minimum_ip_target 12: about "
                 f"{pod_addresses_held(2, 12)} a node), ")
        warnings.append(
            f"the nodes in {zone} can hold {need:,} VPC addresses at max_size ("
            + "; ".join(f"gpu_node_groups.{n}: {nodes} nodes x {held}" for n, nodes, held in groups)
            + f"{others}): {why}, and the zone's private subnet (a /{prefix} of vpc.cidr "
            f"{cfg.vpc.cidr}) has {size:,}. Pods on the nodes past that get no address and never "
            f"start. Fix: {fewer}{larger}lower the groups' max_size there, or import a VPC with "
            "larger private subnets (vpc.existing).")
    return warnings

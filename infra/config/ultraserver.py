"""Config rules for instance types whose NVLink domain spans instances (UltraServers).

Each rule reads a catalog field (``capacity_block_only``, ``min_kubernetes_version``,
``ultraservers``, ``nvlink_domain_instances``), never the instance type's name. Facts and their
sources: ``infra/catalog/instances.py`` [us] (../shared/upstream/ultraservers.md).
"""

from __future__ import annotations

import re

from infra.catalog.instances import InstanceType
from infra.config.errors import problem
from infra.config.model import GpuNodeGroupConfig, KitConfig, default_zones_elsewhere
from infra.versions import kubernetes_minor


def ultraserver_group_problems(cfg: KitConfig, path: str, g: GpuNodeGroupConfig,
                               itype: InstanceType, add) -> None:
    """The capacity, Kubernetes version and placement a group of ``itype`` needs."""
    if itype.capacity_block_only and g.capacity.type != "capacity-block":
        sizes = ", ".join(f"{n} ({k} instances)" for n, k in itype.ultraservers) or "a block"
        add(problem(f"{path}.capacity.type", g.capacity.type,
                    f"{itype.name} is sold only through EC2 Capacity Blocks for ML, as UltraServers "
                    f"{sizes} (EKS user guide, P6e-GB200 UltraServers)",
                    "set capacity.type: capacity-block and capacity.reservation_id to the cr-... "
                    "ID of the UltraServer Capacity Block"))
    floor = itype.min_kubernetes_version
    if floor and kubernetes_minor(cfg.kubernetes_version) < kubernetes_minor(floor):
        add(problem("kubernetes_version", cfg.kubernetes_version,
                    f"EKS supports {itype.name} on Kubernetes {itype.min_kubernetes_version} and "
                    f"later (group {path.split('.')[-1]})",
                    f"set kubernetes_version to {itype.min_kubernetes_version} or later"))
    kinds = dict(itype.ultraservers)
    ust = g.capacity.ultraserver_type
    if kinds and g.capacity.type == "capacity-block" and ust not in kinds:
        add(problem(f"{path}.capacity.ultraserver_type", ust,
                    f"{itype.name} Capacity Blocks are UltraServers; the kit sizes the NVLink "
                    "domain a run must fit in from the UltraServer type",
                    f"set it to the block's type: one of {', '.join(kinds)}"))
    elif ust is not None and ust not in kinds:
        add(problem(f"{path}.capacity.ultraserver_type", ust,
                    f"{itype.name} is not sold as this UltraServer type"
                    + (f" (only {', '.join(kinds)})" if kinds else " (it is no UltraServer type)"),
                    "remove ultraserver_type" if not kinds else f"use one of {', '.join(kinds)}"))
    if itype.multi_node_nvlink and not cfg.addon_enabled("dra_driver"):
        # The manifests claim a ComputeDomain's IMEX channel on every GPU pod there: without the
        # driver neither the ComputeDomain CRD nor its DeviceClasses exist on the cluster.
        add(problem("addons.dra_driver.enabled", False,
                    f"group {path.split('.')[-1]} ({itype.name}) runs multi-node NVLink through a "
                    "ComputeDomain's IMEX channel, which only the NVIDIA DRA driver provides",
                    "remove addons.dra_driver.enabled: false (the kit turns it on for this "
                    "instance type)"))
    # Placement decision (docs/operations.md "UltraServers"): no source says whether an
    # UltraServer Capacity Block takes a cluster placement group, the block already places its
    # instances together, and a group the block was not made in can stop launches. So the kit
    # creates none for these types and refuses a request for one.
    if itype.multi_node_nvlink and g.placement_group_name is not None:
        add(problem(f"{path}.placement_group_name", g.placement_group_name,
                    f"the kit launches {itype.name} into no placement group: its NVLink domain is "
                    "the UltraServer the Capacity Block reserves, and a Capacity Block is bought "
                    "without a placement group (EC2 PurchaseCapacityBlock takes none)",
                    "remove placement_group_name (docs/operations.md, UltraServers)"))
    if itype.multi_node_nvlink and g.placement_group:
        add(problem(f"{path}.placement_group", True,
                    f"the kit creates no cluster placement group for {itype.name}: its NVLink "
                    "domain is the UltraServer the Capacity Block reserves, and no AWS source "
                    "documents placement groups for UltraServer blocks",
                    "remove placement_group (docs/operations.md, UltraServers)"))


def local_zone_problems(cfg: KitConfig, add) -> None:
    """Local Zone names belong to the region; an imported VPC names a subnet in each."""
    for i, zone in enumerate(cfg.local_zones):
        # EC2 names a Local Zone <region>-<location>-<n><letter>, e.g. us-west-2-lax-1a (EC2 user
        # guide, Capacity Reservations in Local Zones).
        if not re.fullmatch(re.escape(cfg.region) + r"-[a-z]+-\d+[a-z]", zone):
            add(problem(f"local_zones[{i}]", zone, f"not a Local Zone name of region {cfg.region}",
                        f"use the zone your reservation reports, of the form {cfg.region}-xyz-1a"))
        if zone in cfg.availability_zones:
            add(problem(f"local_zones[{i}]", zone, "already listed in availability_zones",
                        "list a Local Zone only in local_zones"))
    if len(cfg.local_zones) > 2 and cfg.vpc.existing is None:  # imported: the user's subnets
        add(problem("local_zones", cfg.local_zones, "at most two Local Zones fit the subnet plan",
                    "list one or two"))
    fs = cfg.storage.shared_filesystem
    group = cfg.gpu_node_groups.get(cfg.training.node_group)
    if fs.type == "fsx-lustre":
        if fs.availability_zone is None and group is not None and \
                group.availability_zone in cfg.local_zones:
            add(problem("storage.shared_filesystem.availability_zone", None,
                        f"the training group's AZ {group.availability_zone} is a Local Zone, and "
                        "the kit places the file system only in one of availability_zones",
                        "set it to the Local Zone's parent AZ (ParentZoneName in `aws ec2 "
                        "describe-availability-zones --all-availability-zones`)"))
        elif fs.availability_zone is not None and not default_zones_elsewhere(cfg) and \
                fs.availability_zone not in cfg.availability_zones:
            add(problem("storage.shared_filesystem.availability_zone", fs.availability_zone,
                        f"not among the VPC's AZs {cfg.availability_zones}",
                        "use one of availability_zones"))
    existing = cfg.vpc.existing
    if existing is not None:
        for zone in cfg.local_zones:
            if zone not in existing.private_subnet_ids:
                add(problem("vpc.existing.private_subnet_ids", existing.private_subnet_ids,
                            f"no private subnet for Local Zone {zone}",
                            f"add {zone}: subnet-... (a private subnet in that Local Zone)"))


# DeepEP at the pinned commit: csrc/kernels/configs.cuh:3 `#define NUM_MAX_NVL_PEERS 8`, and its
# maintainer: "the normal mode doesn't support GB200 yet" (deepseek-ai/DeepEP issue #392);
# ../shared/upstream/ultraservers.md section 6.
DEEPEP_MAX_NVL_PEERS = 8
DEEPEP_SOURCE = ("DeepEP 567632d csrc/kernels/configs.cuh:3 NUM_MAX_NVL_PEERS 8; DeepEP issue "
                 "#392: normal mode does not support GB200 yet")


def domain_instances(group: GpuNodeGroupConfig, itype: InstanceType) -> int:
    """Instances in one NVLink domain for this group: its UltraServer type's size, else the
    catalog's ``nvlink_domain_instances``."""
    return dict(itype.ultraservers).get(group.capacity.ultraserver_type or "",
                                        itype.nvlink_domain_instances)


def ultraserver_training_problems(cfg: KitConfig, group: GpuNodeGroupConfig,
                                  itype: InstanceType, add) -> None:
    """A run on a multi-node NVLink type stays inside one domain and uses NCCL all-to-all."""
    if not itype.multi_node_nvlink:
        return
    backend = cfg.training.expert_parallel.backend
    if backend.startswith("deepep") and itype.nvlink_domain_gpus > DEEPEP_MAX_NVL_PEERS:
        add(problem("training.expert_parallel.backend", backend,
                    f"DeepEP at the image's pinned commit handles at most {DEEPEP_MAX_NVL_PEERS} "
                    f"NVLink peers, and {itype.name}'s NVLink domain holds "
                    f"{itype.nvlink_domain_gpus} GPUs ({DEEPEP_SOURCE})",
                    "use backend: nccl (NCCL all-to-all, over multi-node NVLink inside the "
                    "UltraServer)"))
    limit = domain_instances(group, itype)
    if cfg.training.nodes > limit:
        add(problem("training.nodes", cfg.training.nodes,
                    f"a run on {itype.name} stays inside one NVLink domain ({limit} instances of "
                    f"{group.capacity.ultraserver_type or 'an UltraServer'}): its workers claim one "
                    "ComputeDomain and require the same nvidia.com/gpu.clique; a run across "
                    "domains is not supported yet",
                    f"use training.nodes <= {limit}"))

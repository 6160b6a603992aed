"""Config rules for instance types whose NVLink domain spans instances (UltraServers).

Each rule reads a catalog field (``capacity_block_only``, ``min_kubernetes_version``,
``ultraservers``, ``nvlink_domain_instances``), never the instance type's name. Facts and their
sources: ``infra/catalog/instances.py`` [us] (../shared/upstream/ultraservers.md).
"""

from __future__ import annotations

from infra.catalog.instances import InstanceType
from infra.config.errors import problem
from infra.config.model import GpuNodeGroupConfig, KitConfig


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


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
    if itype.min_kubernetes_version and \
            _minor(cfg.kubernetes_version) < _minor(itype.min_kubernetes_version):
        add(problem("kubernetes_version", cfg.kubernetes_version,
                    f"EKS supports {itype.name} on Kubernetes {itype.min_kubernetes_version} and "
                    f"later (group {path.split('.')[-1]})",
                    f"set kubernetes_version to {itype.min_kubernetes_version} or later"))
    # Placement decision (docs/operations.md "UltraServers"): no source says whether an
    # UltraServer Capacity Block takes a cluster placement group, the block already places its
    # instances together, and a group the block was not made in can stop launches. So the kit
    # creates none for these types and refuses a request for one.
    if itype.multi_node_nvlink and g.placement_group:
        add(problem(f"{path}.placement_group", True,
                    f"the kit creates no cluster placement group for {itype.name}: its NVLink "
                    "domain is the UltraServer the Capacity Block reserves, and no AWS source "
                    "documents placement groups for UltraServer blocks",
                    "remove placement_group (docs/operations.md, UltraServers)"))

"""Config rules for EC2 Capacity Blocks for ML: how many instances a block and an account hold.

Source: botocore 1.44.8 data/ec2/2016-11-15/service-2.json, DescribeCapacityBlockOfferingsRequest
InstanceCount: "Each Capacity Block can have up to 64 instances, and you can have up to 256
instances across Capacity Blocks". Those limits are stated for instance-count offerings; an
UltraServer block is bought by UltraserverCount, whose documentation states no limit, so the
rules here leave UltraServer groups (a catalog type with ``ultraservers``) to the block checks of
infra/config/ultraserver.py and `rlkit preflight`.
"""

from __future__ import annotations

from collections import defaultdict

from infra.catalog.instances import INSTANCE_TYPES
from infra.config.errors import problem
from infra.config.model import KitConfig

CAPACITY_BLOCK_MAX_INSTANCES = 64
CAPACITY_BLOCKS_MAX_INSTANCES = 256
_SOURCE = ("EC2 API DescribeCapacityBlockOfferings InstanceCount: up to 64 instances a block, "
           "256 across Capacity Blocks")


def _instance_blocks(cfg: KitConfig) -> dict[str, int]:
    """max_size of each capacity-block group of a non-UltraServer type."""
    out = {}
    for name, g in cfg.gpu_node_groups.items():
        itype = INSTANCE_TYPES.get(g.instance_type)
        if g.capacity.type == "capacity-block" and itype is not None and not itype.ultraservers:
            out[name] = g.max_size
    return out


def capacity_block_problems(cfg: KitConfig, add) -> None:
    """A group, the groups sharing one block, and all blocks together stay within EC2's limits."""
    groups = _instance_blocks(cfg)
    for name, size in groups.items():
        if size > CAPACITY_BLOCK_MAX_INSTANCES:
            add(problem(f"gpu_node_groups.{name}.max_size", size,
                        f"a Capacity Block holds at most {CAPACITY_BLOCK_MAX_INSTANCES} instances "
                        f"({_SOURCE})", f"use max_size <= {CAPACITY_BLOCK_MAX_INSTANCES}, or split "
                        "the nodes over groups with a block each"))
    sharing: dict[str, list[str]] = defaultdict(list)
    for name in groups:
        if (rid := cfg.gpu_node_groups[name].capacity.reservation_id) is not None:
            sharing[rid].append(name)
    for rid, names in sharing.items():
        total = sum(groups[n] for n in names)
        if len(names) > 1 and total > CAPACITY_BLOCK_MAX_INSTANCES:
            add(problem(f"gpu_node_groups.{names[0]}.capacity.reservation_id", rid,
                        f"groups {', '.join(names)} launch into this one block and can scale to "
                        f"{total} instances together (sum of max_size); a Capacity Block holds at "
                        f"most {CAPACITY_BLOCK_MAX_INSTANCES} ({_SOURCE})",
                        f"lower their max_size to {CAPACITY_BLOCK_MAX_INSTANCES} in all, or give "
                        "each group its own block"))
    total = sum(groups.values())
    if total > CAPACITY_BLOCKS_MAX_INSTANCES:
        add(problem("gpu_node_groups", {n: groups[n] for n in groups},
                    f"the Capacity Block groups can scale to {total} instances (sum of max_size); "
                    f"an account holds at most {CAPACITY_BLOCKS_MAX_INSTANCES} across Capacity "
                    f"Blocks ({_SOURCE})",
                    f"lower their max_size to {CAPACITY_BLOCKS_MAX_INSTANCES} in all"))

"""Imported VPCs with Local Zones, the subnet-plan caps, Capacity Block sizes and placement groups
on UltraServer and Capacity Block groups."""

from __future__ import annotations

import copy

import pytest
import yaml

from infra.config import ConfigError, parse_config
from tests.support.cdk import REPO_ROOT

SUBNETS = {"us-east-1a": "subnet-0123456789abcdef0", "us-east-1b": "subnet-0123456789abcdef1"}
LOCAL = {"us-east-1-dfw-2a": "subnet-0123456789abcdef2"}


def ultraserver_example() -> dict:
    return yaml.safe_load((REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml").read_text())


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return [str(p) for p in err.value.problems]


def imported(data: dict, private: dict, public: dict | None = None) -> dict:
    data = copy.deepcopy(data)
    data["vpc"] = {"existing": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_ids": private,
                                "public_subnet_ids": public or {}}}
    return data


def test_imported_vpc_with_a_local_zone_validates():
    parse_config(imported(ultraserver_example(), {**SUBNETS, **LOCAL}))


def test_local_zone_subnet_is_no_public_subnet():
    found = problems_of(imported(ultraserver_example(), {**SUBNETS, **LOCAL}, {**SUBNETS, **LOCAL}))
    assert found == ["vpc.existing.public_subnet_ids.us-east-1-dfw-2a = 'subnet-0123456789abcdef2': "
                     "a Local Zone takes no public subnet in the kit (its NAT gateways sit in the "
                     "regional AZs). Fix: remove this subnet."]


def test_more_than_four_azs_only_without_an_imported_vpc():
    azs = [f"us-east-1{c}" for c in "abcdef"]
    data = {"availability_zones": azs}
    assert any("at most four AZs" in p for p in problems_of(data))
    parse_config(imported(data, {az: f"subnet-0123456789abcdef{i}" for i, az in enumerate(azs)}))


def test_more_than_two_local_zones_only_without_an_imported_vpc():
    zones = ["us-east-1-dfw-2a", "us-east-1-atl-1a", "us-east-1-bos-1a"]
    data = ultraserver_example()
    data["local_zones"] = zones
    assert any("at most two Local Zones" in p for p in problems_of(data))
    private = {**SUBNETS, **{z: f"subnet-0123456789abcdef{i + 2}" for i, z in enumerate(zones)}}
    parse_config(imported(data, private))


RID = "cr-0123456789abcdef0"


def cb_group(size: int, rid: str = RID, itype: str = "p5en.48xlarge") -> dict:
    return {"instance_type": itype, "availability_zone": "us-east-1a", "min_size": 0,
            "desired_size": 1, "max_size": size,
            "capacity": {"type": "capacity-block", "reservation_id": rid}}


def cb_config(groups: dict) -> dict:
    return {"gpu_node_groups": groups, "cost_guard": {},
            "training": {"node_group": next(iter(groups)), "nodes": 1, "parallel": {"ep": 8}}}


def test_a_capacity_block_group_holds_at_most_64_instances():
    parse_config(cb_config({"cb": cb_group(64)}))
    assert problems_of(cb_config({"cb": cb_group(65)})) == [
        "gpu_node_groups.cb.max_size = 65: a Capacity Block holds at most 64 instances (EC2 API "
        "DescribeCapacityBlockOfferings InstanceCount: up to 64 instances a block, 256 across "
        "Capacity Blocks). Fix: use max_size <= 64, or split the nodes over groups with a block "
        "each."]


def test_groups_sharing_one_block_are_named_together():
    found = problems_of(cb_config({"a": cb_group(40), "b": cb_group(30)}))
    assert len(found) == 1
    assert found[0].startswith(f"gpu_node_groups.a.capacity.reservation_id = '{RID}': groups a, b "
                               "launch into this one block and can scale to 70 instances")
    parse_config(cb_config({"a": cb_group(40), "b": cb_group(30, RID[:-1] + "1")}))


def test_capacity_block_groups_hold_at_most_256_instances_together():
    groups = {f"g{i}": cb_group(64, RID[:-1] + str(i)) for i in range(5)}
    found = problems_of(cb_config(groups))
    assert len(found) == 1 and found[0].startswith("gpu_node_groups = ")
    assert "can scale to 320 instances" in found[0]
    del groups["g4"]
    parse_config(cb_config(groups))


def test_an_ultraserver_group_takes_no_named_placement_group():
    data = ultraserver_example()
    data["gpu_node_groups"]["gb200"]["placement_group_name"] = "gb200-cluster"
    found = problems_of(data)
    assert len(found) == 1
    assert found[0].startswith("gpu_node_groups.gb200.placement_group_name = 'gb200-cluster': the "
                               "kit launches p6e-gb200.36xlarge into no placement group")


def test_gin_gpu_names_the_catalog_types_and_refuses_p6e_gb200():
    data = ultraserver_example()
    data["training"]["expert_parallel"] = {"backend": "deepep-gin", "gin_mode": "gpu"}
    gin = [p for p in problems_of(data) if p.startswith("training.expert_parallel.gin_mode")]
    assert gin == [
        "training.expert_parallel.gin_mode = 'gpu': GPU-initiated NCCL GIN runs only on "
        "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, not p6e-gb200.36xlarge. Fix: set "
        "gin_mode: proxy (CPU proxy) or use a node group of p5en.48xlarge, p6-b200.48xlarge, "
        "p6-b300.48xlarge."]


def test_pod_address_floor_stays_within_the_smallest_gpu_types_card0_pool():
    groups = {"p5": {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
                     "min_size": 0, "desired_size": 1, "max_size": 1},
              "p5en": {"instance_type": "p5en.48xlarge", "availability_zone": "us-east-1a",
                       "min_size": 0, "desired_size": 1, "max_size": 1}}

    def data(floor: int) -> dict:
        return {"vpc": {"pod_addresses": {"minimum_ip_target": floor}}, "gpu_node_groups": groups,
                "training": {"node_group": "p5", "nodes": 1}}

    parse_config(data(98))
    assert problems_of(data(99)) == [
        "vpc.pod_addresses.minimum_ip_target = 99: a p5.48xlarge node holds at most 98 pod "
        "addresses (network card 0's 2 interfaces x 49 secondary addresses each, the VPC CNI's "
        "pool), so the floor could never be met. Fix: use minimum_ip_target <= 98 (the default is "
        "12)."]


def test_head_s3_bandwidth_is_card_0s_and_the_catalog_matches_moto():
    """Card 0's bandwidth in the catalog equals EC2's DescribeInstanceTypes figures (moto 5.2.5
    instance_types.json.gz NetworkCards[0]), and the head's share never exceeds card 0's peak."""
    import gzip
    import json
    from pathlib import Path

    import moto
    from infra.catalog.instances import INSTANCE_TYPES
    from infra.config.derived import head_s3_gbps

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    ec2 = json.loads(gzip.decompress(path.read_bytes()))
    checked = []
    for name, itype in INSTANCE_TYPES.items():
        if name not in ec2:
            continue
        card0 = next(c for c in ec2[name]["NetworkInfo"]["NetworkCards"]
                     if c["NetworkCardIndex"] == 0)
        assert (itype.card0_baseline_gbps, itype.card0_peak_gbps) == (
            card0["BaselineBandwidthInGbps"], card0["PeakBandwidthInGbps"]), name
        cfg = parse_config({"gpu_node_groups": {"g": {
            "instance_type": name, "availability_zone": "us-east-1a", "min_size": 0,
            "desired_size": 1, "max_size": 1}}, "training": {"node_group": "g", "nodes": 1}})
        assert head_s3_gbps(cfg) <= card0["PeakBandwidthInGbps"], name
        checked.append(name)
    assert "p6-b200.48xlarge" in checked and "p6-b300.48xlarge" in checked

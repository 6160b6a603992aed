"""The instance type a fork would add: one catalog entry for a made-up type with a made-up GPU
(exactly what a fork would add to ``infra/catalog/instances.py`` and ``infra/catalog/gpus.py``),
the fixture that registers both, and a config with a group of that type. Shared by the tests that
a new type works end to end (tests/infra/test_new_instance_type.py) and that `rlkit check` names
what the kit's add-ons do not cover for it (tests/ops/test_preflight_observability.py)."""

from __future__ import annotations

import pytest

from infra.catalog import (
    GPUS,
    INSTANCE_TYPES,
    P_ON_DEMAND_QUOTA_CODE,
    GpuSpec,
    InstanceType,
    InterfaceType,
)

NEW_TYPE = "p7-r100.48xlarge"  # a made-up instance type with a made-up GPU model
R100 = GpuSpec("R100", bf16_tflops=4000.0, fp8_tflops=8000.0, hbm_tbps=13.0,
               nvlink_gbps_bidir=3600, sms=200, efficiency=GPUS["B300"].efficiency,
               cuda_arch="11.0", usable_memory_gib=287.0)
P7_R100 = InstanceType(
    name=NEW_TYPE, gpu_model="R100", gpu_count=8, gpu_memory_gib=288,
    network_cards=16, efa_devices=16, efa_bandwidth_gbps=6400,
    primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(16)),
    nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type="AL2023_x86_64_NVIDIA",
    vcpus=192, memory_gib=4096, gin_gpu=True, quota_code=P_ON_DEMAND_QUOTA_CODE,
    quota_name="Running On-Demand P instances", on_demand_usd_per_hour=150.0,
    price_source="test price",
)


@pytest.fixture
def new_instance_type(monkeypatch):
    """Register the new GPU and instance type, as one catalog entry each."""
    monkeypatch.setitem(GPUS, R100.name, R100)
    monkeypatch.setitem(INSTANCE_TYPES, P7_R100.name, P7_R100)
    return P7_R100


def fork_config(instance_type: str = NEW_TYPE) -> dict:
    return {
        "name": "r100-team", "region": "us-west-2", "account": "123456789012",
        "availability_zones": ["us-west-2a", "us-west-2b"],
        "admin_role_arns": ["arn:aws:iam::123456789012:role/PlatformAdmin"],
        "gpu_node_groups": {"r100": {"instance_type": instance_type,
                                     "availability_zone": "us-west-2a",
                                     "min_size": 0, "desired_size": 2, "max_size": 2}},
        "training": {"node_group": "r100", "nodes": 2},
    }

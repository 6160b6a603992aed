"""The instance catalog against moto's bundled EC2 DescribeInstanceTypes data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import moto
import pytest

from infra.catalog import INSTANCE_TYPES, InterfaceType


@pytest.fixture(scope="module")
def ec2_data() -> dict:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_catalog_matches_moto(name, ec2_data):
    ours = INSTANCE_TYPES[name]
    theirs = ec2_data[name]
    gpus = theirs["GpuInfo"]["Gpus"][0]
    net = theirs["NetworkInfo"]
    disks = theirs["InstanceStorageInfo"]["Disks"][0]
    assert ours.gpu_model == gpus["Name"]
    assert ours.gpu_count == gpus["Count"]
    assert ours.gpu_memory_gib == pytest.approx(gpus["MemoryInfo"]["SizeInMiB"] / 1024, abs=1)
    assert ours.network_cards == net["MaximumNetworkCards"]
    assert net["EfaSupported"] is True
    assert ours.efa_devices == net["EfaInfo"]["MaximumEfaInterfaces"]
    assert f"{ours.efa_bandwidth_gbps} Gigabit" == net["NetworkPerformance"]
    assert (ours.nvme_count, ours.nvme_size_gb) == (disks["Count"], disks["SizeInGB"])
    assert [ours.architecture] == theirs["ProcessorInfo"]["SupportedArchitectures"]
    assert ours.vcpus == theirs["VCpuInfo"]["DefaultVCpus"]
    assert ours.memory_gib * 1024 == theirs["MemoryInfo"]["SizeInMiB"]


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_interface_layout(name):
    it = INSTANCE_TYPES[name]
    layout = it.interfaces
    assert (layout[0].network_card_index, layout[0].device_index) == (0, 0)
    assert all(i.device_index == 1 and i.interface_type is InterfaceType.EFA_ONLY
               for i in layout[1:])
    assert [i.network_card_index for i in layout] == list(range(it.network_cards))
    efa = [i for i in layout if i.interface_type in (InterfaceType.EFA, InterfaceType.EFA_ONLY)]
    assert len(efa) == it.efa_devices

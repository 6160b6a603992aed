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


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_every_card_matches_moto(name, ec2_data):
    """Which cards carry EFA, and that each interface the launch template asks for is a type that
    card offers (p6-b300: card 0 is ENA-only, cards 1-16 EFA)."""
    ours = INSTANCE_TYPES[name]
    cards = {c["NetworkCardIndex"]: c["InterfaceTypes"]
             for c in ec2_data[name]["NetworkInfo"]["NetworkCards"]}
    assert sorted(cards) == list(range(ours.network_cards))
    assert [i for i, types in sorted(cards.items()) if "efa" in types] == list(ours.efa_card_indexes)
    for spec in ours.interfaces:
        assert spec.interface_type.value in cards[spec.network_card_index], spec
    assert ours.facts_verified and ours.note == ""


def test_p6_b300_layout_is_ena_primary_then_efa_only(ec2_data):
    cards = ec2_data["p6-b300.48xlarge"]["NetworkInfo"]["NetworkCards"]
    assert cards[0]["InterfaceTypes"] == ["interface"]
    assert all(c["InterfaceTypes"] == ["interface", "efa", "efa-only"] for c in cards[1:])
    layout = INSTANCE_TYPES["p6-b300.48xlarge"].interfaces
    assert layout[0].interface_type is InterfaceType.ENA
    assert [i.network_card_index for i in layout[1:]] == list(range(1, 17))

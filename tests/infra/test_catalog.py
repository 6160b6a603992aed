"""The instance catalog against moto's bundled EC2 DescribeInstanceTypes data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import moto
import pytest

from infra.catalog import INSTANCE_TYPES, InterfaceType
from tests.support import REPO_ROOT


def _moto_data() -> dict:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


def _botocore_instance_types() -> list[str]:
    """The InstanceType enum of botocore's EC2 model (names only: botocore has no specs)."""
    import botocore.loaders

    model = botocore.loaders.Loader().load_service_model("ec2", "service-2")
    return model["shapes"]["InstanceType"]["enum"]


_MOTO = _moto_data()
IN_MOTO = sorted(n for n in INSTANCE_TYPES if n in _MOTO)
NOT_IN_MOTO = sorted(n for n in INSTANCE_TYPES if n not in _MOTO)


@pytest.fixture(scope="module")
def ec2_data() -> dict:
    return _MOTO


def test_every_type_moto_lacks_is_in_botocore_and_flagged_unverified():
    """moto 5.2.5 has no p6e-gb200; botocore 1.44.8's EC2 enum names it. Such an entry cannot be
    cross-checked field by field, so it must say so (facts_verified False, with a note) and
    preflight warns."""
    assert NOT_IN_MOTO == ["p6e-gb200.36xlarge"]
    enum = _botocore_instance_types()
    for name in NOT_IN_MOTO:
        assert name in enum, f"{name} is in neither moto's nor botocore's EC2 data"
        entry = INSTANCE_TYPES[name]
        assert not entry.facts_verified and "not" in entry.note
    assert "p6e-gb300.36xlarge" not in enum  # why it stays refused (UNSUPPORTED_INSTANCE_TYPES)


@pytest.mark.parametrize("name", IN_MOTO)
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
    assert ours.ipv4_per_interface == net["Ipv4AddressesPerInterface"]
    assert ours.card0_interfaces == net["NetworkCards"][0]["MaximumNetworkInterfaces"]


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_interface_layout(name):
    it = INSTANCE_TYPES[name]
    layout = it.interfaces
    assert (layout[0].network_card_index, layout[0].device_index) == (0, 0)
    assert all(i.device_index == it.efa_only_device_index
               and i.interface_type is InterfaceType.EFA_ONLY for i in layout[1:])
    assert [i.network_card_index for i in layout[1:]] == [c for c in it.efa_card_indexes if c]
    assert max(i.network_card_index for i in layout) < it.network_cards
    efa = [i for i in layout if i.interface_type in (InterfaceType.EFA, InterfaceType.EFA_ONLY)]
    assert len(efa) == it.efa_devices


def test_p6e_gb200_layout_is_the_ec2_recommended_four_efa_only_interfaces():
    """EC2 efa-acc-inst-types, "EFA configuration for P6e-GB200 instances" (ultraservers.md 3.3):
    ENA on NCI 0 device 0, EFA-only on NCI 1, 5, 9 and 13 at device index 0, one per GPU's NCI
    group; the other 12 cards stay empty; 4 EFA devices a node (EKS page: allocatable 4)."""
    it = INSTANCE_TYPES["p6e-gb200.36xlarge"]
    assert [(i.network_card_index, i.device_index, i.interface_type.value)
            for i in it.interfaces] == [
        (0, 0, "interface"), (1, 0, "efa-only"), (5, 0, "efa-only"), (9, 0, "efa-only"),
        (13, 0, "efa-only")]
    assert (it.gpu_count, it.efa_devices, it.network_cards) == (4, 4, 17)
    assert (it.architecture, it.ami_type) == ("arm64", "AL2023_ARM_64_NVIDIA")
    assert (it.nvlink_domain_instances, it.nvlink_domain_gpus) == (18, 72)
    assert it.multi_node_nvlink and it.capacity_block_only and not it.gin_gpu
    assert dict(it.ultraservers) == {"u-p6e-gb200x36": 9, "u-p6e-gb200x72": 18}
    assert not any(t.multi_node_nvlink or t.capacity_block_only
                   for n, t in INSTANCE_TYPES.items() if n != it.name)


@pytest.mark.parametrize("name", IN_MOTO)
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


# --- capabilities are fields, and every entry's fields hold up ------------------------------------

REPO = REPO_ROOT


def _dockerfile_arch_list() -> list[str]:
    import re

    text = (REPO / "images" / "trainer" / "Dockerfile").read_text()
    match = re.search(r'^ARG TORCH_CUDA_ARCH_LIST="([^"]+)"', text, re.M)
    assert match, "images/trainer/Dockerfile declares no TORCH_CUDA_ARCH_LIST default"
    return match.group(1).split(";")


def _runs_on(built: str, gpu: str) -> bool:
    """A cubin for compute capability X.y runs on X.z with z >= y (CUDA C++ Programming Guide,
    "Binary Compatibility"); TORCH_CUDA_ARCH_LIST entries without a suffix build such cubins."""
    b_major, b_minor = (int(x) for x in built.removesuffix("+PTX").split("."))
    g_major, g_minor = (int(x) for x in gpu.split("."))
    return b_major == g_major and b_minor <= g_minor


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_the_trainer_image_is_built_for_every_catalog_gpu(name):
    from infra.catalog import GPUS

    gpu = GPUS[INSTANCE_TYPES[name].gpu_model]
    built = _dockerfile_arch_list()
    assert any(_runs_on(b, gpu.cuda_arch) for b in built), (
        f"{name} has {gpu.name} (compute capability {gpu.cuda_arch}), but the trainer image's "
        f"TORCH_CUDA_ARCH_LIST {';'.join(built)} builds nothing that runs on it")


def test_the_arch_rule_refuses_what_does_not_run():
    assert _runs_on("10.0", "10.3") and _runs_on("9.0", "9.0")
    assert not _runs_on("10.3", "10.0") and not _runs_on("9.0", "10.0")


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_every_ami_type_is_an_eks_node_group_ami_type(name):
    from infra.constructs.efa_node_group import ami_type

    assert ami_type(INSTANCE_TYPES[name]).name.lower() == INSTANCE_TYPES[name].ami_type.lower()


def test_an_unknown_ami_type_is_a_clear_error():
    from dataclasses import replace

    from infra.constructs.efa_node_group import ami_type

    with pytest.raises(ValueError, match="catalog ami_type 'AL2099_NVIDIA' is not an EKS"):
        ami_type(replace(INSTANCE_TYPES["p5.48xlarge"], ami_type="AL2099_NVIDIA"))


def test_capabilities_are_catalog_fields_not_name_prefixes():
    from infra.catalog import P_ON_DEMAND_QUOTA_CODE, supports_gin_gpu

    gin = {n for n, it in INSTANCE_TYPES.items() if it.gin_gpu}
    # [design.md, DeepEP over EFA]: GPU-initiated GIN on p5en and the p6 family only.
    assert gin == {"p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"}
    assert all(supports_gin_gpu(n) == (n in gin) for n in INSTANCE_TYPES)
    assert not supports_gin_gpu("p9.unknown")
    assert {it.quota_code for it in INSTANCE_TYPES.values()} == {P_ON_DEMAND_QUOTA_CODE}
    for it in INSTANCE_TYPES.values():
        assert it.price_source and (it.on_demand_usd_per_hour is None
                                    or it.on_demand_usd_per_hour > 0)

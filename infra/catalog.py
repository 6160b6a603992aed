"""Facts about the EFA GPU instance types the kit supports, defined once.

Both the CDK side (launch template interfaces, AMI type) and the manifests side (``nvidia.com/gpu``
and ``vpc.amazonaws.com/efa`` requests) read these values, so a launch template and a pod can
never disagree about a count.

Sources, referred to below by tag:

- [moto]   EC2 DescribeInstanceTypes data bundled with moto 5.2.5
           (``moto/ec2/resources/instance_types.json.gz``); ``tests/test_catalog.py`` cross-checks
           every overlapping field against it.
- [ec2-efa] AWS EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple
           network cards" (efa-acc-inst-types): primary interface = card 0 / device 0 of type
           EFA-with-ENA; every other card: device index 1, EFA or EFA-only.
- [ec2-p5] AWS EC2 User Guide, accelerated computing instance specs (P5/P5e/P5en/P6 pages).
- [eks-ami] Amazon EKS user guide, "Create nodes with the AL2023 accelerated AMIs"
           (AMI type ``AL2023_x86_64_NVIDIA``).
- [design] ../shared/design.md, "Facts that matter" (collected from awslabs/awsome-distributed-ai,
           awslabs/ai-on-eks and aws-samples/aws-do-eks).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class InterfaceType(str, Enum):
    """EC2 launch-template ``InterfaceType`` values used by the kit."""

    ENA = "interface"  # plain ENA, IP only
    EFA = "efa"  # EFA with ENA: RDMA plus an IP address
    EFA_ONLY = "efa-only"  # RDMA only, no IP: saves subnet addresses (needs vpc-cni >= 1.18.4)


@dataclass(frozen=True)
class NetworkInterfaceSpec:
    """One launch-template network interface."""

    network_card_index: int
    device_index: int
    interface_type: InterfaceType


@dataclass(frozen=True)
class InstanceType:
    """What the kit needs to know about one GPU instance type."""

    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float  # per GPU
    network_cards: int
    efa_devices: int  # what a pod requests as vpc.amazonaws.com/efa to own the node's fabric
    efa_bandwidth_gbps: int  # aggregate network bandwidth of the instance
    primary_interface_type: InterfaceType
    efa_card_indexes: tuple[int, ...]  # cards that carry an EFA (primary included when it is EFA)
    nvme_count: int
    nvme_size_gb: int  # per device, decimal GB as EC2 reports it
    architecture: str
    ami_type: str  # EKS managed node group AMI type
    vcpus: int
    memory_gib: int
    # False for an entry whose facts are not yet cross-checked against EC2's data: preflight,
    # `rlkit check` and `rlkit render` then warn (note says what is unverified).
    facts_verified: bool = True
    note: str = ""

    @property
    def interfaces(self) -> tuple[NetworkInterfaceSpec, ...]:
        """Launch-template interface layout (best practice from [ec2-efa]).

        Card 0 / device 0 is the primary interface with an IP; every other card that carries an
        EFA gets one EFA-only interface at device index 1.
        """
        layout = [NetworkInterfaceSpec(0, 0, self.primary_interface_type)]
        layout += [
            NetworkInterfaceSpec(card, 1, InterfaceType.EFA_ONLY)
            for card in self.efa_card_indexes
            if card != 0
        ]
        return tuple(layout)

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_memory_gib * self.gpu_count


_X86_NVIDIA_AMI = "AL2023_x86_64_NVIDIA"  # [eks-ami]

INSTANCE_TYPES: dict[str, InstanceType] = {
    # [moto] GpuInfo 8x H100 81920 MiB; 32 network cards; MaximumEfaInterfaces 32; 3200 Gigabit;
    # 8x 3800 GB NVMe; 192 vCPU; 2 TiB. [ec2-p5] 32 EFA, card 0 EFA-with-ENA, 1-31 EFA-only.
    "p5.48xlarge": InstanceType(
        name="p5.48xlarge", gpu_model="H100", gpu_count=8, gpu_memory_gib=80,
        network_cards=32, efa_devices=32, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(32)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
    ),
    # [moto] 8x H200 144384 MiB (141 GiB); 32 cards; 32 EFA; 3200 Gigabit. [ec2-p5] same layout as p5.
    "p5e.48xlarge": InstanceType(
        name="p5e.48xlarge", gpu_model="H200", gpu_count=8, gpu_memory_gib=141,
        network_cards=32, efa_devices=32, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(32)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
    ),
    # [moto] 8x H200; 16 cards; 16 EFA; 3200 Gigabit. [design] one EKS cluster saw 15 allocatable:
    # nodecheck and the gate read allocatable from the node rather than trusting this number.
    "p5en.48xlarge": InstanceType(
        name="p5en.48xlarge", gpu_model="H200", gpu_count=8, gpu_memory_gib=141,
        network_cards=16, efa_devices=16, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(16)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
    ),
    # [moto] 8x B200 183359 MiB (179 GiB); 8 cards; 8 EFA; 3200 Gigabit; 8x 3800 GB NVMe.
    "p6-b200.48xlarge": InstanceType(
        name="p6-b200.48xlarge", gpu_model="B200", gpu_count=8, gpu_memory_gib=179,
        network_cards=8, efa_devices=8, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(8)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
    ),
    # [moto] 8x B300 275040 MiB (268 GiB); 17 cards, MaximumEfaInterfaces 16; 6400 Gigabit;
    # 4 TiB. Per card ([moto] NetworkInfo.NetworkCards): card 0 offers InterfaceTypes
    # ["interface"] only (ENA, no EFA), cards 1-16 ["interface", "efa", "efa-only"]; so an ENA
    # primary on card 0 and EFA-only on cards 1-16. tests/test_catalog.py checks every card of
    # every type against that data (read 2026-11-30).
    "p6-b300.48xlarge": InstanceType(
        name="p6-b300.48xlarge", gpu_model="B300", gpu_count=8, gpu_memory_gib=268,
        network_cards=17, efa_devices=16, efa_bandwidth_gbps=6400,
        primary_interface_type=InterfaceType.ENA, efa_card_indexes=tuple(range(1, 17)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=4096,
    ),
}

# Known but not yet supported, with the reason (shown by config validation).
UNSUPPORTED_INSTANCE_TYPES: dict[str, str] = {
    # [design] UltraServer, Arm (Grace), EFA only on cards 1, 5, 9, 13, capacity blocks only.
    "p6e-gb200.36xlarge": (
        "GB200 UltraServers are Arm (Grace) with EFA only on network cards 1, 5, 9 and 13 and are "
        "sold as capacity blocks only; the kit's node group does not model that layout yet"
    ),
}


def get_instance_type(name: str) -> InstanceType:
    """Return the catalog entry for ``name`` or raise KeyError with the supported list."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise KeyError(
            f"unknown GPU instance type {name!r}; supported: {', '.join(INSTANCE_TYPES)}"
        ) from None

"""The instance catalog: facts about the EFA GPU instance types the kit supports, defined once.

A fork adds an instance type here, in one entry; its GPU model needs a record in
``infra/catalog/gpus.py`` (skip it and config validation says so). Capabilities are fields of the
entry, never tests on its name: GPU-initiated NCCL GIN, the service quota it counts against, its
on-demand price, AMI type and CPU architecture.

Both the CDK side (launch template interfaces, AMI type) and the manifests side (``nvidia.com/gpu``
and ``vpc.amazonaws.com/efa`` requests) read these values, so a launch template and a pod can
never disagree about a count.

Sources, referred to below by tag:

- [moto]   EC2 DescribeInstanceTypes data bundled with moto 5.2.5
           (``moto/ec2/resources/instance_types.json.gz``); ``tests/infra/test_catalog.py`` cross-checks
           every overlapping field against it.
- [ec2-efa] AWS EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple
           network cards" (efa-acc-inst-types): primary interface = card 0 / device 0 of type
           EFA-with-ENA; every other card: device index 1, EFA or EFA-only.
- [ec2-p5] AWS EC2 User Guide, accelerated computing instance specs (P5/P5e/P5en/P6 pages).
- [eks-ami] Amazon EKS user guide, "Create nodes with the AL2023 accelerated AMIs"
           (AMI type ``AL2023_x86_64_NVIDIA``).
- [design] ../shared/design.md, "Facts that matter" (collected from awslabs/awsome-distributed-ai,
           awslabs/ai-on-eks and aws-samples/aws-do-eks).
- [quota]  Service Quotas console, EC2 quota "Running On-Demand P instances" (L-417A185B): vCPUs
           per region, counted by every on-demand P instance.
- [price]  Amazon EC2 On-Demand pricing page, us-east-1, Linux, after AWS's June 2025 GPU price
           reduction ("up to 45% price reduction for P5 and P5en", AWS What's New, 2025-06-05).
           Dated 2025-06; prices change: verify with
             aws pricing get-products --service-code AmazonEC2 --filters Type=TERM_MATCH,Field=instanceType,Value=<type>
           p5e.48xlarge and p6-b300.48xlarge are sold through Capacity Blocks / reservations and
           have no public on-demand price we could verify: pass --price-per-hour for them.
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
    architecture: str  # CPU architecture as EC2 names it: x86_64 or arm64
    ami_type: str  # EKS managed node group AMI type (the efa node group reads it)
    vcpus: int
    memory_gib: int
    # GPU-initiated NCCL GIN (DeepEP V2's NCCL_GIN_TYPE=5 path): p5en and the p6 family; others
    # run the CPU-proxy path [design, "DeepEP over EFA"].
    gin_gpu: bool = False
    # The Service Quotas code on-demand instances of this type count against [quota].
    quota_code: str = ""
    quota_name: str = ""
    # On-demand USD per instance-hour [price]; None = no public on-demand price.
    on_demand_usd_per_hour: float | None = None
    price_source: str = ""
    # False for an entry whose facts are not yet cross-checked against EC2's data: preflight,
    # `rlkit check` and `rlkit render` then warn (note says what is unverified).
    facts_verified: bool = True
    note: str = ""
    # Instances whose GPUs share one NVLink domain: 1 for an HGX node (NVLink stops at the
    # node), up to 18 for a GB200 NVL72 UltraServer (72 GPUs). Planner, gate and manifests read
    # nvlink_domain_gpus, never the name.
    nvlink_domain_instances: int = 1

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
    def nvlink_domain_gpus(self) -> int:
        """GPUs one NVLink domain holds: the span where all-to-all never crosses EFA."""
        return self.gpu_count * self.nvlink_domain_instances

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_memory_gib * self.gpu_count


_X86_NVIDIA_AMI = "AL2023_x86_64_NVIDIA"  # [eks-ami]

P_ON_DEMAND_QUOTA_CODE = "L-417A185B"  # [quota]
P_ON_DEMAND_QUOTA_NAME = "Running On-Demand P instances"
_P_QUOTA = {"quota_code": P_ON_DEMAND_QUOTA_CODE, "quota_name": P_ON_DEMAND_QUOTA_NAME}

PRICE_DATE = "2025-06"
# Not re-read from the AWS price list (no AWS access from the build environment, and no copy of
# the price list for these types in the sources we could search on 2026-11-30): flagged verify.
PRICE_SOURCE = (f"Amazon EC2 On-Demand pricing, us-east-1, Linux, after the 2025-06-05 GPU price "
                f"reduction (as of {PRICE_DATE}; unverified: check with aws pricing "
                f"get-products or pass --price-per-hour)")

INSTANCE_TYPES: dict[str, InstanceType] = {
    # [moto] GpuInfo 8x H100 81920 MiB; 32 network cards; MaximumEfaInterfaces 32; 3200 Gigabit;
    # 8x 3800 GB NVMe; 192 vCPU; 2 TiB. [ec2-p5] 32 EFA, card 0 EFA-with-ENA, 1-31 EFA-only.
    "p5.48xlarge": InstanceType(
        name="p5.48xlarge", gpu_model="H100", gpu_count=8, gpu_memory_gib=80,
        network_cards=32, efa_devices=32, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(32)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=False, **_P_QUOTA, on_demand_usd_per_hour=55.04,
        price_source=PRICE_SOURCE,
    ),
    # [moto] 8x H200 144384 MiB (141 GiB); 32 cards; 32 EFA; 3200 Gigabit. [ec2-p5] same layout as p5.
    "p5e.48xlarge": InstanceType(
        name="p5e.48xlarge", gpu_model="H200", gpu_count=8, gpu_memory_gib=141,
        network_cards=32, efa_devices=32, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(32)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=False, **_P_QUOTA, on_demand_usd_per_hour=None,
        price_source=PRICE_SOURCE,
    ),
    # [moto] 8x H200; 16 cards; 16 EFA; 3200 Gigabit. [design] one EKS cluster saw 15 allocatable:
    # nodecheck and the gate read allocatable from the node rather than trusting this number.
    "p5en.48xlarge": InstanceType(
        name="p5en.48xlarge", gpu_model="H200", gpu_count=8, gpu_memory_gib=141,
        network_cards=16, efa_devices=16, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(16)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=True, **_P_QUOTA, on_demand_usd_per_hour=63.296,
        price_source=PRICE_SOURCE,
    ),
    # [moto] 8x B200 183359 MiB (179 GiB); 8 cards; 8 EFA; 3200 Gigabit; 8x 3800 GB NVMe.
    "p6-b200.48xlarge": InstanceType(
        name="p6-b200.48xlarge", gpu_model="B200", gpu_count=8, gpu_memory_gib=179,
        network_cards=8, efa_devices=8, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(8)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=True, **_P_QUOTA, on_demand_usd_per_hour=113.9328,
        price_source=PRICE_SOURCE,
    ),
    # [moto] 8x B300 275040 MiB (268 GiB); 17 cards, MaximumEfaInterfaces 16; 6400 Gigabit;
    # 4 TiB. Per card ([moto] NetworkInfo.NetworkCards): card 0 offers InterfaceTypes
    # ["interface"] only (ENA, no EFA), cards 1-16 ["interface", "efa", "efa-only"]; so an ENA
    # primary on card 0 and EFA-only on cards 1-16. tests/infra/test_catalog.py checks every card of
    # every type against that data (read 2026-11-30).
    "p6-b300.48xlarge": InstanceType(
        name="p6-b300.48xlarge", gpu_model="B300", gpu_count=8, gpu_memory_gib=268,
        network_cards=17, efa_devices=16, efa_bandwidth_gbps=6400,
        primary_interface_type=InterfaceType.ENA, efa_card_indexes=tuple(range(1, 17)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=4096,
        gin_gpu=True, **_P_QUOTA, on_demand_usd_per_hour=None,
        price_source=PRICE_SOURCE,
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


def supports_gin_gpu(instance_type: str) -> bool:
    """Whether ``instance_type`` runs GPU-initiated NCCL GIN (its catalog entry's ``gin_gpu``)."""
    entry = INSTANCE_TYPES.get(instance_type)
    return entry is not None and entry.gin_gpu

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
           network cards" (efa-acc-inst-types), its basic configuration: the primary interface
           (card 0, device 0) a plain ENA interface; where card 0 supports EFA, an EFA-only
           interface at card 0, device 1; each further card an EFA-only interface at device index
           0 (an ENA interface, if wanted, at device 1). The kit does not follow it on every point
           (``InstanceType.interfaces`` says where and why).
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
- [botocore] botocore 1.44.8 EC2 model (``botocore/data/ec2/2016-11-15/service-2.json.gz``): its
           ``InstanceType`` enum lists ``p6e-gb200.36xlarge`` (moto 5.2.5 has no p6e type and
           botocore ships no per-type specs); ``tests/infra/test_catalog.py`` checks the name.
- [cni]    aws/amazon-vpc-cni-k8s@0c65d58cf2b4 (tag v1.23.0) README.md:767 and :283-285, read
           2026-12-02 (the kit pins no vpc-cni build: EKS's default runs): "The CNI plugin by
           default only manages network card 0"; `WARM_ENI_TARGET` default 1 keeps one whole
           interface "and all of its IP addresses" free for pods.
- [us]     ../shared/upstream/ultraservers.md (read 2026-12-01): the P6e-GB200 facts with their
           sources; section numbers below are that file's:
           1.1 EKS "Use P6e-GB200 UltraServers with Amazon EKS": 4 GPUs, sold only as
               UltraServers u-p6e-gb200x36 (9 instances) and u-p6e-gb200x72 (18);
           1.2 Kubernetes 1.33 or later; 1.3 EC2 Capacity Blocks only, Dallas Local Zone opt-in;
           1.4 AMI type AL2023_ARM_64_NVIDIA (aws-cdk-lib 2.275 enum; EKS AMI table "AL2023 ARM
               NVIDIA | p6e-gb200"), release v20251103 or later;
           3.1 arm64; 17 network cards (EC2 "Network cards" table); 3 x 7500 GB NVMe (EC2 spec
               table, seen through a third-party copy); 144 vCPU, 960 GiB, 740 GB HBM3e per
               instance (third-party copies of the AWS P6 page only: facts_verified=False);
           3.3 EC2 efa-acc-inst-types "EFA configuration for P6e-GB200 instances": card 0 ENA
               (100 Gbps), EFA-only on NCIs 1/3/5/.../15; one EFA-only interface per GPU group on
               "NCI 1, device index 0; NCI 5, ...; NCI 9, ...; NCI 13, ..." gives 4 x 400 =
               1,600 Gbps EFA; 5.x aws-ofi-nccl v1.21.1 does not opt p6e-gb200 into GDAKI.
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
    # Per GPU, the nominal size EC2 gives (GpuInfo), for display. The planner fits layouts
    # against the GPU record's usable_memory_gib (infra/catalog/gpus.py [mem]), which CUDA can
    # actually allocate: less than this on every type read so far.
    gpu_memory_gib: float
    network_cards: int
    efa_devices: int  # what a pod requests as vpc.amazonaws.com/efa to own the node's fabric
    # Aggregate EFA bandwidth of the layout below (EC2's NetworkPerformance for every type but
    # p6e-gb200, whose 3,200 Gigabit is the instance's network figure: its 4-interface EFA
    # layout reaches 1,600 [us 3.3]). The planner sizes inter-node traffic with it.
    efa_bandwidth_gbps: int
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
    # Device index of the EFA-only interface on each non-primary EFA card. The older kit layout
    # is 1; EC2's current efa-acc-inst-types page puts EFA-only interfaces at device index 0
    # (p6e-gb200's worked example: "NCI 1, device index 0" ...) [us 3.3].
    efa_only_device_index: int = 1
    # UltraServer types this instance is sold in (EC2 UltraServer type -> instances in it); empty
    # for a type sold as single instances [us 1.1].
    ultraservers: tuple[tuple[str, int], ...] = ()
    # Sold only through EC2 Capacity Blocks for ML [us 1.3]: config refuses other capacity.
    capacity_block_only: bool = False
    # Oldest Kubernetes minor EKS supports the type on ("" = any the kit pins) [us 1.2].
    min_kubernetes_version: str = ""
    # Oldest EKS-optimized AMI release recommended for it ("" = any) [us 1.4].
    min_ami_release: str = ""
    # IPv4 addresses per network interface, and interfaces network card 0 takes [moto]
    # (NetworkInfo.Ipv4AddressesPerInterface, NetworkCards[0].MaximumNetworkInterfaces): the VPC CNI
    # gives pods addresses from interfaces on card 0 only [cni]. None = not known (the subnet-size
    # warning then leaves the type out).
    ipv4_per_interface: int | None = None
    card0_interfaces: int | None = None
    # Network card 0's bandwidth, Gbps [moto] (EC2 DescribeInstanceTypes
    # NetworkInfo.NetworkCards[0].BaselineBandwidthInGbps / PeakBandwidthInGbps): the card whose
    # ENA interface carries the node's IP traffic, S3 uploads included. None = not known (the save
    # estimate then takes the instance's EFA bandwidth over its cards).
    card0_baseline_gbps: float | None = None
    card0_peak_gbps: float | None = None

    @property
    def interfaces(self) -> tuple[NetworkInterfaceSpec, ...]:
        """Launch-template interface layout.

        What the kit does: card 0 / device 0 is the primary interface with an IP, of
        ``primary_interface_type`` (EFA with ENA on the p5 and p6-b200 types, plain ENA where card
        0 has no EFA); every other card that carries an EFA gets one EFA-only interface at
        ``efa_only_device_index`` (1, or 0 for p6e-gb200).

        Where that differs from [ec2-efa]'s basic configuration (plain ENA primary, EFA-only at
        card 0 device 1, other cards' EFA-only at device index 0), and why: card 0 of a p5 takes
        only 2 interfaces ([moto] NetworkCards[0].MaximumNetworkInterfaces), so an ENA primary plus
        an EFA-only interface would fill it and leave the VPC CNI, which draws pod addresses from
        card 0 only [cni], no interface to add; one EFA-with-ENA primary carries both. The device
        index 1 on the other cards is the layout the kit shipped; the page, and
        awslabs/awsome-distributed-ai@0329142 architectures/aws-pcs/assets/add-cng-p6-b300.yaml
        (its header: EFA on cards 1-16 at DeviceIndex 0 for p6-b300), use 0.
        Open question, not changed without a run on hardware: whether device index 1 on those
        cards costs bandwidth or EFA devices (``rlkit gate``'s node check compares allocatable EFA
        devices with the catalog after a deploy).
        """
        layout = [NetworkInterfaceSpec(0, 0, self.primary_interface_type)]
        layout += [
            NetworkInterfaceSpec(card, self.efa_only_device_index, InterfaceType.EFA_ONLY)
            for card in self.efa_card_indexes
            if card != 0
        ]
        return tuple(layout)

    @property
    def container_platform(self) -> str:
        """The OCI platform an image needs to run here (EC2 arm64 is OCI linux/arm64; x86_64 is
        linux/amd64)."""
        return {"x86_64": "linux/amd64", "arm64": "linux/arm64"}[self.architecture]

    @property
    def multi_node_nvlink(self) -> bool:
        """NVLink reaches beyond one instance: pods need an IMEX channel from a DRA ComputeDomain
        and GPU feature discovery's ``nvidia.com/gpu.clique`` label [us 1.6]."""
        return self.nvlink_domain_instances > 1

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs one NVLink domain holds: the span where all-to-all never crosses EFA."""
        return self.gpu_count * self.nvlink_domain_instances

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_memory_gib * self.gpu_count


_X86_NVIDIA_AMI = "AL2023_x86_64_NVIDIA"  # [eks-ami]
_ARM_NVIDIA_AMI = "AL2023_ARM_64_NVIDIA"  # [us 1.4]

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
        price_source=PRICE_SOURCE, ipv4_per_interface=50, card0_interfaces=2,
        card0_baseline_gbps=100, card0_peak_gbps=100,
    ),
    # [moto] 8x H200 144384 MiB (141 GiB); 32 cards; 32 EFA; 3200 Gigabit. [ec2-p5] same layout as p5.
    "p5e.48xlarge": InstanceType(
        name="p5e.48xlarge", gpu_model="H200", gpu_count=8, gpu_memory_gib=141,
        network_cards=32, efa_devices=32, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(32)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=False, **_P_QUOTA, on_demand_usd_per_hour=None,
        price_source=PRICE_SOURCE, ipv4_per_interface=50, card0_interfaces=2,
        card0_baseline_gbps=100, card0_peak_gbps=100,
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
        price_source=PRICE_SOURCE, ipv4_per_interface=50, card0_interfaces=4,
        card0_baseline_gbps=200, card0_peak_gbps=200,
    ),
    # [moto] 8x B200 183359 MiB (179 GiB); 8 cards; 8 EFA; 3200 Gigabit; 8x 3800 GB NVMe.
    "p6-b200.48xlarge": InstanceType(
        name="p6-b200.48xlarge", gpu_model="B200", gpu_count=8, gpu_memory_gib=179,
        network_cards=8, efa_devices=8, efa_bandwidth_gbps=3200,
        primary_interface_type=InterfaceType.EFA, efa_card_indexes=tuple(range(8)),
        nvme_count=8, nvme_size_gb=3800, architecture="x86_64", ami_type=_X86_NVIDIA_AMI,
        vcpus=192, memory_gib=2048,
        gin_gpu=True, **_P_QUOTA, on_demand_usd_per_hour=113.9328,
        price_source=PRICE_SOURCE, ipv4_per_interface=50, card0_interfaces=4,
        card0_baseline_gbps=200, card0_peak_gbps=200,
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
        price_source=PRICE_SOURCE, ipv4_per_interface=50, card0_interfaces=4,
        card0_baseline_gbps=350, card0_peak_gbps=350,
    ),
    # [us] 1.1 4x GB200, UltraServers of 9 or 18; 3.1 arm64, 17 cards, 3x 7500 GB NVMe,
    # 144 vCPU / 960 GiB / 740 GB HBM3e (third-party copies of the AWS P6 page; 185 per GPU,
    # taken as GiB like EC2's GpuInfo for the other types: the unit is not verified); 3.3 card 0 ENA,
    # EFA-only on cards 1, 5, 9, 13 at device index 0 (one per GPU group, 4 x 400 Gbps = 1,600).
    # Cards 2-4, 6-8, 10-12, 14-16 get no interface: EC2's recommended 4-interface layout leaves
    # them empty (the 8-interface alternative splits each GPU's 400 Gbps over two cards, same
    # total). [botocore] lists the name; no EC2 data source here has its per-card capabilities.
    "p6e-gb200.36xlarge": InstanceType(
        name="p6e-gb200.36xlarge", gpu_model="GB200", gpu_count=4, gpu_memory_gib=185,
        network_cards=17, efa_devices=4, efa_bandwidth_gbps=1600,
        primary_interface_type=InterfaceType.ENA, efa_card_indexes=(1, 5, 9, 13),
        nvme_count=3, nvme_size_gb=7500, architecture="arm64", ami_type=_ARM_NVIDIA_AMI,
        vcpus=144, memory_gib=960,
        # aws/aws-ofi-nccl@2475c4c73690 (v1.21.1) tests/unit/aws_platform_mapper.cpp:86: no GDAKI
        # on p6e-gb200 [us 5].
        gin_gpu=False, **_P_QUOTA, on_demand_usd_per_hour=None,
        price_source="sold only as UltraServer Capacity Blocks [us 1.3]: no on-demand price; "
                     "pass --price-per-hour with the block's price",
        facts_verified=False,
        note=("vCPUs, memory and GPU memory come from third-party copies of the AWS P6 page, and "
              "no EC2 data source read has the per-card interface types (botocore lists only "
              "the name, moto lacks the type); nothing was tried on real hardware"),
        nvlink_domain_instances=18, efa_only_device_index=0,
        ultraservers=(("u-p6e-gb200x36", 9), ("u-p6e-gb200x72", 18)),
        capacity_block_only=True, min_kubernetes_version="1.33", min_ami_release="v20251103",
        card0_baseline_gbps=100, card0_peak_gbps=100,  # [us 3.3]: card 0 ENA, 100 Gbps
    ),
}

# Known but not yet supported, with the reason (shown by config validation).
UNSUPPORTED_INSTANCE_TYPES: dict[str, str] = {
    # [us 3.2] names only: botocore 1.44.8 and moto 5.2.5 lack it; no first-party GPU count,
    # memory, network cards or EFA layout was found; the EKS AMI table lists no GB300 row.
    "p6e-gb300.36xlarge": (
        "no cited facts for P6e-GB300 yet: its GPU count and memory, vCPUs, network cards and "
        "EFA interface layout and its EKS AMI type were not found in any first-party source, and "
        "botocore's EC2 model does not list the type; add a catalog entry with those facts and "
        "their sources"
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


def gin_gpu_types() -> str:
    """The catalog's types that run GPU-initiated NCCL GIN (``gin_gpu``), comma-separated, for
    messages."""
    return ", ".join(n for n, t in INSTANCE_TYPES.items() if t.gin_gpu)


def supports_gin_gpu(instance_type: str) -> bool:
    """Whether ``instance_type`` runs GPU-initiated NCCL GIN (its catalog entry's ``gin_gpu``)."""
    entry = INSTANCE_TYPES.get(instance_type)
    return entry is not None and entry.gin_gpu

"""The shared file system catalog: FSx for Lustre PERSISTENT_2 sizes, throughput tiers and
prices, and what a run of a catalog model needs.

Config validation reads the size rules; `rlkit plan` and `rlkit preflight` the prices.

FSx for Lustre bills provisioned storage per GB-month; on PERSISTENT_2 SSD the price per GB-month
depends on the throughput tier (MB/s per TiB), and throughput is bought with the capacity [Amazon
FSx for Lustre pricing page, "File system storage"]. Backups and data transfer are extra and not
counted here; the linked bucket's requests (lazy loads) are billed by S3.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog.models import GIB, MODEL_CATALOG, MoEModel, saves_on_disk, shared_fs_bytes
from infra.trainer_contract import DEFAULT_KEEP_LOCAL

# FSx for Lustre PERSISTENT_2 (SSD): storage capacity is 1200 GiB, 2400 GiB or a multiple of
# 2400 GiB; throughput per TiB is 125, 250, 500 or 1000 MB/s [Amazon FSx API Reference,
# CreateFileSystem StorageCapacity and CreateFileSystemLustreConfiguration PerUnitStorageThroughput].
SHARED_FS_CAPACITY_STEP_GIB = 2400
SHARED_FS_MIN_CAPACITY_GIB = 1200
SHARED_FS_THROUGHPUTS = (125, 250, 500, 1000)
# The config's default tier (storage.shared_filesystem.throughput_mb_s_per_tib).
DEFAULT_THROUGHPUT = 250


def valid_shared_fs_capacity_gib(gib: int) -> int:
    """The smallest valid PERSISTENT_2 capacity that holds ``gib``."""
    if gib <= SHARED_FS_MIN_CAPACITY_GIB:
        return SHARED_FS_MIN_CAPACITY_GIB
    return -(-gib // SHARED_FS_CAPACITY_STEP_GIB) * SHARED_FS_CAPACITY_STEP_GIB


def shared_fs_need_gib(model: MoEModel, keep_local: int = DEFAULT_KEEP_LOCAL) -> int:
    """GiB the shared file system needs for a run of ``model``: the BF16 reference weights plus
    ``keep_local + 1`` checkpoints (weights + optimizer state: the kept saves and the one being
    written). The one sizing rule: config validation checks it (``shared_fs_required_gib``) and
    `rlkit plan` proposes it (``plan_for_model``)."""
    return -(-shared_fs_bytes(model, keep_local=keep_local) // GIB)


def shared_fs_required_gib(model_key: str, keep_local: int = DEFAULT_KEEP_LOCAL) -> int | None:
    """``shared_fs_need_gib`` of catalog model ``model_key``; None for a model the catalog does
    not know (the renderer reports that)."""
    model = MODEL_CATALOG.get(model_key)
    return None if model is None else shared_fs_need_gib(model, keep_local)


_COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def checkpoints_phrase(keep_local: int = DEFAULT_KEEP_LOCAL) -> str:
    """'two checkpoints' for keep_local 1: the words `rlkit plan` and validation both print."""
    n = saves_on_disk(keep_local)
    return f"{_COUNT_WORDS.get(n, str(n))} checkpoints"

# USD per GB-month of PERSISTENT_2 SSD storage, by throughput tier, US East (N. Virginia).
# 0.145 (125 MB/s/TiB) matches a third-party estimate page (c3x.dev, aws_fsx_lustre_file_system:
# "1.2 TB at 125 MB/s/TiB is ~$174/month"); the other tiers are from memory of the AWS pricing
# page and were NOT verified against it on 2026-11-30. Other regions differ.
PERSISTENT_2_USD_PER_GB_MONTH: dict[int, float] = {125: 0.145, 250: 0.210, 500: 0.340,
                                                   1000: 0.600}
PRICE_REGION = "us-east-1"
PRICE_NOTE = (f"{PRICE_REGION} list price, storage only; the 125 MB/s/TiB tier corroborated, "
              "the others from memory: check aws.amazon.com/fsx/lustre/pricing")


@dataclass(frozen=True)
class SharedFsCost:
    capacity_gib: int
    throughput_mb_s_per_tib: int
    usd_per_gb_month: float

    @property
    def usd_per_month(self) -> float:
        return self.capacity_gib * self.usd_per_gb_month

    @property
    def throughput_mb_s(self) -> float:
        return self.capacity_gib / 1024 * self.throughput_mb_s_per_tib

    def describe(self) -> str:
        return (f"FSx for Lustre PERSISTENT_2, {self.capacity_gib} GiB at "
                f"{self.throughput_mb_s_per_tib} MB/s/TiB ({self.throughput_mb_s:,.0f} MB/s): "
                f"~${self.usd_per_month:,.0f}/month [{PRICE_NOTE}]")

    def to_dict(self) -> dict:
        return {"type": "fsx-lustre", "deployment_type": "PERSISTENT_2",
                "capacity_gib": self.capacity_gib,
                "throughput_mb_s_per_tib": self.throughput_mb_s_per_tib,
                "usd_per_gb_month": self.usd_per_gb_month,
                "usd_per_month": round(self.usd_per_month, 2),
                "price_note": PRICE_NOTE}


def cost_for(capacity_gib: int, throughput_mb_s_per_tib: int) -> SharedFsCost:
    return SharedFsCost(capacity_gib, throughput_mb_s_per_tib,
                        PERSISTENT_2_USD_PER_GB_MONTH[throughput_mb_s_per_tib])


@dataclass(frozen=True)
class PlannedSharedFs:
    required_gib: int  # reference weights + keep_local + 1 checkpoints of the model
    cost: SharedFsCost  # the smallest valid file system holding that, at the default tier
    keep_local: int = DEFAULT_KEEP_LOCAL

    def describe(self) -> str:
        kept = "" if self.keep_local == DEFAULT_KEEP_LOCAL else f" (keep_local {self.keep_local})"
        return (f"Shared file system: the reference weights plus {checkpoints_phrase(self.keep_local)}{kept} "
                f"take {self.required_gib:,} GiB -> {self.cost.describe()}")

    def to_dict(self) -> dict:
        return {"required_gib": self.required_gib, "keep_local": self.keep_local,
                "checkpoints_on_disk": saves_on_disk(self.keep_local), **self.cost.to_dict()}


def plan_for_model(model: MoEModel, *,
                   keep_local: int = DEFAULT_KEEP_LOCAL) -> PlannedSharedFs:
    """The file system a run of ``model`` needs (what `rlkit plan` proposes) and its cost: the
    rule and the ``keep_local`` config validation checks (``shared_fs_need_gib``), as the
    launcher runs (FP32 Adam moments, whatever the plan assumed on the GPUs)."""
    need = shared_fs_need_gib(model, keep_local)
    return PlannedSharedFs(need, cost_for(valid_shared_fs_capacity_gib(need), DEFAULT_THROUGHPUT), keep_local)

"""Values the rest of the kit derives from a valid config, each defined once: whether there is a
shared file system, where checkpoints are written, what the file system costs, the tags on every
resource (and on a GPU group's instances), and the Helm values of each add-on (the cluster stack
installs them, preflight compares them with what is deployed)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infra import addons as registry
from infra import names
from infra.addons import AddonContext
from infra.catalog import INSTANCE_TYPES
from infra.catalog.fsx import SharedFsCost, checkpoints_phrase, cost_for, shared_fs_required_gib
from infra.catalog.models import GIB, MODEL_CATALOG, checkpoint_bytes, reference_weights_bytes
from infra.config.model import KitConfig
from infra.config.training_model import SAVE_UPLOAD_UNSIZED_MINUTES, STARTUP_FIXED_MINUTES

CHECKPOINT_LOCAL_DIR = "/checkpoints"  # single-node runs without a shared file system
# A new VPC's private subnets, one per AZ or Local Zone, each take 1/2**PRIVATE_SUBNET_BITS of
# vpc.cidr (a /19 of a /16): every pod takes a VPC address, EFA-only interfaces none.
PRIVATE_SUBNET_BITS = 3
# The largest and smallest vpc.cidr the kit creates (prefix lengths).
VPC_PREFIX_RANGE = (16, 18)


def resource_tags(config: KitConfig) -> dict[str, str]:
    """Tags on every resource of the environment: the user's, then the kit's own last, since
    teardown finds resources by them and no user tag may replace them."""
    tags = {**config.tags, names.ENVIRONMENT_TAG: config.name}
    if config.cost_guard.ttl_hours is not None:
        tags[names.TTL_TAG] = str(config.cost_guard.ttl_hours)
    return tags


def node_group_tags(config: KitConfig, group_name: str) -> dict[str, str]:
    """Tags on what GPU group ``group_name``'s launch template launches (instances, their volumes
    and interfaces): the environment's and the group's name. The launch template writes them;
    preflight compares the deployed template's with them."""
    return {**resource_tags(config), names.NODE_GROUP_TAG: group_name}


def gpu_group_taints(cfg: KitConfig, group_name: str) -> list[names.Taint]:
    """The taints of GPU group ``group_name``'s nodes: the group's own, then the FSx startup
    taint when the environment has the file system (pods wait for the FSx CSI node plugin, which
    removes it from its node once it runs)."""
    startup = [names.FSX_AGENT_NOT_READY_TAINT] if has_shared_fs(cfg) else []
    return [*cfg.gpu_node_groups[group_name].node_taints(), *startup]


def has_shared_fs(cfg: KitConfig) -> bool:
    """Whether the environment has the shared file system (storage stacks, PV/PVC, /fsx)."""
    return cfg.storage.shared_filesystem.type != "none"


def shared_fs_availability_zone(cfg: KitConfig) -> str:
    """The AZ of the shared file system's subnet: the configured one (a Local Zone group's file
    system lives in a parent-region AZ), else the training group's. The storage stack puts it
    there; the pods that mount it are kept in it."""
    fs = cfg.storage.shared_filesystem
    return fs.availability_zone or cfg.gpu_node_groups[cfg.training.node_group].availability_zone


def shared_fs_availability_zone_field(cfg: KitConfig) -> str:
    """The config field ``shared_fs_availability_zone`` read its zone from: the one to change."""
    if cfg.storage.shared_filesystem.availability_zone:
        return "storage.shared_filesystem.availability_zone"
    return f"gpu_node_groups.{cfg.training.node_group}.availability_zone"


def checkpoint_local_dir(cfg: KitConfig) -> str:
    """The run config's ``checkpoint.local_dir``: where Megatron saves and the launcher watches.
    A per-run directory on the shared file system every pod of the job sees; node-local (an
    emptyDir) only on single-node runs without one."""
    if has_shared_fs(cfg):
        return f"{names.SHARED_FS_CHECKPOINTS_DIR}/{cfg.training.run_name}"
    return CHECKPOINT_LOCAL_DIR


def config_cost(cfg: KitConfig) -> SharedFsCost | None:
    """The configured file system's cost; None when the config has none."""
    if not has_shared_fs(cfg):
        return None
    fs = cfg.storage.shared_filesystem
    return cost_for(fs.capacity_gib, fs.throughput_mb_s_per_tib)


def shared_fs_sizing(cfg: KitConfig) -> str | None:
    """What the shared file system must hold for this config's run, in the words validation uses
    (the same ``training.checkpoint.keep_local`` the launcher's retention keeps); None without a
    file system or for a model the catalog does not know."""
    if not has_shared_fs(cfg):
        return None
    keep = cfg.training.checkpoint.keep_local
    need = shared_fs_required_gib(cfg.training.model, keep) if keep >= 1 else None
    if need is None:
        return None
    cap = cfg.storage.shared_filesystem.capacity_gib
    return (f"{cap} GiB holds {cfg.training.model}'s reference weights plus {checkpoints_phrase(keep)} "
            f"(training.checkpoint.keep_local {keep} kept + the save being written): {need} GiB needed")


def chart_values(name: str, config: KitConfig, version: str | None = None) -> dict[str, Any]:
    """Values the kit passes to add-on ``name``'s chart: its record's ``values`` with the kit's
    context, read from ``config`` (GPU groups' tolerations and instance types, the add-on's
    own config section). ``version`` replaces the section's chart version (the chart contract
    tests render every tested version with the values config would give it)."""
    settings = getattr(config.addons, name)
    if version is not None:
        settings = settings.model_copy(update={"version": version})
    return registry.addon(name).values(AddonContext(
        gpu_tolerations=config.gpu_tolerations(),
        gpu_instance_types=config.gpu_instance_types(),
        settings=settings))


@dataclass(frozen=True)
class Estimate:
    """A duration the config estimates (``startup_estimate``, ``save_upload_estimate``), and how
    it was reached, in the words of the config's fields."""
    minutes: float
    how: str


def startup_estimate(cfg: KitConfig) -> Estimate:
    """``training.startup_minutes`` when set; else the fixed part (nodes, image pull, Ray) plus
    the reads a resume makes of the shared file system at its baseline throughput: Megatron's
    ``--load`` of the newest save (weights and FP32 optimizer state, as the file system is
    sized) and the BF16 reference weights (``--ref-load`` and the SGLang engines), counted once.
    The same bound makes a save's write take about 24 minutes on the default file system
    (docs/operations.md, "Uploads where the bandwidth is"). Without a file system or a catalog
    model the reads cannot be sized, and only the fixed part counts."""
    t = cfg.training
    if t.startup_minutes is not None:
        return Estimate(t.startup_minutes, f"training.startup_minutes = {t.startup_minutes:g}")
    fixed = (f"training.startup_minutes unset: {STARTUP_FIXED_MINUTES} min for the nodes, the "
             "image pull and Ray")
    model, cost = MODEL_CATALOG.get(t.model), config_cost(cfg)
    if model is None or cost is None:
        why = "no shared file system" if cost is None else f"{t.model} is not in the kit's catalog"
        return Estimate(STARTUP_FIXED_MINUTES, f"{fixed}; the restore is not counted ({why})")
    read = checkpoint_bytes(model) + reference_weights_bytes(model)
    read_minutes = math.ceil(read / (cost.throughput_mb_s * 1e6) / 60)  # whole minutes, up
    return Estimate(
        STARTUP_FIXED_MINUTES + read_minutes,
        f"{fixed}, plus {read_minutes} min reading the newest save and the reference weights "
        f"({read / GIB:.0f} GiB) at the file system's {cost.throughput_mb_s:.0f} MB/s baseline")


def head_s3_gbps(cfg: KitConfig) -> float | None:
    """The Ray head's network towards S3, in Gbps: the training group's network card 0 baseline
    bandwidth (the card whose ENA interface carries IP traffic; EC2 DescribeInstanceTypes
    NetworkCards[0].BaselineBandwidthInGbps, in the catalog), or, for a type without that figure,
    the instance's EFA bandwidth over its network cards. None for a type the catalog lacks, or a
    training group the config lacks (validation, which calls this, says so)."""
    group = cfg.gpu_node_groups.get(cfg.training.node_group)
    itype = INSTANCE_TYPES.get(group.instance_type) if group is not None else None
    if itype is None:
        return None
    if itype.card0_baseline_gbps is not None:
        return itype.card0_baseline_gbps
    return itype.efa_bandwidth_gbps / itype.network_cards


def save_upload_estimate(cfg: KitConfig) -> Estimate:
    """How long one save and its upload take, from Megatron starting the save to its upload
    complete in S3: ``training.save_upload_minutes`` when set; else the catalog's size of one save
    (``checkpoint_bytes``) written to the shared file system and read back for the upload, each at
    the file system's baseline throughput (the read at the head's network share instead where that
    is slower). The launcher uploads a save once it is finished (rltrainer.checkpoints.resume), so
    the two add up. Without a file system or a catalog model the save cannot be sized, and
    ``SAVE_UPLOAD_UNSIZED_MINUTES`` counts."""
    t = cfg.training
    if t.save_upload_minutes is not None:
        return Estimate(t.save_upload_minutes, f"training.save_upload_minutes = {t.save_upload_minutes:g}")
    # The baseline from the fields, not config_cost: validation calls this before it has refused
    # a throughput tier that has no price (the throughput is still what the config asks for).
    fs = cfg.storage.shared_filesystem
    model = MODEL_CATALOG.get(t.model)
    mb_s = fs.capacity_gib / 1024 * fs.throughput_mb_s_per_tib if has_shared_fs(cfg) else 0
    if model is None or not mb_s > 0:
        why = ("no shared file system" if not has_shared_fs(cfg) else "the file system has no throughput"
               if not mb_s > 0 else f"{t.model} is not in the kit's catalog")
        return Estimate(
            SAVE_UPLOAD_UNSIZED_MINUTES,
            f"training.save_upload_minutes unset: a guess, since the kit cannot size the save ({why})")
    save, fs_bytes_s = checkpoint_bytes(model), mb_s * 1e6
    gbps = head_s3_gbps(cfg)
    net_bytes_s = gbps * 1e9 / 8 if gbps is not None else None
    baseline = f"the file system's {mb_s:.0f} MB/s baseline"
    if net_bytes_s is not None and net_bytes_s < fs_bytes_s:
        read_bytes_s = net_bytes_s
        moved = (f"written at {baseline} and read back for its upload at the head node's {gbps:g} Gbps "
                 f"share of the network to S3 ({net_bytes_s / 1e6:.0f} MB/s, slower than the file "
                 "system)")
    else:
        read_bytes_s = fs_bytes_s
        net = (f"the head node's {gbps:g} Gbps share of the network to S3 is faster"
               if gbps is not None else "the head node's network is not in the kit's catalog")
        moved = (f"written to the shared file system and read back for its upload, each at {baseline} "
                 f"({net})")
    minutes = math.ceil((save / fs_bytes_s + save / read_bytes_s) / 60)  # whole minutes, up
    return Estimate(
        minutes,
        f"training.save_upload_minutes unset: one {t.model} save ({save / GIB:.0f} GiB) {moved}")

"""Values the rest of the kit derives from a valid config, each defined once: whether there is a
shared file system, where checkpoints are written, and what the file system costs."""

from __future__ import annotations

from infra import names
from infra.catalog.fsx import SharedFsCost, cost_for
from infra.config.model import KitConfig

CHECKPOINT_LOCAL_DIR = "/checkpoints"  # single-node runs without a shared file system


def has_shared_fs(cfg: KitConfig) -> bool:
    """Whether the environment has the shared file system (storage stacks, PV/PVC, /fsx)."""
    return cfg.storage.shared_filesystem.type != "none"


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

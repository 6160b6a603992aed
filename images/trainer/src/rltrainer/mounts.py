"""Which filesystem holds a path (from /proc/mounts), and whether every node of a run sees it:
the launcher's check that a multi-node run saves where the Ray head's upload watcher can read,
and its judgement of whether saves outlive this pod."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .contract import RunConfig

MOUNTS_FILE = "/proc/mounts"
# Filesystems every node of a multi-node run can mount at once: Lustre (FSx for Lustre), NFS
# (EFS mounts as nfs4), and the usual parallel filesystems. Anything else (ext4, xfs, overlay,
# tmpfs: an emptyDir or the container's own disk) is private to one pod.
SHARED_FILESYSTEMS = frozenset({"lustre", "nfs", "nfs4", "efs", "ceph", "cephfs", "gpfs", "beegfs", "wekafs",
                                "fuse.glusterfs", "glusterfs"})


def _unescape_mount(path: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def filesystem_type(path: str, mounts_file: str = MOUNTS_FILE) -> tuple[str, str] | None:
    """(filesystem type, mount point) of the mount holding ``path``, from /proc/mounts.

    ``path`` need not exist yet: its nearest existing parent decides (that is where the
    launcher would create it). None when the mounts file cannot be read.
    """
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    real = os.path.realpath(target)
    try:
        lines = Path(mounts_file).read_text().splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount, fstype = _unescape_mount(fields[1]), fields[2]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[1])):
            best = (fstype, mount)  # the last and longest match is the mount on top
    return best


def shared_storage_problem(cfg: RunConfig, mounts_file: str = MOUNTS_FILE) -> str | None:
    """Why a multi-node run cannot use ``checkpoint.local_dir`` (None when it can).

    The launcher and its upload watcher run on the Ray head; Megatron writes the saves on
    the workers. Unless all of them mount one shared filesystem at ``local_dir``, the watcher
    sees no saves, uploads nothing, and the saves vanish with the pods.
    """
    if cfg.parallel.nodes <= 1:
        return None
    local = cfg.checkpoint.local_dir
    found = filesystem_type(local, mounts_file)
    if found is None:
        return (f"checkpoint.local_dir = {json.dumps(local)}: cannot tell its filesystem ({mounts_file} is unreadable), "
                "and a multi-node run needs it on a shared filesystem. Fix: run where /proc/mounts is readable")
    fstype, mount = found
    if fstype in SHARED_FILESYSTEMS:
        return None
    return (
        f"checkpoint.local_dir = {json.dumps(local)}: a {cfg.parallel.nodes}-node run needs it on a filesystem every node "
        f"mounts (one of {', '.join(sorted(SHARED_FILESYSTEMS))}), but it is on {fstype} (mount point {mount}), which "
        "only this pod sees: the workers' saves would never reach the upload watcher. Fix: mount the shared volume "
        "(FSx for Lustre) at this path on the head and every worker, or point checkpoint.local_dir at where it is mounted"
    )


def on_shared_filesystem(path: str, mounts_file: str = MOUNTS_FILE) -> bool:
    """Whether ``path`` is on a shared filesystem (so it outlives this pod)."""
    found = filesystem_type(path, mounts_file)
    return found is not None and found[0] in SHARED_FILESYSTEMS

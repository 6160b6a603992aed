"""A fake node for ``rltrainer nodecheck``: a sysfs/dev/proc tree built from fixtures/nodecheck/
(files in the formats the kernel and the NVIDIA driver print; see that folder's README), and the
probe that reads it. Shared by the nodecheck and EFA counter tests and the gate fixture script."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from rltrainer.nodecheck import NodeProbe

GIB = 1 << 30


NODE_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nodecheck"


def fixture(name: str) -> str:
    return (NODE_FIXTURES / name).read_text()


def make_node(root: Path, *, gpus=8, efa=32, efa_mounted=None, mlx=0, gdrdrv=True, hugepages=2560,
              hugetlb_limit=5120 << 20, plugin=True, driver="580.95.05", efa_driver="3.3.0",
              registry_dwords="PeerMappingOverride=1;", ports_down=(), open_module=True,
              kernel="6.12.46-66.121.amzn2023.x86_64", peermem=False, profiling_restricted=True,
              caps="perfmon", mounts="mounts-fsx.txt") -> Path:
    """A GPU node as a kit-rendered pod sees it: /dev, /sys, /proc and the image's library directories.
    The driver restricts profiling to administrators, and the pod holds IPC_LOCK and PERFMON (what the
    kit's DeepEP benchmark and node-check pods get); ``caps="ipc-lock"`` is a pod without PERFMON."""
    efa_mounted = efa if efa_mounted is None else efa_mounted
    dev = root / "dev"
    (dev / "infiniband").mkdir(parents=True)
    for i in range(gpus):
        (dev / f"nvidia{i}").touch()
    (dev / "nvidiactl").touch()  # not a GPU
    (dev / "nvidia-uvm").touch()
    if gdrdrv:
        (dev / "gdrdrv").touch()
    drivers = root / "sys" / "bus" / "pci" / "drivers"
    for name in ("efa", "mlx5_core"):
        (drivers / name).mkdir(parents=True)
    ib = root / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    for i in range(efa + mlx):
        name, kmod = (f"rdmap{i}s0", "efa") if i < efa else (f"mlx5_{i}", "mlx5_core")
        device = ib / name / "device"
        (device / "infiniband_verbs" / f"uverbs{i}").mkdir(parents=True)
        os.symlink(drivers / kmod, device / "driver")
        # the EFA device plugin mounts only the devices allocated to the pod
        if i < efa_mounted or i >= efa:
            (dev / "infiniband" / f"uverbs{i}").touch()
        (ib / name / "ports" / "1").mkdir(parents=True)
        (ib / name / "ports" / "1" / "state").write_text("1: DOWN\n" if i in ports_down else "4: ACTIVE\n")
    hp = root / "sys" / "kernel" / "mm" / "hugepages" / "hugepages-2048kB"
    hp.mkdir(parents=True)
    (hp / "nr_hugepages").write_text(f"{hugepages}\n")
    cg = root / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "hugetlb.2MB.max").write_text("max\n" if hugetlb_limit is None else f"{hugetlb_limit}\n")
    proc = root / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    if driver:
        banner = fixture("nvidia-version-open.txt" if open_module else "nvidia-version-proprietary.txt")
        (proc / "version").write_text(banner.replace("580.95.05", driver))
    params = fixture("nvidia-params-restricted.txt" if profiling_restricted else "nvidia-params-unrestricted.txt")
    (proc / "params").write_text(params.replace('RegistryDwords: "PeerMappingOverride=1;"',
                                                f'RegistryDwords: "{registry_dwords}"'))
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(f"{kernel}\n")
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "status").write_text(fixture(f"status-{caps}.txt"))
    (root / "proc" / "mounts").write_text(fixture(mounts))
    (root / "fsx").mkdir()
    if peermem:
        (root / "sys" / "module" / "nvidia_peermem").mkdir(parents=True)
    if efa_driver:
        (root / "sys" / "module" / "efa").mkdir(parents=True)
        (root / "sys" / "module" / "efa" / "version").write_text(f"{efa_driver}\n")
    if plugin:
        lib = root / "opt" / "amazon" / "ofi-nccl" / "lib"
        lib.mkdir(parents=True)
        (lib / "libnccl-net-ofi.so").touch()
    return root


# What the trainer image and the kit's pods set: the image's ENV (Dockerfile) and the pod's NCCL_NET_PLUGIN.
POD_ENV = {"CUDA_VERSION": "13.0.1", "NCCL_NET_PLUGIN": "ofi",
           "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/gdrcopy/lib"}


def probe(root: Path, memlock=resource.RLIM_INFINITY, shm=64 * GIB, run=None, env=None) -> NodeProbe:
    env = dict(POD_ENV) if env is None else env
    return NodeProbe(root=root, env=env, run=run or (lambda argv: None), memlock_limit=lambda: memlock,
                     statvfs_bytes=lambda path: shm)

"""``rltrainer nodecheck``: does this pod see what an EFA trainer needs?

Run inside the trainer pod on a GPU node. Each probe reads files under a root path
(``/`` in production, a fake tree in tests) or calls an injectable function, so the
whole check runs anywhere. What it checks, and why:

- ``gpus``:            /dev/nvidiaN devices (fallback ``nvidia-smi -L``) >= expected;
- ``efa_devices``:     EFA devices this pod can open: an ``efa``-driver device in
                       /sys/class/infiniband whose uverbs node is in /dev/infiniband (the
                       EFA device plugin mounts only the allocated ones); fallback
                       ``fi_info -p efa``. A pod with fewer EFA devices than the instance
                       has leaves bandwidth unused (or NCCL falls back to sockets);
- ``efa_port_state``:  port 1 of every EFA device the pod can open is ACTIVE
                       (/sys/class/infiniband/<dev>/ports/1/state, "4: ACTIVE"): a device that is
                       there but down carries nothing, and the check names it;
- ``nvidia_driver``:   the node's full NVIDIA driver version (/proc/driver/nvidia/version,
                       fallback /sys/module/nvidia/version) is at least the image's floor:
                       ``--min-driver``, else the image's RLTRAINER_MIN_NVIDIA_DRIVER (the
                       Dockerfile's MIN_NVIDIA_DRIVER, 580.65.06 for CUDA 13.0, where it cites
                       its source), else the CUDA release's GA driver (``CUDA_DRIVER_FULL_FLOOR``);
- ``gpudirect_rdma``:  the NIC can reach GPU memory directly: through dma-buf (the NVIDIA open
                       kernel module on a kernel >= 5.12, which the EFA provider of libfabric
                       uses when present) or through the peer-memory module (nvidia_peermem in
                       /sys/module). Neither: NCCL and NVSHMEM stage every transfer through
                       host memory;
- ``gdrcopy``:         /dev/gdrdrv, only for the EP backends that use GDRCopy: deepep-nvshmem
                       (NVSHMEM's libfabric transport uses it on EFA for device memory) and
                       deepep-gin (aws-ofi-nccl doc/gin-getting-started.md, "Requirements").
                       The plain NCCL backend does not need it, so it is not checked there;
- ``efa_driver``:      GIN type 5 (EFA-GDA) only: the EFA kernel driver
                       (/sys/module/efa/version) is at least 3.3.0;
- ``peer_mapping_override``: GIN type 5 only: the NVIDIA driver runs with
                       ``PeerMappingOverride=1`` in its RegistryDwords (/proc/driver/nvidia/params),
                       which GPU-initiated NIC access to GPU memory needs (DeepEP's NVSHMEM
                       install guide, third-party/README.md, sets it through
                       ``NVreg_RegistryDwords`` for its GPU-initiated IBGDA path; we found no
                       EFA-GDA document that names it, so the check follows the issue's rule);
- ``profiling``:       DeepEP backends only: the benchmark times DeepEP's kernels with torch's
                       CUDA profiler, as DeepEP's own ``bench_kineto`` does. When the driver
                       restricts profiling to administrators (``RmProfilingAdminOnly: 1`` in
                       /proc/driver/nvidia/params), the pod needs CAP_PERFMON, which R580 drivers
                       accept for device and context profiling
                       (NVIDIA/open-gpu-kernel-modules@307159f2623d, tag 580.65.06,
                       kern_profiler_v2.c:32-35 ``_isNonAdminProfilingPermitted`` and
                       os-interface.c:383-390 ``os_check_access(RS_ACCESS_PERFMON)``), or
                       CAP_SYS_ADMIN, which awsome-distributed-ai's deepep-benchmark manifests
                       grant. The kit's manifests add PERFMON, the narrower one, to the DeepEP benchmark pods;
- ``shared_fs``:       with ``--shared-fs DIR``: DIR is a mounted file system (a Lustre mount
                       when ``--shared-fs-type lustre``) and a file written there reads back, so
                       a broken FSx mount fails the gate instead of the first checkpoint;
- ``hugepages_2Mi``:   2 MiB huge pages on the node and in the pod's hugetlb cgroup
                       (libfabric's EFA provider uses them for bounce buffers);
- ``memlock``:         unlimited locked memory, required to register GPU/host buffers;
- ``shm``:             /dev/shm size (NCCL's intra-node transport and PyTorch workers);
- ``nccl_ofi_plugin``: the net plugin NCCL would load, found as NCCL names it (NCCL_NET_PLUGIN,
                       or nccl.conf) and as dlopen searches (rltrainer.nccl_net_plugin); without
                       one NCCL silently uses TCP sockets.

Output: one JSON object on stdout, ``{"kind": "nodecheck", "ok": ..., "checks": [...],
"image": {...}}`` (``image``: the fabric stack's versions the image recorded at build time,
rltrainer.image_versions; null outside the image), and on stderr those versions on one line,
then a one-line verdict. Exit code 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import socket
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from . import nccl_net_plugin
from .contract import EP_BACKENDS  # the run config's expert-parallel backend names

CHECK_NAMES = ("gpus", "efa_devices", "efa_port_state", "nvidia_driver", "gpudirect_rdma", "gdrcopy",
               "efa_driver", "peer_mapping_override", "profiling", "shared_fs", "hugepages_2Mi", "memlock", "shm",
               "nccl_ofi_plugin", "imex_channel", "gpu_fabric")

GDRCOPY_BACKENDS = ("deepep-nvshmem", "deepep-gin")
GIN_TYPE_EFA_GDA = 5  # NCCL_GIN_TYPE for GPU-initiated EFA (aws-ofi-nccl doc/gin-getting-started.md)

# Sources for the driver floors (read 2026-12-01): NVIDIA "Supported Drivers and CUDA Toolkit
# Versions" (R580 is the branch for CUDA 13.x), NVIDIA's minor-version compatibility table (CUDA
# 13.x >= 580), and the release tags below. A CUDA 12.x image can also run on an older 12.x driver
# through minor-version compatibility, with limits (no PTX JIT of newer code); the kit does not
# rely on that.
# The full driver version each CUDA release's GA needs, for an image that does not say its own
# floor (the trainer image does: RLTRAINER_MIN_NVIDIA_DRIVER). 580.65.06 and 575.51.03 are the
# first R580 and R575 releases (NVIDIA/open-gpu-kernel-modules tags, 2025-08-04 and 2025-05-01,
# the days CUDA 13.0.0 and 12.9.0 shipped); NVIDIA's CUDA release notes list them as the GA floors.
CUDA_DRIVER_FULL_FLOOR: dict[tuple[int, int], str] = {(13, 0): "580.65.06", (12, 9): "575.51.03"}
MIN_DRIVER_ENV = "RLTRAINER_MIN_NVIDIA_DRIVER"  # the Dockerfile sets it from MIN_NVIDIA_DRIVER
DMABUF_MIN_KERNEL = (5, 12)  # Linux added dma-buf import for RDMA memory registration in 5.12
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38  # linux/capability.h
EFA_GDA_MIN_DRIVER = (3, 3, 0)  # EFA installer 1.50.0 brought EFA driver 3.3.0 with GIN-capable aws-ofi-nccl 1.21.1

@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    expected: Any
    found: Any
    fix: str


def _run_command(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _memlock_soft_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


def _statvfs_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


class NodeProbe:
    """Reads the node through ``root`` and injectable hooks (for tests)."""

    def __init__(
        self,
        root: str | Path = "/",
        env: dict[str, str] | None = None,
        run: Callable[[list[str]], str | None] = _run_command,
        memlock_limit: Callable[[], int] = _memlock_soft_limit,
        statvfs_bytes: Callable[[str], int | None] = _statvfs_bytes,
    ):
        self.root = Path(root)
        self.env = dict(os.environ if env is None else env)
        self.run = run
        self.memlock_limit = memlock_limit
        self.statvfs_bytes = statvfs_bytes

    def p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    # -- probes

    def gpu_count(self) -> int:
        devs = [d for d in glob.glob(str(self.p("/dev/nvidia*"))) if Path(d).name[len("nvidia"):].isdigit()]
        if devs:
            return len(devs)
        listing = self.run(["nvidia-smi", "-L"])
        return sum(1 for line in (listing or "").splitlines() if line.startswith("GPU "))

    def usable_efa(self) -> list[str] | None:
        """Names of the EFA devices this pod can open (None: no /sys/class/infiniband)."""
        ib = self.p("/sys/class/infiniband")
        if not ib.is_dir():
            return None
        usable = []
        for dev in sorted(ib.iterdir()):
            driver = dev / "device" / "driver"
            name = os.path.basename(os.path.realpath(driver)) if driver.exists() else ""
            if name != "efa":
                continue
            verbs = dev / "device" / "infiniband_verbs"
            nodes = [v.name for v in verbs.iterdir()] if verbs.is_dir() else []
            if any(self.p(f"/dev/infiniband/{n}").exists() for n in nodes):
                usable.append(dev.name)
        return usable

    def port_state(self, device: str) -> str:
        """Port 1's state as the kernel prints it ("4: ACTIVE"), or "unreadable"."""
        text = self._read(f"/sys/class/infiniband/{device}/ports/1/state")
        return text.strip() if text and text.strip() else "unreadable"

    def efa_devices(self) -> tuple[int, str]:
        """(usable EFA devices, how they were counted)."""
        usable = self.usable_efa()
        if usable is not None:
            return len(usable), "sysfs"
        listing = self.run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
        if listing is None:
            return 0, "none"
        domains = {line.split(":", 1)[1].strip() for line in listing.splitlines() if line.strip().startswith("domain:")}
        return len(domains), "fi_info"

    def gdrdrv_present(self) -> bool:
        return self.p("/dev/gdrdrv").exists()

    def _read(self, path: str) -> str | None:
        try:
            return self.p(path).read_text()
        except OSError:
            return None

    def nvidia_driver_version(self) -> str | None:
        """e.g. "580.95.05" from the kernel module's banner."""
        text = self._read("/proc/driver/nvidia/version")
        if text:
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
            if m:
                return m.group(1)
        text = self._read("/sys/module/nvidia/version")
        return text.strip() if text and text.strip() else None

    def image_cuda_version(self) -> str | None:
        """The CUDA the image was built with: $CUDA_VERSION (NVIDIA's CUDA images set it), else
        /usr/local/cuda/version.json."""
        if self.env.get("CUDA_VERSION"):
            return self.env["CUDA_VERSION"]
        text = self._read("/usr/local/cuda/version.json")
        if text:
            try:
                return json.loads(text)["cuda"]["version"]
            except (ValueError, KeyError, TypeError):
                return None
        return None

    def nvidia_open_module(self) -> bool | None:
        """Whether the loaded NVIDIA kernel module is the open one (None: no banner)."""
        text = self._read("/proc/driver/nvidia/version")
        return None if not text else "Open Kernel Module" in text

    def kernel_release(self) -> str | None:
        text = self._read("/proc/sys/kernel/osrelease")
        return text.strip() if text and text.strip() else None

    def peermem_loaded(self) -> bool:
        return self.p("/sys/module/nvidia_peermem").is_dir()

    def nvidia_param(self, name: str) -> str | None:
        """One line of /proc/driver/nvidia/params ("RmProfilingAdminOnly: 1" -> "1")."""
        text = self._read("/proc/driver/nvidia/params")
        for line in (text or "").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == name:
                return value.strip().strip('"')
        return None

    def effective_capabilities(self) -> int | None:
        """This process's effective capability set (CapEff in /proc/self/status)."""
        for line in (self._read("/proc/self/status") or "").splitlines():
            if line.startswith("CapEff:"):
                try:
                    return int(line.split(":", 1)[1].strip(), 16)
                except ValueError:
                    return None
        return None

    def mount_of(self, path: str) -> tuple[str, str] | None:
        """(mount point, file system type) of the mount that holds ``path`` (/proc/mounts)."""
        best = None
        for line in (self._read("/proc/mounts") or "").splitlines():
            fields = line.split()
            if len(fields) < 3:
                continue
            point = fields[1].replace("\\040", " ")
            if path == point or path.startswith(point.rstrip("/") + "/"):
                if best is None or len(point) > len(best[0]):
                    best = (point, fields[2])
        return best

    def write_probe(self, path: str) -> str | None:
        """Write, sync, read back and remove a small file in ``path``; the error, or None."""
        # Every node's check writes here at once, each as PID 1 of its own container: the name
        # must be unique across pods, or one pod's unlink fails another's read-back.
        target = self.p(path) / f".rltrainer-nodecheck-{socket.gethostname()}-{uuid.uuid4().hex}"
        data = b"rltrainer nodecheck\n"
        try:
            with open(target, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            back = target.read_bytes()
            target.unlink()
        except OSError as exc:
            return f"{type(exc).__name__}: {exc.strerror or exc}"
        return None if back == data else "read back different bytes"

    def efa_driver_version(self) -> str | None:
        text = self._read("/sys/module/efa/version")
        return text.strip() if text and text.strip() else None

    def nvidia_registry_dwords(self) -> str | None:
        """The RegistryDwords line of the NVIDIA module parameters ("" when unset)."""
        text = self._read("/proc/driver/nvidia/params")
        if text is None:
            return None
        for line in text.splitlines():
            if line.startswith("RegistryDwords:"):
                return line.split(":", 1)[1].strip().strip('"')
        return ""

    def hugepages_2mi_bytes(self) -> tuple[int, int | None]:
        """(node's 2 MiB pages in bytes, this pod's hugetlb cgroup limit in bytes or None)."""
        try:
            pages = int(self.p("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text().strip())
        except (OSError, ValueError):
            pages = 0
        limit = None
        for path in ("/sys/fs/cgroup/hugetlb.2MB.max", "/sys/fs/cgroup/hugetlb/hugetlb.2MB.limit_in_bytes"):
            f = self.p(path)
            if f.is_file():
                text = f.read_text().strip()
                limit = None if text == "max" else int(text)
                break
        return pages * (2 << 20), limit

    def shm_bytes(self) -> int | None:
        return self.statvfs_bytes(str(self.p("/dev/shm")))

    def nccl_plugin_resolution(self) -> nccl_net_plugin.PluginResolution:
        return nccl_net_plugin.resolve(self.root, self.env)

    def nccl_plugin(self) -> str | None:
        """The net plugin NCCL would load here (rltrainer.nccl_net_plugin), or None."""
        return self.nccl_plugin_resolution().path


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def full_driver_floor(cuda: str | None) -> str | None:
    """The GA driver of this CUDA release (None: unknown CUDA)."""
    v = _version(cuda)
    if v is None or len(v) < 2:
        return None
    known = [(k, floor) for k, floor in CUDA_DRIVER_FULL_FLOOR.items() if k[0] == v[0] and k <= v[:2]]
    return max(known)[1] if known else None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def run_checks(
    probe: NodeProbe,
    *,
    expect_gpus: int,
    expect_efa: int,
    hugepages_mib: int = 5120,
    min_shm_gib: float = 8.0,
    skip: Sequence[str] = (),
    ep_backend: str = "nccl",
    gin_type: int | None = None,
    cuda_version: str | None = None,
    min_driver: str | None = None,
    shared_fs: str | None = None,
    shared_fs_type: str | None = None,
) -> list[CheckResult]:
    """Run every check not in ``skip``; each result says what to do when it fails."""
    results: list[CheckResult] = []

    def add(name: str, ok: bool, expected: Any, found: Any, fix: str) -> None:
        if name not in skip:
            results.append(CheckResult(name, ok, expected, found, "" if ok else fix))

    gpus = probe.gpu_count()
    add("gpus", gpus >= expect_gpus, expect_gpus, gpus,
        f"request nvidia.com/gpu: {expect_gpus} for the pod and check that the NVIDIA device plugin runs on this node")

    efa, how = probe.efa_devices()
    add("efa_devices", efa >= expect_efa, expect_efa, efa,
        f"request vpc.amazonaws.com/efa: {expect_efa} (the node's allocatable EFA count) for the pod, and check that the "
        "EFA device plugin tolerates the GPU taint and that the launch template attached every EFA interface"
        + ("" if how != "none" else " (neither /sys/class/infiniband nor fi_info was available)"))

    usable = probe.usable_efa()
    if usable is not None and usable:
        states = {dev: probe.port_state(dev) for dev in usable}
        down = {dev: st for dev, st in states.items() if not st.endswith("ACTIVE")}
        add("efa_port_state", not down, f"port 1 ACTIVE on all {len(states)} EFA devices",
            "all ACTIVE" if not down else "; ".join(f"{d} {st}" for d, st in down.items()),
            f"EFA device(s) {', '.join(down)} are not ACTIVE: NCCL loses those rails or fails over them. Check "
            "`cat /sys/class/infiniband/<dev>/ports/1/state` and the instance's EFA interfaces; cordon the node "
            "and replace it if a port stays down")

    cuda = cuda_version or probe.image_cuda_version()
    driver = probe.nvidia_driver_version()
    dv = _version(driver)
    floor_text = min_driver or probe.env.get(MIN_DRIVER_ENV) or full_driver_floor(cuda)
    floor = _version(floor_text)
    if floor is None:
        add("nvidia_driver", False, f"a known driver floor (--min-driver, ${MIN_DRIVER_ENV}, or a CUDA "
            f"version it knows: {_known_cuda()})", f"CUDA {cuda or 'not found'}, driver {driver or 'not found'}",
            "run the trainer image (it sets RLTRAINER_MIN_NVIDIA_DRIVER and CUDA_VERSION), or pass --min-driver; "
            "add the CUDA release's GA driver to CUDA_DRIVER_FULL_FLOOR in rltrainer/nodecheck.py if it is new")
    else:
        add("nvidia_driver", dv is not None and dv >= floor,
            f">= {floor_text}" + (f" (CUDA {cuda})" if cuda else ""), driver or "not found",
            f"use a GPU AMI whose NVIDIA driver is {floor_text} or newer (the EKS AL2023 NVIDIA AMI release "
            "notes list the driver), or build the image's -cu12 variant for an older driver; then replace the "
            "node group's nodes")

    open_module, release = probe.nvidia_open_module(), probe.kernel_release()
    kernel = _version(release)
    dmabuf = bool(open_module) and kernel is not None and kernel[:2] >= DMABUF_MIN_KERNEL
    peermem = probe.peermem_loaded()
    paths = [name for name, ok in (("dma-buf", dmabuf), ("nvidia_peermem", peermem)) if ok]
    add("gpudirect_rdma", bool(paths), "dma-buf (NVIDIA open kernel module, kernel >= 5.12) or nvidia_peermem",
        " and ".join(paths) if paths else
        f"neither (NVIDIA module {'open' if open_module else 'proprietary' if open_module is False else 'not found'}, "
        f"kernel {release or 'unknown'}, nvidia_peermem not loaded)",
        "use the EKS NVIDIA AMI (open kernel module on a 6.x kernel gives dma-buf), or load nvidia_peermem "
        "(`modprobe nvidia_peermem`) in the launch template's user data")

    if ep_backend in GDRCOPY_BACKENDS:
        gdr = probe.gdrdrv_present()
        add("gdrcopy", gdr, f"/dev/gdrdrv present ({ep_backend} uses GDRCopy)", "present" if gdr else "missing",
            "load the gdrdrv kernel module on the node (the EKS NVIDIA AMI ships GDRCopy), keep "
            "NVIDIA_GDRCOPY=enabled in the pod so the NVIDIA container runtime mounts /dev/gdrdrv")

    if gin_type == GIN_TYPE_EFA_GDA:
        need = ".".join(map(str, EFA_GDA_MIN_DRIVER))
        efa_drv = probe.efa_driver_version()
        ev = _version(efa_drv)
        add("efa_driver", ev is not None and ev >= EFA_GDA_MIN_DRIVER, f">= {need} (EFA-GDA, NCCL_GIN_TYPE=5)",
            efa_drv or "not found",
            f"install EFA kernel driver {need} or newer on the node (EFA installer >= 1.50.0; check "
            "`cat /sys/module/efa/version`), or run GIN through the CPU proxy (gin_mode: proxy)")
        dwords = probe.nvidia_registry_dwords()
        on = dwords is not None and re.search(r"(^|;)\s*PeerMappingOverride\s*=\s*1\s*(;|$)", dwords) is not None
        add("peer_mapping_override", on, "PeerMappingOverride=1 in the NVIDIA driver's RegistryDwords",
            "not readable" if dwords is None else (dwords or "RegistryDwords empty"),
            "set `options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` in /etc/modprobe.d on the "
            "node (launch template user data) and reload the driver, or run GIN through the CPU proxy "
            "(gin_mode: proxy)")

    if ep_backend.startswith("deepep"):
        restricted = probe.nvidia_param("RmProfilingAdminOnly")
        caps = probe.effective_capabilities()
        held = [name for name, bit in (("PERFMON", CAP_PERFMON), ("SYS_ADMIN", CAP_SYS_ADMIN))
                if caps is not None and caps >> bit & 1]
        ok = restricted == "0" or bool(held)
        add("profiling", ok, "DeepEP kernel timing allowed: RmProfilingAdminOnly 0, or CAP_PERFMON",
            f"RmProfilingAdminOnly {restricted if restricted is not None else 'unreadable'}, capabilities "
            f"{'+'.join(held) if held else 'neither PERFMON nor SYS_ADMIN'}",
            "render the fabric jobs with the kit (it adds the PERFMON capability to the DeepEP benchmark pods), "
            "or set `options nvidia NVreg_RestrictProfilingToAdminUsers=0` on the node; without either the EP "
            "benchmark's kernel timing fails")

    if shared_fs is not None:
        mount = probe.mount_of(shared_fs)
        problem = None
        if mount is None or mount[0] == "/":
            problem = "not a mount (the pod's root file system)"
        elif shared_fs_type and mount[1] != shared_fs_type:
            problem = f"mounted as {mount[1]} at {mount[0]}, not {shared_fs_type}"
        else:
            error = probe.write_probe(shared_fs)
            if error is not None:
                problem = f"{mount[1]} at {mount[0]}, write failed: {error}"
        add("shared_fs", problem is None,
            f"{shared_fs} mounted" + (f" ({shared_fs_type})" if shared_fs_type else "") + " and writable",
            problem or f"{mount[1]} at {mount[0]}, write and read back ok",
            f"check the shared file system's claim and the FSx CSI node plugin on this node (`kubectl describe pod`, "
            f"the fsx-csi-node pod's log); the run's checkpoints are written to {shared_fs}")

    node_bytes, cgroup_limit = probe.hugepages_2mi_bytes()
    usable = node_bytes if cgroup_limit is None else min(node_bytes, cgroup_limit)
    need = hugepages_mib << 20
    add("hugepages_2Mi", usable >= need, f">= {hugepages_mib} MiB", f"{usable >> 20} MiB",
        f"request hugepages-2Mi: {hugepages_mib}Mi for the pod and pre-allocate 2 MiB huge pages on the node "
        f"(node has {node_bytes >> 20} MiB" + (f", pod cgroup allows {cgroup_limit >> 20} MiB)" if cgroup_limit is not None else ")"))

    limit = probe.memlock_limit()
    unlimited = limit == resource.RLIM_INFINITY
    add("memlock", unlimited, "unlimited", "unlimited" if unlimited else f"{limit} bytes",
        "run the container with an unlimited memlock ulimit (the EKS AMI's containerd default) and the IPC_LOCK capability")

    shm = probe.shm_bytes()
    add("shm", shm is not None and shm >= min_shm_gib * (1 << 30), f">= {min_shm_gib:g} GiB",
        _gib(shm) if shm is not None else "missing",
        "mount an emptyDir with medium: Memory at /dev/shm (the container default of 64 MiB starves NCCL)")

    plugin = probe.nccl_plugin_resolution()
    add("nccl_ofi_plugin", plugin.path is not None, f"a net plugin NCCL loads for {plugin.setting}",
        plugin.path or ("no plugin named: NCCL uses its internal IB and socket transports" if not plugin.tried else
                        f"none of {', '.join(plugin.tried)} on LD_LIBRARY_PATH, in /etc/ld.so.cache or the system "
                        "library directories"),
        "use the trainer image (the EFA installer puts aws-ofi-nccl in /opt/amazon/ofi-nccl/lib), keep that directory "
        "on LD_LIBRARY_PATH and set NCCL_NET_PLUGIN=ofi (NCCL opens ofi, then libnccl-net-ofi.so)")
    return results


def _known_cuda() -> str:
    return ", ".join(f"{a}.{b}" for a, b in sorted(CUDA_DRIVER_FULL_FLOOR))


def verdict(results: list[CheckResult]) -> str:
    failed = [r for r in results if not r.ok]
    if not failed:
        return f"nodecheck: PASS ({len(results)} checks)"
    parts = [f"{r.name} (expected {r.expected}, found {r.found})" for r in failed]
    return f"nodecheck: FAIL {len(failed)} of {len(results)}: " + "; ".join(parts)


def build_parser(prog: str = "rltrainer nodecheck") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expect-gpus", type=int, required=True, help="GPUs the pod should see, e.g. 8")
    p.add_argument("--expect-efa", type=int, required=True, help="EFA devices the pod should see, e.g. 32 on p5.48xlarge")
    p.add_argument("--hugepages-mib", type=int, default=5120, help="2 MiB huge pages needed, in MiB (default 5120)")
    p.add_argument("--min-shm-gib", type=float, default=8.0, help="smallest acceptable /dev/shm in GiB (default 8)")
    p.add_argument("--skip", action="append", default=[], choices=CHECK_NAMES, metavar="CHECK",
                   help=f"leave a check out (repeatable): {', '.join(CHECK_NAMES)}")
    p.add_argument("--ep-backend", default="nccl", choices=EP_BACKENDS,
                   help="the run's expert-parallel backend: GDRCopy is checked only for deepep-nvshmem and deepep-gin")
    p.add_argument("--gin-type", type=int, default=None,
                   help="NCCL_GIN_TYPE the profile sets (5 = EFA-GDA: also checks the EFA driver and "
                   "PeerMappingOverride)")
    p.add_argument("--min-driver", default=None,
                   help=f"oldest NVIDIA driver the image runs on, e.g. 580.65.06 (default: ${MIN_DRIVER_ENV}, "
                   "which the trainer image sets, else the GA driver of the image's CUDA)")
    p.add_argument("--shared-fs", default=None, metavar="DIR",
                   help="also check that DIR is a mounted file system and that a file written there reads back")
    p.add_argument("--shared-fs-type", default=None, metavar="FSTYPE",
                   help="the file system type DIR must have, e.g. lustre (with --shared-fs)")
    p.add_argument("--versions-file", default=None, help="the image's version record (default "
                   "/opt/rltrainer/image-versions.json; printed with the result)")
    p.add_argument("--cuda-version", default=None,
                   help="CUDA version of the image (default: $CUDA_VERSION or /usr/local/cuda/version.json)")
    p.add_argument("--root", default="/", help="filesystem root to inspect (default /; tests use a fake tree)")
    p.add_argument("--expect-imex-channel", action="store_true",
                   help="NVLink spans instances (UltraServers): also check the pod's IMEX channel and GPU fabric")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None,
         probe: NodeProbe | None = None) -> int:
    """Check GPUs, EFA devices and ports, drivers, GPUDirect RDMA, GDRCopy, profiling, the shared file system, huge
    pages, memlock, /dev/shm and the NCCL OFI plugin of this pod."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    return run_main(args, out, err, probe)


def run_main(args: argparse.Namespace, out: TextIO, err: TextIO, probe: NodeProbe | None = None) -> int:
    probe = probe or NodeProbe(root=args.root)
    results = run_checks(probe, expect_gpus=args.expect_gpus, expect_efa=args.expect_efa,
                         hugepages_mib=args.hugepages_mib, min_shm_gib=args.min_shm_gib, skip=args.skip,
                         ep_backend=args.ep_backend, gin_type=args.gin_type, cuda_version=args.cuda_version,
                         min_driver=args.min_driver, shared_fs=args.shared_fs, shared_fs_type=args.shared_fs_type)
    if args.expect_imex_channel:  # rltrainer.imex: the ComputeDomain's channel and the fabric
        from . import imex

        for name, good, expected, found, fix in (imex.check_imex_channel(args.root),
                                                 imex.check_gpu_fabric(args.expect_gpus)):
            if name not in args.skip:
                results.append(CheckResult(name, good, expected, found, "" if good else fix))
    ok = all(r.ok for r in results)
    from . import image_versions

    versions = image_versions.load(args.versions_file or probe.p(image_versions.VERSIONS_FILE))
    versions = None if versions is None else image_versions.ordered(versions)
    out.write(json.dumps({"kind": "nodecheck", "ok": ok, "checks": [asdict(r) for r in results],
                          "image": versions}) + "\n")
    out.flush()
    print("nodecheck: image " + (" ".join(f"{k}={v}" for k, v in versions.items()) if versions else
                                 "versions unknown (no /opt/rltrainer/image-versions.json: not the trainer image)"),
          file=err, flush=True)
    print(verdict(results), file=err, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":  # python -m rltrainer.nodecheck
    sys.exit(main())

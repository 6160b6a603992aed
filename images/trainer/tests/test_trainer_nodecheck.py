"""``rltrainer nodecheck`` against a fake sysfs/dev/proc tree built from fixtures/nodecheck/
(files in the formats the kernel and the NVIDIA driver print; see that folder's README)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rltrainer.nodecheck import CHECK_NAMES, NodeProbe, main

from node_helpers import POD_ENV, fixture, make_node, probe


def check(argv, node_probe):
    out, err = io.StringIO(), io.StringIO()
    rc = main(argv, out=out, err=err, probe=node_probe)
    return rc, json.loads(out.getvalue()), err.getvalue().strip().splitlines()[-1]


def test_healthy_p5_node_passes(tmp_path: Path):
    root = make_node(tmp_path, mlx=2)
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 0
    assert report["kind"] == "nodecheck" and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == [n for n in CHECK_NAMES if n not in (
        "gdrcopy", "efa_driver", "peer_mapping_override", "profiling",  # the NCCL backend needs none of these
        "shared_fs", "imex_channel", "gpu_fabric")]  # only with --shared-fs
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["gpus"] == {"name": "gpus", "ok": True, "expected": 8, "found": 8, "fix": ""}
    assert by_name["efa_devices"]["found"] == 32  # the two mlx5 devices do not count
    assert by_name["hugepages_2Mi"]["found"] == "5120 MiB"
    assert by_name["nccl_ofi_plugin"]["found"] == "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    assert all(set(c) == {"name", "ok", "expected", "found", "fix"} for c in report["checks"])
    assert by_name["nvidia_driver"]["expected"] == ">= 580.65.06 (CUDA 13.0.1)"
    assert by_name["nvidia_driver"]["found"] == "580.95.05"
    assert by_name["efa_port_state"]["found"] == "all ACTIVE"
    assert by_name["gpudirect_rdma"]["found"] == "dma-buf"
    assert verdict == "nodecheck: PASS (9 checks)"


def test_misconfigured_pod_fails_with_fixes(tmp_path: Path):
    # 16 of 32 EFA devices allocated, no gdrdrv, no huge pages in the pod's cgroup,
    # locked memory capped, docker's 64 MiB /dev/shm, no OFI plugin
    root = make_node(tmp_path, efa_mounted=16, gdrdrv=False, hugetlb_limit=0, plugin=False, caps="perfmon")
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32", "--ep-backend", "deepep-nvshmem"],
                                probe(root, memlock=64 * 1024, shm=64 << 20))
    assert rc == 1
    assert report["ok"] is False
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert sorted(failed) == sorted(["efa_devices", "gdrcopy", "hugepages_2Mi", "memlock", "shm", "nccl_ofi_plugin"])
    assert failed["efa_devices"]["fix"].startswith("request vpc.amazonaws.com/efa: 32 (the node's allocatable EFA count)")
    assert failed["hugepages_2Mi"]["fix"] == (
        "request hugepages-2Mi: 5120Mi for the pod and pre-allocate 2 MiB huge pages on the node "
        "(node has 5120 MiB, pod cgroup allows 0 MiB)"
    )
    assert verdict == (
        "nodecheck: FAIL 6 of 11: efa_devices (expected 32, found 16); "
        "gdrcopy (expected /dev/gdrdrv present (deepep-nvshmem uses GDRCopy), found missing); "
        "hugepages_2Mi (expected >= 5120 MiB, found 0 MiB); memlock (expected unlimited, found 65536 bytes); "
        "shm (expected >= 8 GiB, found 0.1 GiB); nccl_ofi_plugin (expected a net plugin NCCL loads for "
        "NCCL_NET_PLUGIN=ofi (environment), found none of ofi, libnccl-net-ofi.so on LD_LIBRARY_PATH, in "
        "/etc/ld.so.cache or the system library directories)"
    )


def test_missing_gpus_fail(tmp_path: Path):
    root = make_node(tmp_path, gpus=4)
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 1
    assert verdict == "nodecheck: FAIL 1 of 9: gpus (expected 8, found 4)"


def test_nccl_backend_does_not_need_gdrdrv_but_deepep_does(tmp_path: Path):
    root = make_node(tmp_path, gdrdrv=False, caps="perfmon")
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 0 and "gdrcopy" not in [c["name"] for c in report["checks"]]
    for backend in ("deepep-nvshmem", "deepep-gin"):
        rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32", "--ep-backend", backend], probe(root))
        assert rc == 1
        assert verdict == (f"nodecheck: FAIL 1 of 11: gdrcopy (expected /dev/gdrdrv present ({backend} uses GDRCopy), "
                           "found missing)")


@pytest.mark.parametrize("cuda, driver, ok, expected", [
    ("13.0.1", "580.95.05", True, ">= 580.65.06 (CUDA 13.0.1)"),
    ("13.0.1", "575.57.08", False, ">= 580.65.06 (CUDA 13.0.1)"),
    ("12.9.1", "575.57.08", True, ">= 575.51.03 (CUDA 12.9.1)"),
    ("12.9.1", "570.172.08", False, ">= 575.51.03 (CUDA 12.9.1)"),
])
def test_nvidia_driver_against_the_images_cuda(tmp_path: Path, cuda, driver, ok, expected):
    root = make_node(tmp_path, driver=driver)
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root, env={"CUDA_VERSION": cuda}))
    c = {c["name"]: c for c in report["checks"]}["nvidia_driver"]
    assert (c["ok"], c["expected"], c["found"]) == (ok, expected, driver)
    if not ok:
        assert c["fix"].startswith(f"use a GPU AMI whose NVIDIA driver is {expected.split()[1]} or newer")


def test_the_full_driver_version_is_checked_against_the_images_floor(tmp_path: Path):
    """Same branch, older release: an R580 driver below the image's floor fails (a branch-only
    check passed it). The floor comes from the image (RLTRAINER_MIN_NVIDIA_DRIVER), else --min-driver."""
    root = make_node(tmp_path, driver="580.76.05")
    env = {**POD_ENV, "CUDA_VERSION": "13.0.2", "RLTRAINER_MIN_NVIDIA_DRIVER": "580.82.07"}
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root, env=env))
    assert rc == 1
    assert verdict == "nodecheck: FAIL 1 of 9: nvidia_driver (expected >= 580.82.07 (CUDA 13.0.2), found 580.76.05)"
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32", "--min-driver", "580.76.05"],
                          probe(root, env=env))
    assert rc == 0


def test_unknown_cuda_or_missing_driver_fail_with_the_reason(tmp_path: Path):
    root = make_node(tmp_path, driver=None)
    _, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root, env={}))
    c = {c["name"]: c for c in report["checks"]}["nvidia_driver"]
    assert not c["ok"] and c["found"] == "CUDA not found, driver not found"
    _, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32", "--cuda-version", "13.0"], probe(root))
    c = {c["name"]: c for c in report["checks"]}["nvidia_driver"]
    assert not c["ok"] and c["found"] == "not found"


def test_cuda_version_from_the_toolkit_json(tmp_path: Path):
    root = make_node(tmp_path)
    (tmp_path / "usr" / "local" / "cuda").mkdir(parents=True)
    (tmp_path / "usr" / "local" / "cuda" / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.9.1"}}')
    assert probe(root, env={}).image_cuda_version() == "12.9.1"


def test_efa_gda_needs_efa_driver_3_3_and_peer_mapping_override(tmp_path: Path):
    argv = ["--expect-gpus", "8", "--expect-efa", "16", "--ep-backend", "deepep-gin", "--gin-type", "5"]
    rc, report, verdict = check(argv, probe(make_node(tmp_path / "good", efa=16, caps="perfmon")))
    assert rc == 0, verdict
    assert {"efa_driver", "peer_mapping_override"} <= {c["name"] for c in report["checks"]}
    rc, report, verdict = check(argv, probe(make_node(tmp_path / "bad", efa=16, efa_driver="3.2.1",
                                                       registry_dwords="RMForceStaticBar1=1;", caps="perfmon")))
    assert rc == 1
    assert verdict == ("nodecheck: FAIL 2 of 13: efa_driver (expected >= 3.3.0 (EFA-GDA, NCCL_GIN_TYPE=5), found 3.2.1); "
                       "peer_mapping_override (expected PeerMappingOverride=1 in the NVIDIA driver's RegistryDwords, "
                       "found RMForceStaticBar1=1;)")
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert "NVreg_RegistryDwords=\"PeerMappingOverride=1;\"" in failed["peer_mapping_override"]["fix"]
    # the proxy GIN path (type 2) does not need either
    rc, report, _ = check(argv[:-1] + ["2"], probe(make_node(tmp_path / "proxy", efa=16, efa_driver="3.2.1",
                                                               registry_dwords="", caps="perfmon")))
    assert rc == 0 and "efa_driver" not in {c["name"] for c in report["checks"]}


def test_fi_info_fallback_without_sysfs(tmp_path: Path):
    root = tmp_path
    (root / "dev").mkdir()
    listing = "".join(f"provider: efa\n    fabric: efa\n    domain: rdmap{i}s0-rdm\n    version: 122.0\n" for i in range(4))
    calls = []

    def run(argv):
        calls.append(argv)
        return {"fi_info": listing, "nvidia-smi": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\nGPU 1: NVIDIA H100\n"}[argv[0]]

    p = probe(root, run=run)
    assert p.efa_devices() == (4, "fi_info")
    assert p.gpu_count() == 2
    assert ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"] in calls


def test_plugin_found_through_ld_library_path_or_nccl_net_plugin(tmp_path: Path):
    lib = tmp_path / "usr" / "local" / "custom"
    lib.mkdir(parents=True)
    (lib / "libnccl-net.so").touch()
    # unset: NCCL opens libnccl-net.so
    assert probe(tmp_path, env={"LD_LIBRARY_PATH": "/usr/local/custom"}).nccl_plugin() == "/usr/local/custom/libnccl-net.so"
    assert probe(tmp_path, env={"NCCL_NET_PLUGIN": "/usr/local/custom/libnccl-net.so"}).nccl_plugin() == \
        "/usr/local/custom/libnccl-net.so"
    assert probe(tmp_path, env={"NCCL_NET_PLUGIN": "/nope/libnccl-net.so"}).nccl_plugin() is None


OFI_DIR = "/opt/amazon/ofi-nccl/lib"


@pytest.mark.parametrize("env", [
    {"NCCL_NET_PLUGIN": "aws_ofi", "LD_LIBRARY_PATH": OFI_DIR},  # NCCL opens aws_ofi, libnccl-net-aws_ofi.so
    {"NCCL_NET_PLUGIN": "none", "LD_LIBRARY_PATH": OFI_DIR},  # internal transports only
    {"NCCL_NET_PLUGIN": "NONE", "LD_LIBRARY_PATH": OFI_DIR},
    {"NCCL_NET_PLUGIN": "", "LD_LIBRARY_PATH": OFI_DIR},  # an empty list names nothing
    {"LD_LIBRARY_PATH": OFI_DIR},  # unset: libnccl-net.so, which this tree lacks
    {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": ""},  # the plugin's directory is not searched
    {"NCCL_NET_PLUGIN": "ofi"},
    {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/opt/amazon/efa/lib"},
    {"NCCL_NET_PLUGIN": "libnccl-net-ofi", "LD_LIBRARY_PATH": OFI_DIR},  # lib* without .so: no second name
    {"NCCL_NET_PLUGIN": "lib.so", "LD_LIBRARY_PATH": OFI_DIR},
])
def test_plugin_is_what_nccl_would_open_not_any_file_on_disk(tmp_path: Path, env):
    # only libnccl-net-ofi.so, in the EFA installer's directory (nccl@86fa684 src/plugin/net.cc
    # initPluginLibsOnceFunc, src/plugin/plugin_open.cc openPluginLib)
    root = make_node(tmp_path)
    assert probe(root, env=env).nccl_plugin() is None
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root, env={"CUDA_VERSION": "13.0.1", **env}))
    assert rc == 1 and [c["name"] for c in report["checks"] if not c["ok"]] == ["nccl_ofi_plugin"]


@pytest.mark.parametrize("env", [
    {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": OFI_DIR},
    {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/opt/amazon/efa/lib;" + OFI_DIR},  # ';' separates too
    {"NCCL_NET_PLUGIN": "aws_ofi,ofi", "LD_LIBRARY_PATH": OFI_DIR},  # a list: the first that opens
    {"NCCL_NET_PLUGIN": "libnccl-net-ofi.so", "LD_LIBRARY_PATH": OFI_DIR},
    {"NCCL_NET_PLUGIN": OFI_DIR + "/libnccl-net-ofi.so"},
])
def test_plugin_found_where_nccl_opens_it(tmp_path: Path, env):
    root = make_node(tmp_path)
    assert probe(root, env=env).nccl_plugin() == OFI_DIR + "/libnccl-net-ofi.so"


def test_plugin_name_is_case_sensitive_on_disk(tmp_path: Path):
    # "OFI" opens libnccl-net-OFI.so: Linux file names are case-sensitive
    assert probe(make_node(tmp_path), env={"NCCL_NET_PLUGIN": "OFI", "LD_LIBRARY_PATH": OFI_DIR}).nccl_plugin() is None


def test_plugin_setting_from_nccl_conf_and_relative_dirs(tmp_path: Path):
    root = make_node(tmp_path)
    (root / "etc").mkdir()
    (root / "etc" / "nccl.conf").write_text("# the image's defaults\nNCCL_NET_PLUGIN=ofi\nNCCL_NET_PLUGIN=none\n")
    # /etc/nccl.conf fills in what the environment leaves unset (the first line wins) ...
    res = probe(root, env={"LD_LIBRARY_PATH": OFI_DIR}).nccl_plugin_resolution()
    assert res.setting == "NCCL_NET_PLUGIN=ofi (/etc/nccl.conf)" and res.path == OFI_DIR + "/libnccl-net-ofi.so"
    # ... and never overrides it; $NCCL_CONF_FILE is read before /etc/nccl.conf
    assert probe(root, env={"NCCL_NET_PLUGIN": "none", "LD_LIBRARY_PATH": OFI_DIR}).nccl_plugin() is None
    (root / "etc" / "mine.conf").write_text("NCCL_NET_PLUGIN=none\n")
    assert probe(root, env={"NCCL_CONF_FILE": "/etc/mine.conf", "LD_LIBRARY_PATH": OFI_DIR}).nccl_plugin() is None
    # an empty LD_LIBRARY_PATH item is the working directory
    from rltrainer.nccl_net_plugin import resolve
    assert resolve(root, {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/nope:"}, cwd=OFI_DIR).path == \
        OFI_DIR + "/libnccl-net-ofi.so"
    assert resolve(root, {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/nope"}, cwd=OFI_DIR).path is None


def ld_cache(entries: dict[str, str]) -> bytes:
    """An /etc/ld.so.cache in glibc's format (sysdeps/generic/dl-cache.h, what ldconfig writes)."""
    from rltrainer.nccl_net_plugin import CACHE_ENTRY, CACHE_HEADER, CACHE_MAGIC
    strings, offsets = b"", []
    base = CACHE_HEADER.size + CACHE_ENTRY.size * len(entries)
    for key, value in entries.items():
        offsets.append((base + len(strings), base + len(strings) + len(key) + 1))
        strings += key.encode() + b"\0" + value.encode() + b"\0"
    head = CACHE_HEADER.pack(CACHE_MAGIC, len(entries), len(strings), 2, 0)
    return head + b"".join(CACHE_ENTRY.pack(0x303, k, v, 0, 0) for k, v in offsets) + strings


def test_plugin_found_through_the_ld_so_cache_and_system_dirs(tmp_path: Path):
    root = make_node(tmp_path)
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.cache").write_bytes(ld_cache({"libnccl-net-ofi.so": OFI_DIR + "/libnccl-net-ofi.so"}))
    assert probe(root, env={"NCCL_NET_PLUGIN": "ofi"}).nccl_plugin() == OFI_DIR + "/libnccl-net-ofi.so"
    assert probe(root, env={}).nccl_plugin() is None  # the cache has no libnccl-net.so
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "libnccl-net.so").touch()
    assert probe(root, env={}).nccl_plugin() == "/usr/lib/libnccl-net.so"


def test_ld_cache_reader_matches_ldconfig_on_this_machine():
    import shutil
    import subprocess

    from rltrainer.nccl_net_plugin import read_ld_cache
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not Path("/etc/ld.so.cache").is_file() or not Path(ldconfig).exists():
        pytest.skip("no ld.so cache or ldconfig here")
    listed: dict[str, str] = {}
    for line in subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True).stdout.splitlines()[1:]:
        key, sep, value = line.strip().partition(" => ")
        if sep:
            listed.setdefault(key.split(" (")[0], value)
    assert read_ld_cache(Path("/etc/ld.so.cache").read_bytes()) == listed


def test_skip_and_thresholds(tmp_path: Path):
    root = make_node(tmp_path, gdrdrv=False, hugepages=1024, hugetlb_limit=None, caps="perfmon")
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32", "--ep-backend", "deepep-gin", "--skip",
                                 "gdrcopy", "--hugepages-mib", "2048", "--min-shm-gib", "128"], probe(root))
    assert rc == 1
    assert "gdrcopy" not in [c["name"] for c in report["checks"]]
    assert verdict == ("nodecheck: FAIL 1 of 10: shm (expected >= 128 GiB, found 64.0 GiB)")


def test_module_entry_point_runs_against_a_root(tmp_path: Path):
    import subprocess
    import sys

    import os

    root = make_node(tmp_path)
    # the pod's environment; its LD_LIBRARY_PATH names directories under --root
    env = {**os.environ, "NCCL_NET_PLUGIN": POD_ENV["NCCL_NET_PLUGIN"], "LD_LIBRARY_PATH": POD_ENV["LD_LIBRARY_PATH"]}
    proc = subprocess.run([sys.executable, "-m", "rltrainer.nodecheck", "--expect-gpus", "8", "--expect-efa", "32",
                           "--root", str(root), "--skip", "memlock", "--skip", "shm", "--cuda-version", "13.0"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    assert proc.stderr.strip().splitlines()[-1] == "nodecheck: PASS (7 checks)"


def test_expectations_are_required():
    with pytest.raises(SystemExit):
        main(["--expect-gpus", "8"], out=io.StringIO(), err=io.StringIO())


# --- one failure reason each: EFA ports, GPUDirect RDMA, DeepEP's profiler, the shared file system

BASE = ["--expect-gpus", "8", "--expect-efa", "32"]


def test_an_efa_port_that_is_down_is_named(tmp_path: Path):
    rc, report, verdict = check(BASE, probe(make_node(tmp_path, ports_down=(3, 17))))
    assert rc == 1
    assert verdict == ("nodecheck: FAIL 1 of 9: efa_port_state (expected port 1 ACTIVE on all 32 EFA devices, "
                       "found rdmap17s0 1: DOWN; rdmap3s0 1: DOWN)")
    c = {c["name"]: c for c in report["checks"]}["efa_port_state"]
    assert c["fix"].startswith("EFA device(s) rdmap17s0, rdmap3s0 are not ACTIVE")


@pytest.mark.parametrize("open_module, kernel, peermem, ok, found", [
    (True, "6.12.46-66.121.amzn2023.x86_64", False, True, "dma-buf"),
    (False, "6.12.46-66.121.amzn2023.x86_64", True, True, "nvidia_peermem"),
    (True, "6.12.46-66.121.amzn2023.x86_64", True, True, "dma-buf and nvidia_peermem"),
    (False, "6.12.46-66.121.amzn2023.x86_64", False, False,
     "neither (NVIDIA module proprietary, kernel 6.12.46-66.121.amzn2023.x86_64, nvidia_peermem not loaded)"),
    (True, "5.10.240-238.959.amzn2.x86_64", False, False,
     "neither (NVIDIA module open, kernel 5.10.240-238.959.amzn2.x86_64, nvidia_peermem not loaded)"),
])
def test_gpudirect_rdma_needs_dma_buf_or_peer_memory(tmp_path: Path, open_module, kernel, peermem, ok, found):
    root = make_node(tmp_path, open_module=open_module, kernel=kernel, peermem=peermem)
    rc, report, _ = check(BASE, probe(root))
    c = {c["name"]: c for c in report["checks"]}["gpudirect_rdma"]
    assert (rc == 0, c["ok"], c["found"]) == (ok, ok, found)
    if not ok:
        assert "modprobe nvidia_peermem" in c["fix"]


@pytest.mark.parametrize("restricted, caps, ok, found", [
    (True, "ipc-lock", False, "RmProfilingAdminOnly 1, capabilities neither PERFMON nor SYS_ADMIN"),
    (True, "perfmon", True, "RmProfilingAdminOnly 1, capabilities PERFMON"),
    (False, "ipc-lock", True, "RmProfilingAdminOnly 0, capabilities neither PERFMON nor SYS_ADMIN"),
])
def test_deepep_timing_needs_profiling_allowed(tmp_path: Path, restricted, caps, ok, found):
    root = make_node(tmp_path, profiling_restricted=restricted, caps=caps)
    rc, report, verdict = check(BASE + ["--ep-backend", "deepep-nvshmem"], probe(root))
    c = {c["name"]: c for c in report["checks"]}["profiling"]
    assert (rc == 0, c["ok"], c["found"]) == (ok, ok, found)
    if not ok:
        assert verdict == ("nodecheck: FAIL 1 of 11: profiling (expected DeepEP kernel timing allowed: "
                           f"RmProfilingAdminOnly 0, or CAP_PERFMON, found {found})")
        assert "adds the PERFMON capability" in c["fix"]
    # the NCCL backend times nothing with the profiler
    _, report, _ = check(BASE, probe(root))
    assert "profiling" not in {c["name"] for c in report["checks"]}


def test_a_broken_shared_file_system_fails_the_node_check(tmp_path: Path, monkeypatch):
    argv = BASE + ["--shared-fs", "/fsx", "--shared-fs-type", "lustre"]
    rc, report, verdict = check(argv, probe(make_node(tmp_path / "ok")))
    assert rc == 0, verdict
    c = {c["name"]: c for c in report["checks"]}["shared_fs"]
    assert c["found"] == "lustre at /fsx, write and read back ok"
    assert not list((tmp_path / "ok" / "fsx").iterdir())  # the probe file is gone

    rc, _, verdict = check(argv, probe(make_node(tmp_path / "unmounted", mounts="mounts-no-fsx.txt")))
    assert rc == 1
    assert verdict == ("nodecheck: FAIL 1 of 10: shared_fs (expected /fsx mounted (lustre) and writable, "
                       "found not a mount (the pod's root file system))")

    root = make_node(tmp_path / "wrongtype")
    (root / "proc" / "mounts").write_text(fixture("mounts-no-fsx.txt") + "tmpfs /fsx tmpfs rw 0 0\n")
    _, _, verdict = check(argv, probe(root))
    assert verdict.endswith("found mounted as tmpfs at /fsx, not lustre)")

    root = make_node(tmp_path / "readonly")

    def refuse(self, path):
        return "OSError: Read-only file system"

    monkeypatch.setattr(NodeProbe, "write_probe", refuse)
    _, report, verdict = check(argv, probe(root))
    assert verdict.endswith("found lustre at /fsx, write failed: OSError: Read-only file system)")
    assert "FSx CSI node plugin" in {c["name"]: c for c in report["checks"]}["shared_fs"]["fix"]


def test_a_real_write_failure_is_reported(tmp_path: Path):
    root = make_node(tmp_path)
    p = probe(root)
    assert p.write_probe("/fsx") is None
    assert p.write_probe("/fsx/missing-dir").startswith("FileNotFoundError")


def test_pods_checking_the_shared_file_system_at_once_do_not_share_a_probe_file(tmp_path: Path,
                                                                              monkeypatch):
    """Before: the probe file was named by PID, and `rltrainer nodecheck` is PID 1 in every pod of
    the fabric job, so one pod's unlink between another's write and read-back failed that node's
    shared_fs check (a false gate failure)."""
    import os

    root = make_node(tmp_path)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    first, second = probe(root), probe(root)
    read_bytes, other_pod = Path.read_bytes, {}

    def read_after_the_other_pod(self):
        if not other_pod:  # the other pod writes, reads back and unlinks in between
            other_pod["ran"] = True
            other_pod["error"] = second.write_probe("/fsx")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_after_the_other_pod)
    assert first.write_probe("/fsx") is None and other_pod == {"ran": True, "error": None}


def test_the_images_versions_are_shown(tmp_path: Path):
    root = make_node(tmp_path)
    record = root / "opt" / "rltrainer" / "image-versions.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"nccl": "2.27.7", "efa_installer": "1.50.0", "aws_ofi_nccl": "1.21.1",
                                  "nvshmem": "none", "ep_backend": "nccl"}))
    out, err = io.StringIO(), io.StringIO()
    assert main(BASE, out=out, err=err, probe=probe(root)) == 0
    assert json.loads(out.getvalue())["image"] == {"ep_backend": "nccl", "efa_installer": "1.50.0",
                                                  "aws_ofi_nccl": "1.21.1", "nccl": "2.27.7", "nvshmem": "none"}
    assert err.getvalue().splitlines()[0] == (
        "nodecheck: image ep_backend=nccl efa_installer=1.50.0 aws_ofi_nccl=1.21.1 nccl=2.27.7 nvshmem=none")
    record.unlink()
    out, err = io.StringIO(), io.StringIO()
    main(BASE, out=out, err=err, probe=probe(root))
    assert json.loads(out.getvalue())["image"] is None
    assert "versions unknown" in err.getvalue().splitlines()[0]

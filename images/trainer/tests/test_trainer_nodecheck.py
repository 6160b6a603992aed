"""``rltrainer nodecheck`` against a fake sysfs/dev tree."""

from __future__ import annotations

import io
import json
import os
import resource
from pathlib import Path

import pytest

from rltrainer.nodecheck import CHECK_NAMES, NodeProbe, main

GIB = 1 << 30


NVIDIA_BANNER = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
                 "(dvs-builder@U16-I1-N08-12-5)  Tue Sep 23 04:02:19 UTC 2025\nGCC version:  gcc version 11.5.0\n")


def make_node(root: Path, *, gpus=8, efa=32, efa_mounted=None, mlx=0, gdrdrv=True, hugepages=2560,
              hugetlb_limit=5120 << 20, plugin=True, driver="580.95.05", efa_driver="3.3.0",
              registry_dwords="PeerMappingOverride=1;") -> Path:
    """A GPU node as a pod sees it: /dev, /sys and the image's library directories."""
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
    hp = root / "sys" / "kernel" / "mm" / "hugepages" / "hugepages-2048kB"
    hp.mkdir(parents=True)
    (hp / "nr_hugepages").write_text(f"{hugepages}\n")
    cg = root / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "hugetlb.2MB.max").write_text("max\n" if hugetlb_limit is None else f"{hugetlb_limit}\n")
    proc = root / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    if driver:
        (proc / "version").write_text(NVIDIA_BANNER.format(v=driver))
    (proc / "params").write_text(f'ResmanDebugLevel: 4294967295\nRegistryDwords: "{registry_dwords}"\n')
    if efa_driver:
        (root / "sys" / "module" / "efa").mkdir(parents=True)
        (root / "sys" / "module" / "efa" / "version").write_text(f"{efa_driver}\n")
    if plugin:
        lib = root / "opt" / "amazon" / "ofi-nccl" / "lib"
        lib.mkdir(parents=True)
        (lib / "libnccl-net-ofi.so").touch()
    return root


def probe(root: Path, memlock=resource.RLIM_INFINITY, shm=64 * GIB, run=None, env=None) -> NodeProbe:
    env = {"CUDA_VERSION": "13.0.1"} if env is None else env
    return NodeProbe(root=root, env=env, run=run or (lambda argv: None), memlock_limit=lambda: memlock,
                     statvfs_bytes=lambda path: shm)


def check(argv, node_probe):
    out, err = io.StringIO(), io.StringIO()
    rc = main(argv, out=out, err=err, probe=node_probe)
    return rc, json.loads(out.getvalue()), err.getvalue().strip()


def test_healthy_p5_node_passes(tmp_path: Path):
    root = make_node(tmp_path, mlx=2)
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 0
    assert report["kind"] == "nodecheck" and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == [n for n in CHECK_NAMES if n not in (
        "gdrcopy", "efa_driver", "peer_mapping_override", "imex_channel", "gpu_fabric")]  # the NCCL backend needs none of these
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["gpus"] == {"name": "gpus", "ok": True, "expected": 8, "found": 8, "fix": ""}
    assert by_name["efa_devices"]["found"] == 32  # the two mlx5 devices do not count
    assert by_name["hugepages_2Mi"]["found"] == "5120 MiB"
    assert by_name["nccl_ofi_plugin"]["found"] == "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    assert all(set(c) == {"name", "ok", "expected", "found", "fix"} for c in report["checks"])
    assert by_name["nvidia_driver"]["expected"] == ">= R580 (CUDA 13.0.1)"
    assert by_name["nvidia_driver"]["found"] == "580.95.05"
    assert verdict == "nodecheck: PASS (7 checks)"


def test_misconfigured_pod_fails_with_fixes(tmp_path: Path):
    # 16 of 32 EFA devices allocated, no gdrdrv, no huge pages in the pod's cgroup,
    # locked memory capped, docker's 64 MiB /dev/shm, no OFI plugin
    root = make_node(tmp_path, efa_mounted=16, gdrdrv=False, hugetlb_limit=0, plugin=False)
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
        "nodecheck: FAIL 6 of 8: efa_devices (expected 32, found 16); "
        "gdrcopy (expected /dev/gdrdrv present (deepep-nvshmem uses GDRCopy), found missing); "
        "hugepages_2Mi (expected >= 5120 MiB, found 0 MiB); memlock (expected unlimited, found 65536 bytes); "
        "shm (expected >= 8 GiB, found 0.1 GiB); nccl_ofi_plugin (expected libnccl-net*.so findable, found not found)"
    )


def test_missing_gpus_fail(tmp_path: Path):
    root = make_node(tmp_path, gpus=4)
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 1
    assert verdict == "nodecheck: FAIL 1 of 7: gpus (expected 8, found 4)"


def test_nccl_backend_does_not_need_gdrdrv_but_deepep_does(tmp_path: Path):
    root = make_node(tmp_path, gdrdrv=False)
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root))
    assert rc == 0 and "gdrcopy" not in [c["name"] for c in report["checks"]]
    for backend in ("deepep-nvshmem", "deepep-gin"):
        rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32", "--ep-backend", backend], probe(root))
        assert rc == 1
        assert verdict == (f"nodecheck: FAIL 1 of 8: gdrcopy (expected /dev/gdrdrv present ({backend} uses GDRCopy), "
                           "found missing)")


@pytest.mark.parametrize("cuda, driver, ok, expected", [
    ("13.0.1", "580.95.05", True, ">= R580 (CUDA 13.0.1)"),
    ("13.0.1", "575.57.08", False, ">= R580 (CUDA 13.0.1)"),
    ("12.9.1", "575.57.08", True, ">= R575 (CUDA 12.9.1)"),
    ("12.9.1", "570.172.08", False, ">= R575 (CUDA 12.9.1)"),
])
def test_nvidia_driver_against_the_images_cuda(tmp_path: Path, cuda, driver, ok, expected):
    root = make_node(tmp_path, driver=driver)
    rc, report, _ = check(["--expect-gpus", "8", "--expect-efa", "32"], probe(root, env={"CUDA_VERSION": cuda}))
    c = {c["name"]: c for c in report["checks"]}["nvidia_driver"]
    assert (c["ok"], c["expected"], c["found"]) == (ok, expected, driver)
    if not ok:
        assert c["fix"].startswith(f"use a GPU AMI whose NVIDIA driver is {expected.split()[1]} or newer")


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
    rc, report, verdict = check(argv, probe(make_node(tmp_path / "good", efa=16)))
    assert rc == 0, verdict
    assert {"efa_driver", "peer_mapping_override"} <= {c["name"] for c in report["checks"]}
    rc, report, verdict = check(argv, probe(make_node(tmp_path / "bad", efa=16, efa_driver="3.2.1",
                                                       registry_dwords="RMForceStaticBar1=1;")))
    assert rc == 1
    assert verdict == ("nodecheck: FAIL 2 of 10: efa_driver (expected >= 3.3.0 (EFA-GDA, NCCL_GIN_TYPE=5), found 3.2.1); "
                       "peer_mapping_override (expected PeerMappingOverride=1 in the NVIDIA driver's RegistryDwords, "
                       "found RMForceStaticBar1=1;)")
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert "NVreg_RegistryDwords=\"PeerMappingOverride=1;\"" in failed["peer_mapping_override"]["fix"]
    # the proxy GIN path (type 2) does not need either
    rc, report, _ = check(argv[:-1] + ["2"], probe(make_node(tmp_path / "proxy", efa=16, efa_driver="3.2.1",
                                                               registry_dwords="")))
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
    assert probe(tmp_path, env={"LD_LIBRARY_PATH": "/usr/local/custom"}).nccl_plugin() == "/usr/local/custom/libnccl-net.so"
    assert probe(tmp_path, env={"NCCL_NET_PLUGIN": "/usr/local/custom/libnccl-net.so"}).nccl_plugin() == \
        "/usr/local/custom/libnccl-net.so"
    assert probe(tmp_path, env={"NCCL_NET_PLUGIN": "/nope/libnccl-net.so"}).nccl_plugin() is None


def test_skip_and_thresholds(tmp_path: Path):
    root = make_node(tmp_path, gdrdrv=False, hugepages=1024, hugetlb_limit=None)
    rc, report, verdict = check(["--expect-gpus", "8", "--expect-efa", "32", "--ep-backend", "deepep-gin", "--skip",
                                 "gdrcopy", "--hugepages-mib", "2048", "--min-shm-gib", "128"], probe(root))
    assert rc == 1
    assert "gdrcopy" not in [c["name"] for c in report["checks"]]
    assert verdict == ("nodecheck: FAIL 1 of 7: shm (expected >= 128 GiB, found 64.0 GiB)")


def test_module_entry_point_runs_against_a_root(tmp_path: Path):
    import subprocess
    import sys

    root = make_node(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "rltrainer.nodecheck", "--expect-gpus", "8", "--expect-efa", "32",
                           "--root", str(root), "--skip", "memlock", "--skip", "shm", "--cuda-version", "13.0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    assert proc.stderr.strip() == "nodecheck: PASS (5 checks)"


def test_expectations_are_required():
    with pytest.raises(SystemExit):
        main(["--expect-gpus", "8"], out=io.StringIO(), err=io.StringIO())

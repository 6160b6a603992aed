"""The Python the image build runs outside our package: docker/stage_artifacts.py (what the build
stages hand to the runtime stages) and rltrainer.image_versions (the version record nodecheck
prints). Run directly: there is no Docker engine here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rltrainer import image_versions

IMAGE_DIR = Path(__file__).resolve().parent.parent


def _stage_module():
    spec = importlib.util.spec_from_file_location("stage_artifacts", IMAGE_DIR / "docker" / "stage_artifacts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_site(root: Path) -> Path:
    """A site-packages with one installed distribution (deep_ep), RECORD included."""
    site = root / "usr" / "lib" / "python3" / "dist-packages"
    (site / "deep_ep").mkdir(parents=True)
    (site / "deep_ep" / "__init__.py").write_text("from .buffer import Buffer\n")
    (site / "deep_ep" / "buffer.py").write_text("class Buffer: pass\n")
    (site / "deep_ep_cpp.so").write_bytes(b"\x7fELF")
    info = site / "deep_ep-1.2.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1\n")
    (info / "RECORD").write_text("deep_ep/__init__.py,,\ndeep_ep/buffer.py,,\ndeep_ep_cpp.so,,\n"
                                 "deep_ep-1.2.1.dist-info/METADATA,,\ndeep_ep-1.2.1.dist-info/RECORD,,\n")
    return site


def test_a_build_stage_hands_over_its_prefixes_and_python_packages(tmp_path):
    stage = _stage_module()
    site = fake_site(tmp_path / "root")
    prefix = tmp_path / "root" / "opt" / "amazon" / "nvshmem"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libnvshmem_host.so.3").write_bytes(b"x")
    (prefix / "lib" / "libnvshmem_host.so").symlink_to("libnvshmem_host.so.3")
    dest = tmp_path / "stage"
    counts = stage.stage(dest, [str(prefix)], [str(tmp_path / "root" / "opt" / "amazon" / "deepep")], ["deep_ep"],
                         search_path=[str(site)])
    assert counts[str(prefix)] == 2 and counts["dist:deep_ep"] == 5
    assert counts[str(tmp_path / "root" / "opt" / "amazon" / "deepep")] == 0  # optional and absent
    staged = dest / str(site).lstrip("/")
    assert (staged / "deep_ep" / "buffer.py").read_text() == "class Buffer: pass\n"
    assert (staged / "deep_ep-1.2.1.dist-info" / "RECORD").is_file()
    link = dest / str(prefix).lstrip("/") / "lib" / "libnvshmem_host.so"
    assert link.is_symlink() and str(link.readlink()) == "libnvshmem_host.so.3"  # links stay links


def test_a_missing_build_output_fails_the_stage_with_the_reason(tmp_path, capsys):
    stage = _stage_module()
    assert stage.main(["--dest", str(tmp_path / "s"), "--path", "/opt/nowhere-built"]) == 1
    assert capsys.readouterr().err == (
        "ERROR: /opt/nowhere-built does not exist: the build step that makes it did not run or failed\n")
    with pytest.raises(stage.StageError, match="'deep_ep_missing' is not installed"):
        stage.stage(tmp_path / "s", [], [], ["deep_ep_missing"], search_path=[str(tmp_path)])


def test_the_version_record_holds_the_pins_and_what_the_build_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(image_versions, "measure", lambda: {
        "nccl": "2.27.7", "cuda": "13.0", "ep_backend": "nccl", "min_nvidia_driver": "580.65.06", "rltrainer": "0.1.0"})
    path = tmp_path / "image-versions.json"
    assert image_versions.main(["--write", str(path), "--measure", "--set", "efa_installer=1.50.0",
                                "--set", "aws_ofi_nccl=1.21.1", "--set", "nvshmem=none", "--set", "empty="]) == 0
    versions = image_versions.load(path)
    assert list(versions) == ["ep_backend", "efa_installer", "aws_ofi_nccl", "nccl", "nvshmem", "cuda",
                              "min_nvidia_driver", "rltrainer"]
    assert versions["nccl"] == "2.27.7" and versions["efa_installer"] == "1.50.0"
    assert image_versions.load(tmp_path / "absent.json") is None


def test_measure_reads_torch_and_the_image_env():
    found = image_versions.measure(lambda: {"nccl": "2.31.2", "cuda": "13.0"},
                                   env={"RLTRAINER_IMAGE_EP_BACKEND": "deepep-gin",
                                        "RLTRAINER_MIN_NVIDIA_DRIVER": "580.65.06"})
    assert found["nccl"] == "2.31.2" and found["ep_backend"] == "deepep-gin"

    def broken():
        raise OSError("libnccl.so.2: cannot open shared object file")

    assert image_versions.measure(broken, env={})["nccl"].startswith("unknown (OSError: libnccl.so.2")

"""``rltrainer launch --check-imports``: the image build imports the driver's whole chain.

The chain follows Miles v0.1.0 (../shared/upstream/miles-v0.1.0): ``train.py``'s imports, and the
Megatron actor module that ``miles/ray/train/actor_factory.py`` imports when it builds the
training actors. A fake Miles tree stands in for the image's here; the real one is imported by
the Dockerfile's build-time check.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from rltrainer.driver_imports import DRIVER_MODULES, cuda_stub_env, driver_modules, import_chain
from rltrainer.launch import main as launch_main
from trainer_helpers import FIXTURES, pinned_source

QWEN = FIXTURES / "qwen3-30b-a3b.yaml"


def fake_miles(root: Path, *, actor_imports: str = "import json") -> Path:
    """A Miles checkout shaped like v0.1.0's: train.py and train_async.py at the top, the
    Megatron actor module."""
    (root / "miles" / "backends" / "megatron_utils").mkdir(parents=True)
    for pkg in ("miles", "miles/backends", "miles/backends/megatron_utils"):
        (root / pkg / "__init__.py").write_text("")
    (root / "miles" / "backends" / "megatron_utils" / "actor.py").write_text(
        f"{actor_imports}\nclass MegatronTrainRayActor: pass\n")
    for driver in ("train.py", "train_async.py"):
        (root / driver).write_text("import asyncio\n\nif __name__ == '__main__':\n    raise SystemExit('ran')\n")
    return root


def check(tmp_path: Path, miles: Path) -> tuple[int, str]:
    err = io.StringIO()
    code = launch_main(["--config", str(QWEN), "--dry-run", "--check-imports", "--miles-dir", str(miles),
                        "--python", sys.executable], out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_a_whole_chain_imports(tmp_path):
    code, err = check(tmp_path, fake_miles(tmp_path / "miles"))
    assert code == 0, err
    assert "the driver's whole import chain imports" in err


def test_a_module_missing_deep_in_the_chain_fails_the_check(tmp_path):
    """The argument parser never imports the Megatron actor; the chain does, and names it."""
    miles = fake_miles(tmp_path / "miles", actor_imports="import transformer_engine_not_installed")
    code, err = check(tmp_path, miles)
    assert code == 2
    assert ("the driver's import chain is broken: miles.backends.megatron_utils.actor: ModuleNotFoundError: "
            "No module named 'transformer_engine_not_installed'") in err
    assert "Fix: install the missing package in the image (Dockerfile)" in err


def test_every_module_is_reported_even_after_a_crash(tmp_path):
    miles = fake_miles(tmp_path / "miles", actor_imports="import os\nos._exit(3)")
    results = import_chain(("json", "miles.backends.megatron_utils.actor", "train"), str(miles),
                           python=sys.executable)
    assert [r.error for r in results][0] is None
    assert results[1].error.startswith("not reached: the interpreter stopped")
    assert results[2].error.startswith("not reached")


def test_deepep_images_also_import_deep_ep():
    assert driver_modules("nccl") == DRIVER_MODULES
    assert driver_modules("deepep-nvshmem")[-1] == "deep_ep"


def test_cuda_stub_stands_in_for_a_missing_driver(tmp_path, monkeypatch):
    import ctypes

    def no_driver(name, *a, **kw):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    stub = tmp_path / "cuda" / "lib64" / "stubs" / "libcuda.so"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"")
    env, note = cuda_stub_env({"LD_LIBRARY_PATH": "/opt/x"}, stub_globs=(str(stub),))
    first, rest = env["LD_LIBRARY_PATH"].split(":", 1)
    assert rest == "/opt/x" and os.path.realpath(Path(first) / "libcuda.so.1") == str(stub)
    assert note == f"no NVIDIA driver here: imported with the CUDA link stub {stub} as libcuda.so.1"
    assert cuda_stub_env({}, stub_globs=(str(tmp_path / "none"),)) == ({}, None)


@pytest.mark.external
def test_the_chain_is_miles_v0_1_0s():
    """Each Miles module of the chain is where Miles v0.1.0 has it, and actor_factory.py imports
    the Megatron actor (the import the argument check never reaches)."""
    factory = pinned_source("miles-v0.1.0", "miles/ray/train/actor_factory.py", "Miles")
    assert "from miles.backends.megatron_utils.actor import MegatronTrainRayActor" in factory
    train = pinned_source("miles-v0.1.0", "train.py", "Miles")
    assert "from miles.ray.placement_group import" in train and 'if __name__ == "__main__":' in train
    driver = pinned_source("miles-v0.1.0", "train_async.py", "Miles")  # an overlapped rollout's
    assert "from miles.ray.placement_group import" in driver and 'if __name__ == "__main__":' in driver
    pinned_source("miles-v0.1.0", "miles/backends/megatron_utils/actor.py", "Miles")
    assert {"train", "train_async", "miles.backends.megatron_utils.actor"} <= set(DRIVER_MODULES)

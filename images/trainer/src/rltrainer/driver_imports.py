"""Import everything the job's driver process imports, so a missing module fails the image build.

The RayJob's entrypoint process (the Ray head) runs the launcher, its checkpoint uploader and
Miles' driver. Miles v0.1.0's ``train.py`` imports Miles' Ray and SGLang layers at the top, and its
actor factory (``miles/ray/train/actor_factory.py``) imports the Megatron actor module
``miles.backends.megatron_utils.actor`` when it creates the training actors; Megatron's flex
dispatcher imports ``deep_ep`` on the DeepEP backends. Parsing the arguments (``--check-args``)
touches only the parser's modules, so a module missing further down the chain would otherwise
first fail on the GPU cluster. ``rltrainer launch --check-imports`` imports the whole chain in a
fresh interpreter and names every module that fails.

A build has no NVIDIA driver (the container runtime injects ``libcuda.so.1`` only at run time),
and some of these modules load it when imported (Transformer Engine does). When ``libcuda.so.1``
cannot be loaded, the check puts the CUDA toolkit's link stub in its place for the child: that
stub loads but answers every call with an error, which is enough to import and proves nothing
about a GPU.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# What the driver's process imports, in the order it does (each name is a module path).
DRIVER_MODULES: tuple[str, ...] = (
    "rltrainer.launch",  # the launcher itself
    "rltrainer.checkpoints",  # the S3 uploader (boto3)
    "rltrainer.miles_resume",  # the train.py wrapper a resumed run goes through
    "train",  # Miles' train.py, from the Miles checkout (its top-level imports)
    "train_async",  # its train_async.py, the driver of an overlapped rollout (parallel.rollout.overlap)
    "miles.backends.megatron_utils.actor",  # actor_factory.py: MegatronTrainRayActor
)
DEEPEP_MODULES: tuple[str, ...] = ("deep_ep",)  # Megatron's flex dispatcher: from deep_ep import Buffer

# Where CUDA toolkits keep the driver API's link stub (NVIDIA CUDA images: devel variants).
CUDA_STUB_GLOBS = ("/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/targets/*/lib/stubs/libcuda.so",
                   "/usr/local/cuda-*/lib64/stubs/libcuda.so")

_CHILD = """
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        print(json.dumps({"module": name, "error": None}), flush=True)
    except BaseException as exc:  # report every module, whatever stops one
        last = traceback.extract_tb(exc.__traceback__)[-1:] or [None]
        where = f" ({last[0].filename}:{last[0].lineno})" if last[0] else ""
        print(json.dumps({"module": name, "error": f"{type(exc).__name__}: {exc}{where}"}), flush=True)
"""


@dataclass(frozen=True)
class ImportResult:
    module: str
    error: str | None  # None: imported


def driver_modules(backend: str) -> tuple[str, ...]:
    """The modules to import for an image of ``backend``."""
    return DRIVER_MODULES + (DEEPEP_MODULES if backend.startswith("deepep") else ())


def cuda_stub_env(env: dict[str, str], stub_globs=CUDA_STUB_GLOBS) -> tuple[dict[str, str], str | None]:
    """``env`` with the CUDA link stub on LD_LIBRARY_PATH as ``libcuda.so.1`` when no driver loads,
    and a note saying so (None: the real driver loads, or no stub was found)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return env, None
    except OSError:
        pass
    stubs = [p for pattern in stub_globs for p in sorted(glob.glob(pattern))]
    if not stubs:
        return env, None
    link_dir = tempfile.mkdtemp(prefix="rltrainer-cuda-stub-")
    os.symlink(stubs[0], os.path.join(link_dir, "libcuda.so.1"))
    path = env.get("LD_LIBRARY_PATH", "")
    env = {**env, "LD_LIBRARY_PATH": link_dir + (":" + path if path else "")}
    return env, f"no NVIDIA driver here: imported with the CUDA link stub {stubs[0]} as libcuda.so.1"


def import_chain(modules: tuple[str, ...], miles_dir: str, *, python: str = sys.executable,
                 env: dict[str, str] | None = None, timeout: float = 600) -> list[ImportResult]:
    """Import ``modules`` in a fresh ``python`` with ``miles_dir`` first on sys.path."""
    proc = subprocess.run([python, "-c", _CHILD, str(Path(miles_dir)), *modules], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ if env is None else env))
    seen = {}
    for line in proc.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a module printed something of its own
        if isinstance(row, dict) and row.get("module") in modules:
            seen[row["module"]] = row["error"]
    detail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return [ImportResult(m, seen[m] if m in seen else f"not reached: the interpreter stopped ({detail})")
            for m in modules]


def import_problems(results: list[ImportResult]) -> str | None:
    """One message naming every module that failed, or None."""
    failed = [r for r in results if r.error is not None]
    if not failed:
        return None
    return ("the driver's import chain is broken: " + "; ".join(f"{r.module}: {r.error}" for r in failed)
            + ". Fix: install the missing package in the image (Dockerfile), or pin the base image whose "
            "Miles/Megatron provides it")

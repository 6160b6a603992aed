"""The fabric stack's versions inside the image, recorded at build time and shown by nodecheck.

The Dockerfile pins the EFA installer, aws-ofi-nccl, NVSHMEM and NCCL (its global ARGs, each with
its source) and labels the image with them. Labels are not visible from inside a pod, so the build
also writes ``/opt/rltrainer/image-versions.json``: the pinned values plus what the build measured
(the NCCL torch loads, the CUDA torch was built for), and ``rltrainer nodecheck`` prints it next to
its checks, so a node check's output says which stack it checked.

    python3 -m rltrainer.image_versions --write /opt/rltrainer/image-versions.json \\
        --set efa_installer=1.50.0 --set aws_ofi_nccl=1.21.1 --measure
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

VERSIONS_FILE = "/opt/rltrainer/image-versions.json"
# Keys in the order nodecheck prints them.
KEYS = ("ep_backend", "efa_installer", "aws_ofi_nccl", "nccl", "nvshmem", "deepep", "cuda",
        "min_nvidia_driver", "rltrainer")


def _torch_versions() -> dict[str, str]:
    """NCCL and CUDA as the image's torch sees them (no GPU needed)."""
    import torch

    nccl = torch.cuda.nccl.version()
    text = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    return {"nccl": text, "cuda": torch.version.cuda or "none"}


def measure(torch_versions: Callable[[], dict[str, str]] = _torch_versions,
            env: dict[str, str] | None = None) -> dict[str, str]:
    """What the build can read for itself: torch's NCCL and CUDA, the image's env."""
    env = dict(os.environ if env is None else env)
    found = {}
    try:
        found.update(torch_versions())
    except Exception as exc:  # noqa: BLE001 - record why, do not fail the build on a reader
        found["nccl"] = f"unknown ({type(exc).__name__}: {exc})"
    for key, var in (("ep_backend", "RLTRAINER_IMAGE_EP_BACKEND"), ("min_nvidia_driver", "RLTRAINER_MIN_NVIDIA_DRIVER")):
        if env.get(var):
            found[key] = env[var]
    from . import __version__

    found["rltrainer"] = __version__
    return found


def load(path: str | Path = VERSIONS_FILE) -> dict[str, str] | None:
    """The recorded versions, or None outside the image (no file, or not JSON)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else None


def ordered(versions: dict[str, str]) -> dict[str, str]:
    return {**{k: versions[k] for k in KEYS if k in versions},
            **{k: v for k, v in sorted(versions.items()) if k not in KEYS}}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the image's version record (build time)."""
    p = argparse.ArgumentParser(prog="python3 -m rltrainer.image_versions", description=main.__doc__)
    p.add_argument("--write", default=VERSIONS_FILE, help=f"where to write (default {VERSIONS_FILE})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a pinned version (a Dockerfile ARG); empty values are left out")
    p.add_argument("--measure", action="store_true", help="also record torch's NCCL and CUDA and the image env")
    args = p.parse_args(argv)
    versions: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--set {item!r}: expected KEY=VALUE")
        if value:
            versions[key] = value
    if args.measure:
        versions.update({k: v for k, v in measure().items() if k not in versions or k in ("nccl", "cuda")})
    Path(args.write).parent.mkdir(parents=True, exist_ok=True)
    Path(args.write).write_text(json.dumps(ordered(versions), indent=1) + "\n")
    print(" ".join(f"{k}={v}" for k, v in ordered(versions).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

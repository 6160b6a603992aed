"""Shared plumbing for the fabric benchmarks: sizes, process group, timing, output.

Both benchmarks run one process per GPU under ``torchrun`` (or any launcher that sets
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT). Rank 0 prints one JSON
object per line on stdout and a readable table on stderr; other ranks print nothing
unless something fails.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, TextIO

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int) -> int:
    """Parse ``8``, ``64K``, ``1M``, ``2G``, ``1GiB`` or ``1GB`` to bytes.

    Suffixes are binary (K = 1024), as in nccl-tests' ``-b``/``-e`` options.
    """
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (use a number with an optional K, M, G or T suffix, e.g. 1M or 2G)")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def format_size(n: int) -> str:
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}


def torch_dtype(name: str):
    import torch

    try:
        return getattr(torch, _DTYPES[name.lower()])
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of float32, bfloat16, float16") from None


def import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:  # the image always has torch; a bare pip install may not
        raise SystemExit(
            f"rltrainer bench needs PyTorch ({exc}); it ships in the trainer image. "
            "Elsewhere install torch first (pip install torch)."
        ) from None
    return torch, dist


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device
    backend: str  # "nccl" or "gloo"
    group: Any = None  # a sub-group (an EP group of the run's layout); None = every rank

    def subgroup(self, ranks: list[int], group: Any) -> "DistContext":
        """This rank as a member of ``group`` (made from the global ``ranks``)."""
        return DistContext(rank=ranks.index(self.rank), world_size=len(ranks), local_rank=self.local_rank,
                           device=self.device, backend=self.backend, group=group)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.is_cuda:
            dist.barrier(group=self.group, device_ids=[self.device.index])
        else:
            dist.barrier(group=self.group)

    def reduce_scalar(self, value: float, op: str = "max") -> float:
        """Reduce one float across ranks (``max``, ``min`` or ``sum``)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op={"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}[op],
                        group=self.group)
        return float(t.item())

    def all_ok(self, ok: bool) -> bool:
        """True only if every rank says ok; every rank gets the same answer (no one hangs)."""
        return self.reduce_scalar(1.0 if ok else 0.0, "min") > 0.5


TRANSPORT_LOGGING = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET", "NVSHMEM_DEBUG": "INFO"}

_ENV_HELP = (
    "run it under torchrun, e.g. `torchrun --nproc-per-node 8 --nnodes 2 --rdzv-backend c10d "
    "--rdzv-endpoint $MASTER_ADDR:29500 -m rltrainer.bench allreduce`"
)


def init_distributed(device: str = "cuda", timeout_s: float = 600.0) -> DistContext:
    """Join the process group described by torchrun's environment variables."""
    from datetime import timedelta

    torch, dist = import_torch()
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise SystemExit(f"rltrainer bench: {', '.join(missing)} not set; {_ENV_HELP}")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        # The fabric gate proves the transport from the libraries' own INFO lines (aws-ofi-nccl
        # loaded, "Using network Libfabric", NCCL_GIN_TYPE, NVSHMEM's libfabric transport): turn
        # them on unless the caller chose otherwise. They change logging only, not the fabric.
        for name, value in TRANSPORT_LOGGING.items():
            os.environ.setdefault(name, value)
        if not torch.cuda.is_available():
            raise SystemExit("rltrainer bench: no CUDA device visible; use --device cpu to benchmark gloo on CPUs")
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        backend = "nccl"
    elif device == "cpu":
        dev = torch.device("cpu")
        backend = "gloo"
    else:
        raise SystemExit(f"rltrainer bench: unknown --device {device!r}; use cuda or cpu")
    if not dist.is_initialized():
        kwargs = {"backend": backend, "init_method": "env://", "rank": rank, "world_size": world,
                  "timeout": timedelta(seconds=timeout_s)}
        if backend == "nccl":
            kwargs["device_id"] = dev  # binds the communicator eagerly; fails fast on a bad fabric
        dist.init_process_group(**kwargs)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=backend)


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def timed(ctx: DistContext, fn, iters: int) -> float:
    """Mean seconds per call of ``fn`` on this rank, with device work included."""
    ctx.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    ctx.synchronize()
    return (time.perf_counter() - start) / iters


def sig(x: float, digits: int = 6) -> float:
    """Round to significant digits: readable, and still exact enough for tiny CPU numbers."""
    return float(f"{x:.{digits}g}")


def emit(row: dict, out: TextIO) -> None:
    """One JSON object per line; the ``kind`` field says which schema it follows."""
    out.write(json.dumps(row, sort_keys=False) + "\n")
    out.flush()

"""``rltrainer bench allreduce``: all-reduce bandwidth across every rank.

Bandwidths follow the nccl-tests convention (NVIDIA/nccl-tests doc/PERFORMANCE.md):

- algorithm bandwidth ``algbw = size / time``;
- bus bandwidth ``busbw = algbw x 2(n-1)/n`` for all-reduce, the rate each link must
  sustain in a ring, which makes the number comparable across rank counts and with
  the hardware's link speed. The kit's published acceptance numbers (e.g. 442 GB/s at
  2 GiB on 2x p5.48xlarge) are bus bandwidths in this convention.

GB/s here is 1e9 bytes per second, as in nccl-tests. ``time`` is the time of one all-reduce
averaged over the ranks, what nccl-tests reports by default (v2.19.6, commit a0b82b2,
src/common.cu: ``static int average = 1``, "0=RANK0,1=AVG,2=MIN,3=MAX"; ``Allreduce()`` sums each
rank's mean iteration time and divides by the number of ranks).

The readable table on stderr has nccl-tests' layout (NVIDIA/nccl-tests v2.19.6, commit
a0b82b2, src/util.cu ``writeResultHeader``, ``writeBenchmarkLinePreamble``,
``writeBenchmarkLineBody``, ``getFloatStr``, ``writeResultFooter``): size, count, type, redop,
root, then time/algbw/busbw/#wrong for out-of-place and in-place, and the "Out of bounds values"
and "Avg bus bandwidth" footer lines, so our rows sit next to an ``all_reduce_perf`` run.
``torch.distributed.all_reduce`` is in-place only: the out-of-place columns say N/A.

Before timing a size, every rank fills the buffer with a rank-dependent pattern,
all-reduces it and checks the exact sums; a wrong result stops the benchmark on every
rank (exit 1) instead of timing a broken fabric.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from .efa_counters import TrafficProbe
from .common import DistContext, emit, sig, format_size, import_torch, init_distributed, parse_size, shutdown, timed, torch_dtype

PATTERN_PERIOD = 7
CHECK_CAP_BYTES = 256 << 20  # fp32 check buffer limit when timing another dtype


def bus_bandwidth_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n-1)/n (0 for a single rank: nothing crosses a bus)."""
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    return 2.0 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) for one all-reduce of ``size_bytes``."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_bandwidth_factor(world_size)


def sweep_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers-of-two steps from ``min_bytes`` up to ``max_bytes`` inclusive (nccl-tests -f 2)."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < min-bytes <= max-bytes, got {min_bytes} and {max_bytes}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


_NCCL_TYPE_NAMES = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}  # nccl-tests test_typenames


def nccl_float(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2, 1 or 0 decimals, whichever fits ``width``, else exponent."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return (f"{{:{width}.1e}}" if width >= 7 else f"{{:{width}.0e}}").format(value)[:width]


def nccl_tests_header() -> list[str]:
    """The column header nccl-tests prints (without per-iteration timing or timestamps)."""
    cols = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} "
    return [
        "#",
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ".format(
            "", "", "", "", ""),
        cols.format("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                    "busbw", "#wrong"),
        cols.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


def nccl_tests_row(size_bytes: int, count: int, dtype: str, seconds: float, algbw: float, busbw: float,
                   wrong: int) -> str:
    """One all_reduce_perf result line; our all-reduce is in-place, so out-of-place is N/A."""
    preamble = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}".format(size_bytes, count, _NCCL_TYPE_NAMES.get(dtype, dtype),
                                                            "sum", -1)
    oop = "  {:>7}  {:>6}  {:>6}  {:>6}".format("N/A", "N/A", "N/A", "N/A")
    inplace = "  {}  {}  {}  {:>6g}".format(nccl_float(seconds * 1e6, 7), nccl_float(algbw, 6), nccl_float(busbw, 6),
                                            wrong)
    return preamble + oop + inplace


def nccl_tests_footer(busbws: list[float], wrong: int) -> list[str]:
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    return [f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
            f"# {'Avg bus bandwidth':<20} : {avg:g} ",
            "#"]


def rank_average(ctx: DistContext, seconds: float) -> float:
    """This rank's mean time averaged over every rank: nccl-tests' default report (``-a 1``;
    src/common.cu ``average = 1``: ``Allreduce()`` sums the ranks' times and divides by their
    number), so a row sits next to an ``all_reduce_perf`` run of the same size."""
    return ctx.reduce_scalar(seconds, "sum") / ctx.world_size


def check_allreduce(ctx: DistContext, buf) -> str | None:
    """All-reduce a known pattern in ``buf`` (float32) and verify it; None if correct.

    Rank r writes (r + 1) x (j + 1) at every position i with i % 7 == j, so the sum is
    n(n+1)/2 x (j + 1): exact in float32 for up to ~2000 ranks, and a missing or
    doubled rank, or a shifted chunk, changes it.
    """
    torch, dist = import_torch()
    for j in range(PATTERN_PERIOD):
        buf[j::PATTERN_PERIOD].fill_((ctx.rank + 1) * (j + 1))
    dist.all_reduce(buf)
    total = ctx.world_size * (ctx.world_size + 1) // 2
    for j in range(PATTERN_PERIOD):
        lane = buf[j::PATTERN_PERIOD]
        expected = float(total * (j + 1))
        bad = (lane != expected).nonzero()
        if bad.numel():
            i = int(bad[0].item()) * PATTERN_PERIOD + j
            got = float(lane[int(bad[0].item())].item())
            return (f"rank {ctx.rank}: element {i} of {buf.numel()} is {got:g} after all-reduce, expected {expected:g} "
                    f"(the sum of (rank + 1) x {j + 1} over {ctx.world_size} ranks)")
    return None


def run(args: argparse.Namespace, ctx: DistContext, out: TextIO, err: TextIO) -> int:
    torch, dist = import_torch()
    dtype = torch_dtype(args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes = sweep_sizes(parse_size(args.min_bytes), parse_size(args.max_bytes))
    leader = ctx.rank == 0
    if leader:
        print(f"# all-reduce: {ctx.world_size} ranks, backend {ctx.backend}, dtype {args.dtype}, "
              f"{args.warmup} warmup + {args.iters} timed iterations", file=err)
        print("\n".join(nccl_tests_header()), file=err)
    busbws: list[float] = []
    traffic = TrafficProbe("allreduce", ctx.local_rank)  # every node's local rank 0
    for size in sizes:
        numel = max(1, size // elem)
        nbytes = numel * elem
        buf = torch.empty(numel, dtype=dtype, device=ctx.device)
        # Check on the timed buffer itself when it is float32, else on a float32 buffer
        # of the same length (capped): the pattern sums are exact only in float32.
        if dtype == torch.float32:
            check_buf = buf
        else:
            check_buf = torch.empty(min(numel, CHECK_CAP_BYTES // 4), dtype=torch.float32, device=ctx.device)
        problem = check_allreduce(ctx, check_buf)
        if not ctx.all_ok(problem is None):
            if problem:
                print(f"rltrainer bench allreduce: correctness check FAILED at {format_size(nbytes)}: {problem}",
                      file=err, flush=True)
            if leader:
                print(f"rltrainer bench allreduce: stopping: the reduced values were wrong on at least one rank "
                      f"at {format_size(nbytes)}; no timings reported", file=err, flush=True)
            return 1
        del check_buf
        buf.zero_()  # keep values finite while repeatedly summing (inf/NaN can slow CPU paths)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        ctx.barrier()
        seconds = rank_average(ctx, timed(ctx, lambda b=buf: dist.all_reduce(b), args.iters))
        algbw, busbw = bandwidths(nbytes, seconds, ctx.world_size)
        if leader:
            emit(
                {
                    "kind": "allreduce",
                    "size_bytes": nbytes,
                    "time_us": sig(seconds * 1e6),
                    "algbw_GBps": sig(algbw),
                    "busbw_GBps": sig(busbw),
                    "world_size": ctx.world_size,
                    "backend": ctx.backend,
                },
                out,
            )
            print(nccl_tests_row(nbytes, numel, torch_dtype_name(dtype), seconds, algbw, busbw, 0), file=err, flush=True)
            busbws.append(busbw)
        del buf  # free before allocating the next (twice as large) buffer
    if leader:
        print("\n".join(nccl_tests_footer(busbws, 0)), file=err, flush=True)
    traffic.emit(ctx.is_cuda, out)
    return 0


def torch_dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-bytes", default="8M", help="smallest message, bytes with optional K/M/G suffix (default 8M)")
    p.add_argument("--max-bytes", default="2G", help="largest message (default 2G); sizes double from min to max")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size (default 5)")
    p.add_argument("--dtype", default="float32", help="float32 (default, as nccl-tests), bfloat16 or float16")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda = NCCL (default); cpu = gloo")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """All-reduce bus-bandwidth sweep under torchrun; rank 0 prints JSON lines on stdout."""
    p = argparse.ArgumentParser(prog="rltrainer bench allreduce", description=main.__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    return run_main(args, out or sys.stdout, err or sys.stderr)


def run_main(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for name in ("iters", "warmup"):
        if getattr(args, name) < (1 if name == "iters" else 0):
            print(f"rltrainer bench allreduce: --{name} must be >= {1 if name == 'iters' else 0}", file=err)
            return 2
    try:
        sweep_sizes(parse_size(args.min_bytes), parse_size(args.max_bytes))
        torch_dtype(args.dtype)
    except ValueError as exc:
        print(f"rltrainer bench allreduce: {exc}", file=err)
        return 2
    ctx = init_distributed(args.device)
    try:
        return run(args, ctx, out, err)
    finally:
        shutdown()

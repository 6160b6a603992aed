"""Helpers for the trainer tests: real multi-process torch.distributed runs on gloo.

Rank processes import this module by name (pytest puts this directory on sys.path and
multiprocessing's forkserver is started with that sys.path), so every worker is a top-level
function here. Workers write what they saw to ``<outdir>/rank<N>.json``.
"""

from __future__ import annotations

import io
import json
import os
import socket
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class FakeClock:
    """A wall clock that moves only when a test advances it (the launcher's ``now``)."""

    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
# ../shared/upstream beside the repository clone: the exact sources the image runs.
SHARED_UPSTREAM = Path(__file__).resolve().parents[3].parent / "shared" / "upstream"


def pinned_source(folder: str, rel: str, what: str) -> str:
    """One file of the pinned upstream sources (``../shared/upstream/<folder>/<rel>``, else the
    artifact cache: tests/support/artifacts.py). Missing: a test failure in CI (CI=true), elsewhere
    a skip that says what is missing and how to fetch it. Only tests marked ``external`` read it."""
    import pytest

    from tests.support import artifacts

    candidates = [SHARED_UPSTREAM / folder / rel, artifacts.cache_root() / artifacts.entries()[folder]["path"] / rel]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        message = (f"{what}'s pinned sources are missing: {candidates[0]} (the ../shared/upstream/{folder} "
                   "folder beside the repository clone; see shared/upstream/README.md), and "
                   f"{candidates[1]}: {artifacts.FETCH_HINT}")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    artifacts.check_marked(folder)
    return path.read_text()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dist_env(rank: int, world: int, port: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        # keep each process to one thread: 2 cores, up to 4 ranks
        "OMP_NUM_THREADS": "1",
    }


def run_ranks(worker: Callable, world: int, outdir: Path, *args: Any, timeout_s: float = 90.0) -> list[dict]:
    """Run ``worker(rank, world, port, outdir, *args)`` in ``world`` new processes.

    Returns each rank's JSON record. Fails (instead of hanging) after ``timeout_s``.
    """
    import multiprocessing

    import torch.multiprocessing as mp

    # Each rank is a fresh process forked from a forkserver that imported torch once, instead of
    # a spawned interpreter importing torch again (about 3 s of CPU per rank on the CI's 2 cores).
    # The forkserver never runs torch code, so a rank starts with no threads and no torch state.
    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "torch.distributed", "trainer_helpers"])
    outdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ctx = mp.start_processes(worker, args=(world, port, str(outdir), *args), nprocs=world, join=False,
                             start_method="forkserver")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"distributed test did not finish within {timeout_s}s")
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(world)]


def _record(outdir: str, rank: int, rc: int, out: str, err: str, **extra: Any) -> None:
    Path(outdir, f"rank{rank}.json").write_text(json.dumps({"rc": rc, "stdout": out, "stderr": err, **extra}))


def _setup(rank: int, world: int, port: int) -> None:
    os.environ.update(dist_env(rank, world, port))
    import torch

    torch.set_num_threads(1)


def cli_worker(rank: int, world: int, port: int, outdir: str, argv: list[str]) -> None:
    """Run ``rltrainer <argv>`` in this rank, the same code path as the console script."""
    _setup(rank, world, port)
    from rltrainer.bench import main

    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main(argv, out=out, err=err)
    except SystemExit as exc:  # e.g. a missing backend: record it like the shell would see it
        rc = exc.code if isinstance(exc.code, int) else 1
        err.write(f"{exc.code}\n" if not isinstance(exc.code, int) else "")
    _record(outdir, rank, rc, out.getvalue(), err.getvalue())


def broken_allreduce_worker(rank: int, world: int, port: int, outdir: str, argv: list[str]) -> None:
    """All-reduce that adds 1 to every value on the last rank: the check must catch it."""
    _setup(rank, world, port)
    import torch.distributed as dist

    from rltrainer.bench import main

    real = dist.all_reduce

    def wrong_sum(tensor, *a, **kw):
        work = real(tensor, *a, **kw)
        if dist.get_rank() == dist.get_world_size() - 1 and tensor.dtype.is_floating_point and tensor.numel() > 1:
            tensor.add_(1)
        return work

    dist.all_reduce = wrong_sum
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main(argv, out=out, err=err)
    finally:
        dist.all_reduce = real
    _record(outdir, rank, rc, out.getvalue(), err.getvalue())


def _ep_run(rank: int, world: int, port: int, outdir: str, argv: list[str], factory) -> None:
    _setup(rank, world, port)
    import argparse

    from rltrainer.bench import ep

    p = argparse.ArgumentParser()
    ep.add_arguments(p)
    args = p.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = ep.run_main(args, out, err, dispatcher_factory=factory)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
        err.write(f"{exc.code}\n" if not isinstance(exc.code, int) else "")
    _record(outdir, rank, rc, out.getvalue(), err.getvalue())


def make_shifted_split_dispatcher(ctx, shape):
    """A dispatcher with the wrong expert -> rank split (shifted by one expert)."""
    from rltrainer.bench.ep import AllToAllDispatcher

    class ShiftedSplit(AllToAllDispatcher):
        def owner_of(self, expert_ids):
            return ((expert_ids + 1) % self.shape.experts) // self.experts_per_rank

    return ShiftedSplit(ctx, shape)


def make_unweighted_combine_dispatcher(ctx, shape):
    """Dispatch is right; combine forgets the router weights."""
    import torch

    from rltrainer.bench.ep import AllToAllDispatcher

    class Unweighted(AllToAllDispatcher):
        def combine(self, expert_out, handle, topk_idx, topk_w):
            return super().combine(expert_out, handle, topk_idx, torch.ones_like(topk_w))

    return Unweighted(ctx, shape)


def broken_split_ep_worker(rank: int, world: int, port: int, outdir: str, argv: list[str]) -> None:
    _ep_run(rank, world, port, outdir, argv, make_shifted_split_dispatcher)


def unweighted_combine_ep_worker(rank: int, world: int, port: int, outdir: str, argv: list[str]) -> None:
    _ep_run(rank, world, port, outdir, argv, make_unweighted_combine_dispatcher)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


STANDIN = Path(__file__).resolve().parent / "deepep_standin"


def make_standin_deepep_dispatcher(ctx, shape):
    """DeepEPDispatcher over the stand-in deep_ep (gloo, CPU)."""
    from rltrainer.bench.ep import DeepEPDispatcher

    return DeepEPDispatcher(ctx, shape, allow_cpu=True)


def standin_deepep_worker(rank: int, world: int, port: int, outdir: str, argv: list[str],
                          published_shape: list[int] | None = None) -> None:
    import sys

    sys.path.insert(0, str(STANDIN))
    if published_shape is not None:  # a small stand-in for DeepEP's shape (2 CPU cores)
        from rltrainer.bench import ep

        ep.PUBLISHED_SHAPE = ep.EPShape(*published_shape)
    _ep_run(rank, world, port, outdir, argv, make_standin_deepep_dispatcher)
    import deep_ep

    record = json.loads(Path(outdir, f"rank{rank}.json").read_text())
    record["calls"] = deep_ep.CALLS
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(record))


def small_acceptance_worker(rank: int, world: int, port: int, outdir: str, argv: list[str], shape: list[int]) -> None:
    """``--acceptance`` with the published shape swapped for a small one (2 CPU cores)."""
    from rltrainer.bench import ep

    ep.PUBLISHED_SHAPE = ep.EPShape(*shape)
    _ep_run(rank, world, port, outdir, argv, None)


def standin_make_dispatcher_worker(rank: int, world: int, port: int, outdir: str, argv: list[str],
                                   published_shape: list[int] | None = None) -> None:
    """``rltrainer bench ep --backend deepep`` through the real ``make_dispatcher`` (no factory),
    over the stand-in deep_ep; only the GPU check is relaxed (the stand-in runs on gloo)."""
    import sys

    sys.path.insert(0, str(STANDIN))
    from rltrainer.bench import ep, ep_dispatch

    init = ep_dispatch.DeepEPDispatcher.__init__

    def cpu_ok(self, ctx, shape, group=None, allow_cpu=False, **kw):
        return init(self, ctx, shape, group, True, **kw)

    ep_dispatch.DeepEPDispatcher.__init__ = cpu_ok
    if published_shape is not None:
        ep.PUBLISHED_SHAPE = ep.EPShape(*published_shape)
    _ep_run(rank, world, port, outdir, argv, None)
    import deep_ep

    record = json.loads(Path(outdir, f"rank{rank}.json").read_text())
    record["buffers"] = [kw["group_size"] for name, kw in deep_ep.CALLS if name == "__init__"]
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(record))

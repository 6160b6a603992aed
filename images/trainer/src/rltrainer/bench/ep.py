"""``rltrainer bench ep``: expert-parallel dispatch and combine with model shapes.

Each rank holds ``tokens_per_rank`` tokens of ``hidden`` values; a seeded router
sends every token to ``topk`` distinct experts out of ``experts``, spread evenly over
the ranks (expert e lives on rank e // (experts / world_size)).

- dispatch: move every routed token to the rank that owns its expert;
- expert:   that rank applies its expert (here a known per-expert scale, untimed);
- combine:  move the results back and sum them with the router weights.

Two implementations share the harness:

- ``nccl`` (:class:`AllToAllDispatcher`): what Megatron's ``alltoall`` token dispatcher
  does. Rows are permuted so each destination's rows are contiguous and grouped by
  expert, per-expert counts are exchanged with one small all-to-all, the rows with one
  uneven ``all_to_all_single`` (NCCL on GPUs, gloo on CPUs), and combine runs the
  inverse. One row per (token, expert) pair.
- ``deepep`` (:class:`DeepEPDispatcher`): DeepEP's normal (high-throughput) kernels
  through ``deep_ep.Buffer`` -- one row per (token, destination rank); requires the
  image built with a DeepEP ``EP_BACKEND``.

Correctness comes first and is checked against a local reference: every rank can
regenerate every other rank's tokens and routing from the seed, so it knows exactly
which rows it must receive (and in which order, for the all-to-all layout), and what
each of its tokens must look like after combine:
``y[t] = sum_k w[t,k] x scale(e[t,k]) x x[t]``. Only then are dispatch and combine
timed, separately, on the slowest rank.

Two timings, two purposes:

- ``step_time_us`` (backend choice): one whole dispatch (layout, count exchange and
  data movement) and one whole combine, mean over ``--iters`` on the slowest rank. The
  gate picks the EP backend with the lower dispatch + combine step time for the
  model's own shape; no bandwidth is involved.
- ``time_us`` with ``rdma_GBps`` / ``nvl_GBps`` (acceptance): counted and timed the way
  DeepEP's own ``tests/test_internode.py`` does at commit 567632d (the commit the image
  builds), so the numbers mean what the published DeepEP-over-EFA figures mean:

  * bytes (bf16, 2 per element): RDMA = one row per (token, destination node), counted
    once per node whatever the number of experts it hits there (``num_rdma_token_sent``;
    the sender's own node counts too, as in DeepEP's test); NVLink = the rows this rank
    receives, one per (token, destination rank) (``recv_x.numel() * 2``). Combine moves
    the same bytes back (``combine_bf16_rdma_recv_bytes = dispatch_bf16_rdma_send_bytes``);
  * time: only the data movement of an already laid-out dispatch (DeepEP: a dispatch
    with ``handle=``, no layout, no count exchange) and of combine; with DeepEP on GPUs,
    the CUDA time of the ``dispatch`` / ``combine`` kernel from the profiler, as
    DeepEP's ``bench_kineto`` reads it; elsewhere wall time around the call;
  * reported for rank 0 (DeepEP's test prints each node's local rank 0);
  * with DeepEP, after the same chunk-size sweep DeepEP's test runs, for the best config
    (the published figures are its "Best" lines); ``--no-tune`` skips the sweep.

  ``--acceptance`` adds a second measurement at DeepEP's published shape (hidden 7168,
  256 experts, top-8, 4096 tokens per rank) after the model-shape one.

The dispatcher is injectable (``run_benchmark(..., dispatcher=...)``) so tests can run
a deliberately broken one and see the check fail with a clear message.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence, TextIO

from ..contract.names import DEEPEP_RANK_COUNTS, DEEPEP_RANK_COUNTS_SOURCE
from ..contract.spans import SPAN_FORMAT, Span, span_groups
from ..contract.spans import parse_span as read_span
from .common import DistContext, emit, import_torch, init_distributed, shutdown, sig, timed, torch_dtype
from .efa_counters import TrafficProbe
from .ep_check import check_combine, check_dispatch
# The dispatchers and the shape helpers are re-exported: ``rltrainer.bench.ep`` is where the
# tests, the gate's fixture generator and users find every piece of this benchmark.
from .ep_dispatch import AllToAllDispatcher, DeepEPDispatcher, DispatchOutput, make_dispatcher  # noqa: F401
from .ep_shape import (  # noqa: F401
    BF16_BYTES,
    PER_EXPERT_COPY,
    PER_TOKEN,
    PUBLISHED_SHAPE,
    DeepEPBytes,
    EPShape,
    deepep_bytes,
    expert_scale,
    make_tokens,
    rdma_tokens_sent,
    tokens_per_rank,
)


@dataclass
class EPResult:
    correct: bool
    message: str | None = None
    # backend choice: whole dispatch / combine, mean per call, slowest rank
    dispatch_step_s: float | None = None
    combine_step_s: float | None = None
    # acceptance: data movement only, timed as DeepEP's test times it, on rank 0
    dispatch_s: float | None = None
    combine_s: float | None = None
    timing: str = "wall"  # "kernel" (CUDA profiler, DeepEP's kernels) or "wall"
    bytes: DeepEPBytes | None = None  # rank 0's, DeepEP's accounting

    def gbps(self, direction: str, link: str) -> float | None:
        seconds = self.dispatch_s if direction == "dispatch" else self.combine_s
        if self.bytes is None or not seconds:
            return None
        return getattr(self.bytes, link) / seconds / 1e9


def kernel_seconds(fn, kernel_name: str, iters: int) -> float:
    """Mean CUDA time of the one kernel whose name contains ``kernel_name``, per call of ``fn``.

    Read from torch's profiler averages, the column DeepEP's ``bench_kineto`` parses; like it,
    exactly one kernel name must match, so a renamed kernel fails loudly instead of timing
    the wrong thing.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if kernel_name in e.key]
    if len(rows) != 1:
        names = sorted({e.key for e in prof.key_averages()})
        raise RuntimeError(f"expected one CUDA kernel named like {kernel_name!r} in the profile, found "
                           f"{len(rows)}: {names[:8]}")
    row = rows[0]
    total_us = getattr(row, "device_time_total", None)
    if total_us is None:  # torch < 2.4
        total_us = row.cuda_time_total
    return total_us / row.count / 1e6


def wall_seconds(ctx: DistContext, fn, iters: int) -> float:
    ctx.barrier()
    return timed(ctx, fn, iters)


def run_benchmark(
    ctx: DistContext,
    shape: EPShape,
    *,
    dispatcher: Any,
    dtype: Any,
    iters: int,
    warmup: int,
    seed: int = 0,
    ranks_per_node: int | None = None,
    tune: bool = False,
) -> EPResult:
    """Check ``dispatcher`` for correctness, then time it both ways (see the module docstring)."""
    torch, _ = import_torch()
    x, idx, w = make_tokens(shape, ctx.rank, seed, dtype, ctx.device)

    problem = None
    try:
        out = dispatcher.dispatch(x, idx, w)
        problem = check_dispatch(ctx, shape, seed, dtype, dispatcher.layout, out)
        if problem is None:
            y = dispatcher.combine(dispatcher.expert_forward(out), out.handle, idx, w)
            problem = check_combine(ctx, shape, seed, dtype, y)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - a crashing dispatcher is a failed check, on every rank
        problem = f"rank {ctx.rank}: {type(exc).__name__}: {exc}"
    if not ctx.all_ok(problem is None):
        return EPResult(False, problem or "another rank failed its check")

    for _ in range(warmup):
        out = dispatcher.dispatch(x, idx, w)
        dispatcher.combine(dispatcher.expert_forward(out), out.handle, idx, w)

    # Backend choice: time per step, layout and count exchange included.
    t_dispatch = t_combine = 0.0
    for _ in range(iters):
        ctx.barrier()
        ctx.synchronize()
        t0 = time.perf_counter()
        out = dispatcher.dispatch(x, idx, w)
        ctx.synchronize()
        t1 = time.perf_counter()
        expert_out = dispatcher.expert_forward(out)
        ctx.synchronize()
        t2 = time.perf_counter()
        dispatcher.combine(expert_out, out.handle, idx, w)
        ctx.synchronize()
        t3 = time.perf_counter()
        t_dispatch += t1 - t0
        t_combine += t3 - t2
    result = EPResult(True, dispatch_step_s=ctx.reduce_scalar(t_dispatch / iters, "max"),
                      combine_step_s=ctx.reduce_scalar(t_combine / iters, "max"))

    # Acceptance: DeepEP's accounting. Lay out once, then time only the data movement.
    rpn = ranks_per_node or ctx.world_size
    result.bytes = deepep_bytes(ctx, shape, idx, rpn)
    out = dispatcher.dispatch(x, idx, w)
    expert_out = dispatcher.expert_forward(out)
    move = lambda: dispatcher.dispatch_cached(x, out)  # noqa: E731
    back = lambda: dispatcher.combine(expert_out, out.handle, idx, w)  # noqa: E731
    kernels = getattr(dispatcher, "kernel_names", None)
    use_kernels = bool(ctx.is_cuda and kernels)

    def seconds(fn, direction: str) -> float:
        ctx.barrier()
        return kernel_seconds(fn, kernels[direction], iters) if use_kernels else wall_seconds(ctx, fn, iters)

    if tune and hasattr(dispatcher, "tune"):
        dispatcher.tune(x, out, expert_out, seconds, rpn)
    result.timing = "kernel" if use_kernels else "wall"
    result.dispatch_s = seconds(move, "dispatch")
    result.combine_s = seconds(back, "combine")
    return result


def result_rows(result: EPResult, shape: EPShape, backend: str, world_size: int, *, purpose: str = "model",
                ranks_per_node: int | None = None, ep_ranks: Sequence[int] | None = None,
                ep_pool: tuple[int, int] | None = None, ep_tp: int = 1) -> list[dict]:
    """The two JSON rows (dispatch, combine) for one benchmark result. ``ep_ranks``: the global
    ranks of the first EP group when the measurement ran inside the run's EP groups (default:
    every rank); ``ep_pool``: (first rank, rank count) the groups tile (default: every rank);
    ``ep_tp``: the ranks each routed expert's tokens went to (``shape`` counts them already)."""
    rpn = ranks_per_node or world_size
    group = list(ep_ranks) if ep_ranks is not None else list(range(world_size))
    first, count = ep_pool if ep_pool is not None else (0, world_size)
    rows = []
    for direction in ("dispatch", "combine"):
        step = result.dispatch_step_s if direction == "dispatch" else result.combine_step_s
        seconds = result.dispatch_s if direction == "dispatch" else result.combine_s
        rdma = nvl = None
        if result.bytes is not None:
            rdma, nvl = result.bytes.rdma, result.bytes.nvl
        rdma_gbps, nvl_gbps = result.gbps(direction, "rdma"), result.gbps(direction, "nvl")
        rows.append({
            "kind": "ep",
            "purpose": purpose,
            "backend": backend,
            "direction": direction,
            "tokens_per_rank": shape.tokens_per_rank,
            "hidden": shape.hidden,
            "topk": shape.topk,
            "experts": shape.experts,
            "world_size": world_size,
            "ranks_per_node": rpn,
            "ep_size": len(group),
            "ep_stride": group[1] - group[0] if len(group) > 1 else 1,
            "ep_nodes": len({r // rpn for r in group}),
            "ep_first": first,
            "ep_pool": count,
            "ep_tp": ep_tp,
            "step_time_us": sig(step * 1e6) if step is not None else None,
            "time_us": sig(seconds * 1e6) if seconds is not None else None,
            "timing": result.timing,
            "rdma_bytes": rdma,
            "nvl_bytes": nvl,
            "rdma_GBps": sig(rdma_gbps) if rdma_gbps is not None else None,
            "nvl_GBps": sig(nvl_gbps) if nvl_gbps is not None else None,
            "correct": result.correct,
        })
    return rows


# --- the run's own EP groups ---------------------------------------------------------------------


def parse_span(text: str) -> Span:
    """``--span``'s type: the contract's reader (``rltrainer.contract.spans``), its error as argparse's."""
    try:
        return read_span(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def span_shape(span: Span, model: EPShape) -> EPShape:
    """The shape DeepEP sees in ``span``'s groups: every routed expert's tp shards are destinations."""
    return EPShape(model.tokens_per_rank, model.hidden, model.topk * span.tp, model.experts * span.tp)


def span_problems(span: Span, world: int) -> list[str]:
    first, count = span.pool(world)
    if first + count > world:
        return [f"--span {span.text()}: ranks {first}..{first + count - 1} are not all in the world of {world} ranks"]
    if count % (span.size * span.stride):
        return [f"--span {span.text()}: {span.size} x {span.stride} must divide the {count} ranks its groups "
                f"tile (from rank {first}, world size {world})"]
    return []


def span_context(ctx: DistContext, groups: list[list[int]]) -> tuple[DistContext | None, list[int]]:
    """This rank inside its EP group (None, and the first group, for a rank in none of them);
    every rank creates every group, in the same order (torch.distributed.new_group's rule)."""
    import torch.distributed as dist

    mine: tuple[DistContext | None, list[int]] = (None, groups[0])
    for ranks in groups:
        group = dist.new_group(ranks)
        if ctx.rank in ranks:
            mine = (ctx.subgroup(ranks, group), ranks)
    return mine


def gather_span_result(ctx: DistContext, result: EPResult, reporter: bool) -> EPResult:
    """Every rank's view of one span measurement: every group ran at once, as in the run, so the
    slowest rank decides the step times and all ranks agree on correctness; the acceptance-style
    figures are the ``reporter``'s (rank 0 of the first group), sent to every rank so world rank 0
    can print them when it is in no group (a disaggregated rollout pool)."""
    result.correct = ctx.all_ok(result.correct)
    if not result.correct:
        return result
    result.dispatch_step_s = ctx.reduce_scalar(result.dispatch_step_s or 0.0, "max")
    result.combine_step_s = ctx.reduce_scalar(result.combine_step_s or 0.0, "max")

    def reported(value: float | None) -> float:
        return ctx.reduce_scalar(value if reporter and value is not None else 0.0, "max")

    result.dispatch_s, result.combine_s = reported(result.dispatch_s), reported(result.combine_s)
    kernel = reported(1.0 if result.timing == "kernel" else 0.0) > 0.5
    result.timing = "kernel" if kernel else "wall"
    mine = result.bytes or DeepEPBytes(0, 0)
    result.bytes = DeepEPBytes(rdma=int(reported(mine.rdma)), nvl=int(reported(mine.nvl)))
    return result


def deepep_size_problems(groups: Sequence[tuple[str, int]]) -> list[str]:
    """One line per (purpose, group size) the pinned DeepEP cannot configure: its Buffer asserts
    on such a size (``DEEPEP_RANK_COUNTS``) instead of naming it."""
    known = ", ".join(map(str, DEEPEP_RANK_COUNTS))
    fixes = {"acceptance": "drop --acceptance", "model": "run on a world size DeepEP knows, or use --span"}
    return [f"--backend deepep ({purpose}): a DeepEP group of {n} ranks cannot start, the pinned DeepEP "
            f"configures only {known} ranks ({DEEPEP_RANK_COUNTS_SOURCE}); "
            f"{fixes.get(purpose, 'use a --span SIZE DeepEP knows')}, or --backend nccl"
            for purpose, n in groups if n not in DEEPEP_RANK_COUNTS]


def _ranks_per_node(args: argparse.Namespace, ctx: DistContext) -> int:
    if args.ranks_per_node is not None:
        return args.ranks_per_node
    import os

    return int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))  # torchrun sets it


def run(args: argparse.Namespace, ctx: DistContext, out: TextIO, err: TextIO, dispatcher: Any = None,
        dispatcher_factory=None) -> int:
    model = EPShape(args.tokens_per_rank, args.hidden, args.topk, args.experts)
    spans: list[Span] = list(getattr(args, "span", None) or [])
    # With --span the model's shape is measured in each of the run's EP groups (what picks the
    # backend); without, over every rank. The published shape always spans every rank.
    plan: list[tuple[str, EPShape, Span | None]] = (
        [(s.name, span_shape(s, model), s) for s in spans] if spans else [("model", model, None)])
    if args.acceptance:
        plan.append(("acceptance", PUBLISHED_SHAPE, None))
    rpn = _ranks_per_node(args, ctx)
    problems = [p for _, shape, span in plan
                for p in shape.validate(span.size if span else ctx.world_size)]
    for span in spans:
        problems += span_problems(span, ctx.world_size)
    if args.backend == "deepep":
        problems += deepep_size_problems([(purpose, span.size if span else ctx.world_size)
                                          for purpose, _, span in plan])
    if rpn < 1 or ctx.world_size % rpn:
        problems.append(f"--ranks-per-node {rpn} must divide the world size {ctx.world_size}")
    if problems:
        if ctx.rank == 0:
            for p in dict.fromkeys(problems):
                print(f"rltrainer bench ep: {p}", file=err)
        # Every rank finds the same problems; none leaves before all have joined the group, or a
        # rank still connecting gloo's mesh fails on the closed peer instead of refusing (exit 2).
        _, dist = import_torch()
        if dist.is_initialized():
            dist.barrier()
        return 2
    dtype = torch_dtype(args.dtype or ("bfloat16" if ctx.is_cuda else "float32"))
    max_hidden = max(shape.hidden for _, shape, _ in plan)
    disp = None
    ok = True
    traffic = TrafficProbe("ep", ctx.local_rank)  # every node's local rank 0
    for purpose, shape, span in plan:
        run_ctx, ranks, group_rpn, pool = ctx, list(range(ctx.world_size)), rpn, (0, ctx.world_size)
        if span is not None:
            pool = span.pool(ctx.world_size)
            groups = span_groups(pool[1], span.size, span.stride, pool[0])
            run_ctx, mine = span_context(ctx, groups)
            ranks = groups[0]  # the rows describe the first group (its rank 0 reports)
            # members of this group on one node (DeepEP's RDMA/NVLink split inside the group)
            group_rpn = len(ranks) // len({r // rpn for r in ranks})
        if run_ctx is None:  # a rank outside this layout's pool: it only joins the verdict
            result = EPResult(True)
        else:
            if dispatcher is not None and purpose in ("model",) + tuple(s.name for s in spans):
                disp = dispatcher
            elif dispatcher_factory is not None:
                disp = dispatcher_factory(run_ctx, shape)
            else:
                disp = make_dispatcher(args.backend, run_ctx, shape, previous=disp, max_hidden=max_hidden)
            result = run_benchmark(run_ctx, shape, dispatcher=disp, dtype=dtype, iters=args.iters,
                                   warmup=args.warmup, seed=args.seed, ranks_per_node=group_rpn,
                                   tune=purpose == "acceptance" and not args.no_tune)
        if span is not None:
            result = gather_span_result(ctx, result, reporter=run_ctx is not None and mine == ranks
                                        and run_ctx.rank == 0)
        if not result.correct and result.message and "another rank" not in result.message:
            print(f"rltrainer bench ep: {result.message}", file=err, flush=True)
        if ctx.rank == 0:
            name = disp.name if disp is not None else _backend_name(args.backend, ctx)
            for row in result_rows(result, shape, name, ctx.world_size, purpose=purpose, ranks_per_node=rpn,
                                   ep_ranks=ranks, ep_pool=pool, ep_tp=span.tp if span else 1):
                emit(row, out)
            _print_table(result, shape, name, len(ranks), group_rpn, purpose, err)
        ok = ok and result.correct
        if not result.correct:
            break
    if ok:
        traffic.emit(ctx.is_cuda, out)
    return 0 if ok else 1


def _backend_name(backend: str, ctx: DistContext) -> str:
    """The row's backend on a rank that measured nothing yet (rank 0 outside the first span's
    pool): what the dispatchers call themselves."""
    return ctx.backend if backend == "nccl" else backend


def _print_table(result: EPResult, shape: EPShape, name: str, world: int, rpn: int, purpose: str, err: TextIO):
    if not result.correct:
        print("rltrainer bench ep: correctness check FAILED; no timings reported", file=err, flush=True)
        return
    print(f"# ep {name} ({purpose} shape): {world} ranks, {rpn} per node, {shape.tokens_per_rank} tokens/rank, "
          f"hidden {shape.hidden}, top-{shape.topk} of {shape.experts} experts", file=err)
    for d in ("dispatch", "combine"):
        step = result.dispatch_step_s if d == "dispatch" else result.combine_step_s
        t = result.dispatch_s if d == "dispatch" else result.combine_s
        print(f"#   {d:<8} step {step * 1e6:10.1f} us | DeepEP-timed ({result.timing}) {t * 1e6:10.1f} us "
              f"{result.gbps(d, 'rdma'):8.2f} GB/s (RDMA) {result.gbps(d, 'nvl'):8.2f} GB/s (NVL)", file=err)


def add_arguments(p: argparse.ArgumentParser) -> None:
    # Defaults are Qwen3-30B-A3B's MoE shape: hidden 2048, 128 experts, top-8.
    p.add_argument("--tokens-per-rank", type=int, default=4096, help="tokens on each rank (default 4096)")
    p.add_argument("--hidden", type=int, default=2048, help="hidden size (default 2048, Qwen3-30B-A3B)")
    p.add_argument("--topk", type=int, default=8, help="experts per token (default 8)")
    p.add_argument("--experts", type=int, default=128, help="routed experts, a multiple of the world size (default 128)")
    p.add_argument("--backend", default="nccl", choices=("nccl", "deepep"),
                   help="nccl = torch all_to_all_single (gloo with --device cpu); deepep = deep_ep.Buffer (GPU)")
    p.add_argument("--span", action="append", type=parse_span, default=None, metavar=SPAN_FORMAT,
                   help="measure the model's shape inside the run's EP groups instead of over every rank: SIZE "
                   "ranks STRIDE apart in blocks of SIZE x STRIDE, tiling the COUNT ranks from rank FIRST "
                   "(default: from 0 to the end; a disaggregated rollout pool starts after the training "
                   "ranks); TP: each routed expert's tokens go to TP ranks, so the groups see top-k and "
                   "experts times TP (Megatron's DeepEP group with expert TP). Training: Megatron's "
                   "expert groups; rollout: SGLang's inside an engine. Repeat for each group; rows say "
                   "purpose=NAME")
    p.add_argument("--acceptance", action="store_true",
                   help="also measure DeepEP's published shape (hidden 7168, 256 experts, top-8, 4096 tokens/rank)")
    p.add_argument("--no-tune", action="store_true",
                   help="with --acceptance and DeepEP: skip DeepEP's chunk-size sweep (the published figures are "
                   "its best lines) and use the recommended configs")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="ranks on one node, for the RDMA/NVLink split (default: torchrun's LOCAL_WORLD_SIZE)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations (default 5)")
    p.add_argument("--dtype", default=None, help="row dtype (default bfloat16 on GPU, float32 on CPU)")
    p.add_argument("--seed", type=int, default=0, help="router seed, the same on every rank (default 0)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda = NCCL (default); cpu = gloo")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Expert-parallel dispatch/combine: correctness check, then step time and DeepEP-accounted bandwidth."""
    p = argparse.ArgumentParser(prog="rltrainer bench ep", description=main.__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    return run_main(args, out or sys.stdout, err or sys.stderr)


def run_main(args: argparse.Namespace, out: TextIO, err: TextIO, dispatcher_factory=None) -> int:
    if args.iters < 1 or args.warmup < 0:
        print("rltrainer bench ep: --iters must be >= 1 and --warmup >= 0", file=err)
        return 2
    if args.dtype is not None:
        try:
            torch_dtype(args.dtype)
        except ValueError as exc:
            print(f"rltrainer bench ep: {exc}", file=err)
            return 2
    ctx = init_distributed(args.device)
    try:
        return run(args, ctx, out, err, dispatcher_factory=dispatcher_factory)
    finally:
        shutdown()

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

from .common import DistContext, emit, import_torch, init_distributed, shutdown, sig, timed, torch_dtype

PER_EXPERT_COPY = "per_expert_copy"  # one row per (token, expert): Megatron alltoall
PER_TOKEN = "per_token"  # one row per (token, destination rank): DeepEP

BF16_BYTES = 2  # DeepEP's test counts bf16 rows (``hidden * 2``)


@dataclass(frozen=True)
class EPShape:
    tokens_per_rank: int
    hidden: int
    topk: int
    experts: int

    def validate(self, world_size: int) -> list[str]:
        problems = []
        for name in ("tokens_per_rank", "hidden", "topk", "experts"):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be >= 1")
        if self.experts % world_size:
            problems.append(f"--experts {self.experts} must be a multiple of the world size {world_size} "
                            "(each rank owns experts / world_size experts)")
        if self.topk > self.experts:
            problems.append(f"--topk {self.topk} cannot exceed --experts {self.experts} (experts per token are distinct)")
        return problems


# The shape of DeepEP's own benchmark and of the published DeepEP-over-EFA figures
# (tests/test_internode.py argparse defaults at 567632d: --num-tokens 4096, --hidden 7168,
# --num-topk 8, --num-experts 256).
PUBLISHED_SHAPE = EPShape(tokens_per_rank=4096, hidden=7168, topk=8, experts=256)


# ------------------------------------------------------------ DeepEP byte accounting


def rdma_tokens_sent(topk_idx, experts: int, num_nodes: int) -> int:
    """(token, destination node) pairs: DeepEP's ``num_rdma_token_sent`` for this rank.

    A node owns experts ``[n * experts / num_nodes, (n + 1) * experts / num_nodes)``; a
    token counts once per node that owns at least one of its experts (the sender's own
    node included); ``-1`` (no expert) counts nowhere.
    """
    torch, _ = import_torch()
    per_node = experts // num_nodes
    node = torch.where(topk_idx >= 0, topk_idx // per_node, torch.full_like(topk_idx, num_nodes))
    hits = torch.zeros(topk_idx.shape[0], num_nodes + 1, dtype=torch.bool, device=topk_idx.device)
    hits.scatter_(1, node, True)
    return int(hits[:, :num_nodes].sum().item())


def tokens_per_rank(topk_idx, experts: int, world_size: int):
    """[world_size] tokens this rank sends to each rank (a token counts once per rank)."""
    torch, _ = import_torch()
    per_rank = experts // world_size
    owner = torch.where(topk_idx >= 0, topk_idx // per_rank, torch.full_like(topk_idx, world_size))
    hits = torch.zeros(topk_idx.shape[0], world_size + 1, dtype=torch.bool, device=topk_idx.device)
    hits.scatter_(1, owner, True)
    return hits[:, :world_size].sum(dim=0).to(torch.int64)


@dataclass(frozen=True)
class DeepEPBytes:
    """Bytes DeepEP's test counts for one rank (dispatch; combine moves the same back)."""

    rdma: int  # dispatch_bf16_rdma_send_bytes
    nvl: int  # dispatch_bf16_nvl_recv_bytes


def deepep_bytes(ctx: DistContext, shape: EPShape, topk_idx, ranks_per_node: int) -> DeepEPBytes:
    """This rank's RDMA send and NVLink receive bytes, as DeepEP's test_internode counts them."""
    num_nodes = ctx.world_size // ranks_per_node
    rdma = rdma_tokens_sent(topk_idx, shape.experts, num_nodes) * shape.hidden * BF16_BYTES
    import torch.distributed as dist

    # Rows this rank receives = every rank's token count towards it (DeepEP: recv_x.size(0),
    # which its test asserts equals the all-reduced num_tokens_per_rank[rank]).
    counts = tokens_per_rank(topk_idx, shape.experts, ctx.world_size).to(ctx.device)
    dist.all_reduce(counts)
    nvl = int(counts[ctx.rank].item()) * shape.hidden * BF16_BYTES
    return DeepEPBytes(rdma=rdma, nvl=nvl)


def expert_scale(expert_ids, experts: int):
    """The known 'expert': expert e multiplies its input by 1 + (e + 1) / experts."""
    return 1.0 + (expert_ids.double() + 1.0) / experts


def make_tokens(shape: EPShape, src_rank: int, seed: int, dtype, device):
    """Rank ``src_rank``'s tokens and routing, reproducible on any rank from the seed."""
    torch, _ = import_torch()
    g = torch.Generator(device="cpu")
    g.manual_seed(seed * 1_000_003 + src_rank)
    x = torch.randn(shape.tokens_per_rank, shape.hidden, generator=g, dtype=torch.float32)
    # topk distinct experts per token: the k largest of uniform scores.
    scores = torch.rand(shape.tokens_per_rank, shape.experts, generator=g)
    topk_idx = scores.topk(shape.topk, dim=1).indices.to(torch.int64)
    logits = torch.randn(shape.tokens_per_rank, shape.topk, generator=g)
    topk_w = torch.softmax(logits, dim=1).to(torch.float32)
    return x.to(dtype).to(device), topk_idx.to(device), topk_w.to(device)


@dataclass
class DispatchOutput:
    recv_x: Any  # rows this rank received, [R, hidden]
    handle: Any  # whatever combine needs to send the rows back
    recv_expert: Any = None  # PER_EXPERT_COPY: global expert id of each row, [R]
    recv_topk_idx: Any = None  # PER_TOKEN: local expert index per (row, k), -1 if not local, [R, topk]
    recv_topk_w: Any = None  # PER_TOKEN: router weight per (row, k), [R, topk]


class AllToAllDispatcher:
    """Megatron-style all-to-all dispatch/combine over torch.distributed."""

    layout = PER_EXPERT_COPY

    def __init__(self, ctx: DistContext, shape: EPShape, group: Any = None):
        self.ctx = ctx
        self.shape = shape
        self.group = group
        self.experts_per_rank = shape.experts // ctx.world_size

    @property
    def name(self) -> str:
        return self.ctx.backend  # the transport that carried the all-to-all: nccl or gloo

    def owner_of(self, expert_ids):
        """Rank that holds each expert (contiguous blocks, as Megatron places them)."""
        return expert_ids // self.experts_per_rank

    def dispatch(self, x, topk_idx, topk_w) -> DispatchOutput:
        torch, dist = import_torch()
        w, e_total = self.ctx.world_size, self.shape.experts
        k = topk_idx.shape[1]
        flat_e = topk_idx.reshape(-1)
        owner = self.owner_of(flat_e)
        key = owner * e_total + flat_e
        # Stable sort keeps token order inside each (destination, expert) group.
        order = torch.sort(key, stable=True).indices
        counts = torch.bincount(key, minlength=w * e_total)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)  # W equal chunks of E counts
        send_splits = torch.bincount(owner, minlength=w).tolist()
        recv_counts = recv_counts.view(w, e_total)
        recv_splits = recv_counts.sum(dim=1).tolist()
        send = x.index_select(0, order // k)
        recv = x.new_empty((sum(recv_splits), x.shape[1]))
        dist.all_to_all_single(recv, send, recv_splits, send_splits, group=self.group)
        experts = torch.arange(e_total, device=x.device).repeat(w)
        recv_expert = torch.repeat_interleave(experts, recv_counts.reshape(-1))
        return DispatchOutput(recv_x=recv, handle=(order, send_splits, recv_splits), recv_expert=recv_expert)

    def dispatch_cached(self, x, out: DispatchOutput):
        """Only the data movement of a dispatch whose layout and counts are known (``out``)."""
        _, dist = import_torch()
        order, send_splits, recv_splits = out.handle
        send = x.index_select(0, order // self.shape.topk)
        recv = x.new_empty((sum(recv_splits), x.shape[1]))
        dist.all_to_all_single(recv, send, recv_splits, send_splits, group=self.group)
        return recv

    def expert_forward(self, out: DispatchOutput):
        scale = expert_scale(out.recv_expert, self.shape.experts).to(out.recv_x.dtype)
        return out.recv_x * scale.unsqueeze(1)

    def combine(self, expert_out, handle, topk_idx, topk_w):
        torch, dist = import_torch()
        order, send_splits, recv_splits = handle
        k = topk_idx.shape[1]
        back = expert_out.new_empty((sum(send_splits), expert_out.shape[1]))
        dist.all_to_all_single(back, expert_out, send_splits, recv_splits, group=self.group)
        weights = topk_w.reshape(-1).index_select(0, order).to(torch.float32)
        y = torch.zeros(topk_idx.shape[0], expert_out.shape[1], dtype=torch.float32, device=expert_out.device)
        y.index_add_(0, order // k, back.to(torch.float32) * weights.unsqueeze(1))
        return y


class DeepEPDispatcher:
    """DeepEP normal-mode dispatch/combine (``deep_ep.Buffer``), GPU only.

    Written against DeepEP's documented normal-mode API (deepseek-ai/DeepEP README,
    "Example use in model training or inference prefilling": ``get_dispatch_layout``,
    ``dispatch``, ``combine``; buffer sizes from ``Buffer.get_dispatch_config`` /
    ``get_combine_config`` hints). The EFA builds in the image keep this Python API; it
    cannot be exercised without GPUs and EFA, so run it on the cluster.
    """

    layout = PER_TOKEN
    name = "deepep"

    # Kernel names DeepEP's test profiles (bench_kineto(..., ('dispatch', 'notify'))).
    kernel_names = {"dispatch": "dispatch", "combine": "combine"}

    def __init__(self, ctx: DistContext, shape: EPShape, group: Any = None, allow_cpu: bool = False,
                 buffer: Any = None, max_hidden: int | None = None):
        """``buffer``: reuse another dispatcher's ``deep_ep.Buffer`` (NVSHMEM initialises once per
        process); ``max_hidden``: size a new buffer for the widest shape it will carry."""
        try:
            import deep_ep
        except ImportError as exc:
            raise SystemExit(
                f"rltrainer bench ep --backend deepep: the deep_ep module is not importable ({exc}). "
                "This image was built with EP_BACKEND=nccl; rebuild with --build-arg EP_BACKEND=deepep-nvshmem "
                "or deepep-gin, or benchmark the all-to-all path with --backend nccl."
            ) from None
        if not ctx.is_cuda and not allow_cpu:  # allow_cpu: the tests' stand-in deep_ep runs on gloo
            raise SystemExit("rltrainer bench ep --backend deepep needs GPUs; drop --device cpu")
        import torch.distributed as dist

        self.ctx = ctx
        self.shape = shape
        self.group = group or dist.group.WORLD
        self.experts_per_rank = shape.experts // ctx.world_size
        self.deep_ep = deep_ep
        self.dispatch_config = deep_ep.Buffer.get_dispatch_config(ctx.world_size)
        self.combine_config = deep_ep.Buffer.get_combine_config(ctx.world_size)
        if buffer is not None:
            self.buffer = buffer
            return
        hidden_bytes = max(shape.hidden, max_hidden or 0) * 2  # bf16 rows
        nvl, rdma = 0, 0
        for config in (deep_ep.Buffer.get_dispatch_config(ctx.world_size), deep_ep.Buffer.get_combine_config(ctx.world_size),
                       self._tuning_config(deep_ep, 4, 4)):
            nvl = max(nvl, config.get_nvl_buffer_size_hint(hidden_bytes, ctx.world_size))
            rdma = max(rdma, config.get_rdma_buffer_size_hint(hidden_bytes, ctx.world_size))
        self.buffer = deep_ep.Buffer(self.group, nvl, rdma)

    # DeepEP's tests/test_internode.py tunes before it reports, and the published figures are its
    # "Best" lines: 24 SMs, NVL buffer 512 chunks (720 at 24/48/96/144/160 ranks), RDMA buffer 128;
    # dispatch NVL chunk 4..44 x RDMA chunk 4..32 (steps of 4); combine NVL chunk 1..7 x RDMA chunk
    # 12 (2 nodes) or 8 .. 32 (steps of 4).
    TUNE_SMS = 24
    DISPATCH_NVL_CHUNKS = range(4, 45, 4)
    DISPATCH_RDMA_CHUNKS = range(4, 33, 4)
    COMBINE_NVL_CHUNKS = range(1, 8)

    def _tuning_config(self, deep_ep, nvl_chunk: int, rdma_chunk: int):
        nvl_buffer = 720 if self.ctx.world_size in (24, 48, 96, 144, 160) else 512
        return deep_ep.Config(self.TUNE_SMS, nvl_chunk, nvl_buffer, rdma_chunk, 128)

    def tune(self, x, out: DispatchOutput, expert_out, seconds, ranks_per_node: int) -> None:
        """Pick dispatch and combine configs as DeepEP's test does; ``seconds(fn, direction)``
        times one candidate on every rank. Rank 0's choice is used everywhere (DeepEP's test
        shares rank 0's too), so every rank runs the same kernels afterwards."""
        torch, dist = import_torch()
        combine_rdma = range(12 if self.ctx.world_size // ranks_per_node == 2 else 8, 33, 4)
        best = []
        for direction, nvl_chunks, rdma_chunks in (("dispatch", self.DISPATCH_NVL_CHUNKS, self.DISPATCH_RDMA_CHUNKS),
                                                   ("combine", self.COMBINE_NVL_CHUNKS, combine_rdma)):
            best_time, best_pair = float("inf"), None
            for nvl_chunk in nvl_chunks:
                for rdma_chunk in rdma_chunks:
                    config = self._tuning_config(self.deep_ep, nvl_chunk, rdma_chunk)
                    if direction == "dispatch":
                        fn = lambda c=config: self.buffer.dispatch(x, handle=out.handle, config=c)  # noqa: E731
                    else:
                        fn = lambda c=config: self.buffer.combine(expert_out, out.handle, config=c)  # noqa: E731
                    t = seconds(fn, direction)
                    if t < best_time:
                        best_time, best_pair = t, (nvl_chunk, rdma_chunk)
            best += list(best_pair)
        choice = torch.tensor(best, dtype=torch.int64, device=self.ctx.device)
        dist.broadcast(choice, src=0, group=self.group)
        d_nvl, d_rdma, c_nvl, c_rdma = choice.tolist()
        self.dispatch_config = self._tuning_config(self.deep_ep, d_nvl, d_rdma)
        self.combine_config = self._tuning_config(self.deep_ep, c_nvl, c_rdma)
        self.tuned = {"dispatch": (d_nvl, d_rdma), "combine": (c_nvl, c_rdma)}

    def dispatch(self, x, topk_idx, topk_w) -> DispatchOutput:
        per_rank, per_rdma_rank, per_expert, in_rank, _ = self.buffer.get_dispatch_layout(topk_idx, self.shape.experts)
        recv_x, recv_idx, recv_w, _counts, handle, _ = self.buffer.dispatch(
            x,
            topk_idx=topk_idx,
            topk_weights=topk_w,
            num_tokens_per_rank=per_rank,
            num_tokens_per_rdma_rank=per_rdma_rank,
            is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert,
            config=self.dispatch_config,
        )
        return DispatchOutput(recv_x=recv_x, handle=handle, recv_topk_idx=recv_idx, recv_topk_w=recv_w)

    def dispatch_cached(self, x, out: DispatchOutput):
        """DeepEP's cached dispatch (``handle=``): no layout, no count exchange."""
        recv_x, _, _, _, _, _ = self.buffer.dispatch(x, handle=out.handle, config=self.dispatch_config)
        return recv_x

    def expert_forward(self, out: DispatchOutput):
        torch, _ = import_torch()
        first = self.ctx.rank * self.experts_per_rank
        local = out.recv_topk_idx
        valid = (local >= 0).to(torch.float32)
        scale = expert_scale(local.clamp(min=0) + first, self.shape.experts).to(torch.float32)
        factor = (valid * scale * out.recv_topk_w.to(torch.float32)).sum(dim=1, keepdim=True)
        return (out.recv_x.to(torch.float32) * factor).to(out.recv_x.dtype)

    def combine(self, expert_out, handle, topk_idx, topk_w):
        torch, _ = import_torch()
        # The router weights were applied on the expert side (expert_forward), so combine
        # only sums each token's rows from the ranks it went to.
        combined, _, _ = self.buffer.combine(expert_out, handle, config=self.combine_config)
        return combined.to(torch.float32)


# ----------------------------------------------------------------------------- checks


def _rows_expected_here(ctx: DistContext, shape: EPShape, seed: int, dtype, layout: str):
    """Rows this rank must receive, in the canonical order of ``layout``, with labels."""
    torch, _ = import_torch()
    epr = shape.experts // ctx.world_size
    rows, labels = [], []
    for src in range(ctx.world_size):
        x, idx, _w = make_tokens(shape, src, seed, dtype, ctx.device)
        owner = idx // epr
        if layout == PER_EXPERT_COPY:
            flat_e = idx.reshape(-1)
            mine = (owner.reshape(-1) == ctx.rank).nonzero().squeeze(1)
            # canonical order: by expert, then token, then k (what a stable sort by expert gives)
            mine = mine[torch.sort(flat_e[mine], stable=True).indices]
            tokens = mine // shape.topk
            rows.append(x.index_select(0, tokens))
            labels += [(src, int(t), int(flat_e[p])) for t, p in zip(tokens.tolist(), mine.tolist())]
        else:
            tokens = (owner == ctx.rank).any(dim=1).nonzero().squeeze(1)
            rows.append(x.index_select(0, tokens))
            labels += [(src, int(t), None) for t in tokens.tolist()]
    return torch.cat(rows, dim=0), labels


def check_dispatch(ctx: DistContext, shape: EPShape, seed: int, dtype, layout: str, out: DispatchOutput) -> str | None:
    """None if this rank received exactly the rows routed to its experts, else why not."""
    torch, _ = import_torch()
    expected, labels = _rows_expected_here(ctx, shape, seed, dtype, layout)
    got = out.recv_x
    epr = shape.experts // ctx.world_size
    lo, hi = ctx.rank * epr, (ctx.rank + 1) * epr - 1
    if got.shape[0] != expected.shape[0] or (got.dim() == 2 and got.shape[1] != expected.shape[1]):
        return (f"dispatch check failed on rank {ctx.rank}: received {got.shape[0]} rows, expected {expected.shape[0]} "
                f"(every (token, expert) pair routed to experts {lo}..{hi}, which this rank owns)"
                if layout == PER_EXPERT_COPY else
                f"dispatch check failed on rank {ctx.rank}: received {got.shape[0]} tokens, expected {expected.shape[0]} "
                f"(every token with at least one of experts {lo}..{hi}, which this rank owns)")
    if layout == PER_EXPERT_COPY:
        same = (got == expected).all(dim=1)
        if not bool(same.all()):
            i = int((~same).nonzero()[0].item())
            src, tok, exp = labels[i]
            return (f"dispatch check failed on rank {ctx.rank}: received row {i} is not token {tok} of rank {src} "
                    f"routed to expert {exp}; {int((~same).sum().item())} of {got.shape[0]} rows are misplaced "
                    "(wrong split or ordering)")
        return None
    # DeepEP does not promise an order across source ranks and channels: compare the
    # multiset of rows through a fixed random projection, sorted.
    g = torch.Generator(device="cpu")
    g.manual_seed(12345)
    probe = torch.randn(expected.shape[1], 1, generator=g, dtype=torch.float64).to(ctx.device)
    a = torch.sort((got.double() @ probe).squeeze(1)).values
    b = torch.sort((expected.double() @ probe).squeeze(1)).values
    if not torch.allclose(a, b, rtol=1e-6, atol=1e-6):
        return f"dispatch check failed on rank {ctx.rank}: the received tokens are not the tokens routed to experts {lo}..{hi}"
    return None


def check_combine(ctx: DistContext, shape: EPShape, seed: int, dtype, y) -> str | None:
    """None if combine returned sum_k w x scale(expert) x token for every local token."""
    torch, _ = import_torch()
    x, idx, w = make_tokens(shape, ctx.rank, seed, dtype, ctx.device)
    factor = (w.double() * expert_scale(idx, shape.experts)).sum(dim=1, keepdim=True)
    ref = x.double() * factor
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    close = torch.isclose(y.double(), ref, rtol=tol, atol=tol)
    if not bool(close.all()):
        bad = (~close).nonzero()[0].tolist()
        t, h = bad
        return (f"combine check failed on rank {ctx.rank}: token {t}, element {h} is {float(y[t, h]):.6g}, "
                f"expected {float(ref[t, h]):.6g} = sum over its {shape.topk} experts of weight x expert scale x input "
                f"({int((~close).any(dim=1).sum().item())} of {shape.tokens_per_rank} tokens wrong)")
    return None


# -------------------------------------------------------------------------- benchmark


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
                ranks_per_node: int | None = None) -> list[dict]:
    """The two JSON rows (dispatch, combine) for one benchmark result."""
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
            "ranks_per_node": ranks_per_node or world_size,
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


def make_dispatcher(backend: str, ctx: DistContext, shape: EPShape, *, previous: Any = None,
                    max_hidden: int | None = None):
    """``previous``: the dispatcher of an earlier shape in this process (DeepEP reuses its buffer)."""
    if backend == "nccl":
        return AllToAllDispatcher(ctx, shape)
    if backend == "deepep":
        return DeepEPDispatcher(ctx, shape, buffer=getattr(previous, "buffer", None), max_hidden=max_hidden)
    raise SystemExit(f"rltrainer bench ep: unknown --backend {backend!r}; use nccl or deepep")


def _ranks_per_node(args: argparse.Namespace, ctx: DistContext) -> int:
    if args.ranks_per_node is not None:
        return args.ranks_per_node
    import os

    return int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))  # torchrun sets it


def run(args: argparse.Namespace, ctx: DistContext, out: TextIO, err: TextIO, dispatcher: Any = None,
        dispatcher_factory=None) -> int:
    model = EPShape(args.tokens_per_rank, args.hidden, args.topk, args.experts)
    shapes = [("model", model)] + ([("acceptance", PUBLISHED_SHAPE)] if args.acceptance else [])
    rpn = _ranks_per_node(args, ctx)
    problems = [p for _, shape in shapes for p in shape.validate(ctx.world_size)]
    if rpn < 1 or ctx.world_size % rpn:
        problems.append(f"--ranks-per-node {rpn} must divide the world size {ctx.world_size}")
    if problems:
        if ctx.rank == 0:
            for p in dict.fromkeys(problems):
                print(f"rltrainer bench ep: {p}", file=err)
        return 2
    dtype = torch_dtype(args.dtype or ("bfloat16" if ctx.is_cuda else "float32"))
    max_hidden = max(shape.hidden for _, shape in shapes)
    disp = None
    ok = True
    for purpose, shape in shapes:
        if dispatcher is not None and purpose == "model":
            disp = dispatcher
        elif dispatcher_factory is not None:
            disp = dispatcher_factory(ctx, shape)
        else:
            disp = make_dispatcher(args.backend, ctx, shape, previous=disp, max_hidden=max_hidden)
        result = run_benchmark(ctx, shape, dispatcher=disp, dtype=dtype, iters=args.iters, warmup=args.warmup,
                               seed=args.seed, ranks_per_node=rpn, tune=purpose == "acceptance" and not args.no_tune)
        if not result.correct and result.message and "another rank" not in result.message:
            print(f"rltrainer bench ep: {result.message}", file=err, flush=True)
        if ctx.rank == 0:
            for row in result_rows(result, shape, disp.name, ctx.world_size, purpose=purpose, ranks_per_node=rpn):
                emit(row, out)
            _print_table(result, shape, disp.name, ctx.world_size, rpn, purpose, err)
        ok = ok and result.correct
        if not result.correct:
            break
    return 0 if ok else 1


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

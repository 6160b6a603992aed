"""The two dispatch/combine implementations ``rltrainer bench ep`` measures: Megatron-style
all-to-all over torch.distributed (``nccl``) and DeepEP's normal kernels (``deepep``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .common import DistContext, import_torch
from .ep_shape import PER_EXPERT_COPY, PER_TOKEN, EPShape, expert_scale


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


def make_dispatcher(backend: str, ctx: DistContext, shape: EPShape, *, previous: Any = None,
                    max_hidden: int | None = None):
    """``previous``: the dispatcher of an earlier shape in this process (DeepEP reuses its buffer)."""
    if backend == "nccl":
        return AllToAllDispatcher(ctx, shape, group=ctx.group)
    if backend == "deepep":
        # A buffer belongs to its process group: reuse it only for the same group (ctx.group None
        # is every rank, the group a DeepEPDispatcher then builds on). A --span subgroup's buffer
        # carried into the every-rank acceptance pass would move rows inside the subgroup only.
        import torch.distributed as dist

        group = ctx.group or dist.group.WORLD
        reuse = isinstance(previous, DeepEPDispatcher) and previous.group is group
        return DeepEPDispatcher(ctx, shape, group=group, buffer=previous.buffer if reuse else None,
                                max_hidden=max_hidden)
    raise SystemExit(f"rltrainer bench ep: unknown --backend {backend!r}; use nccl or deepep")

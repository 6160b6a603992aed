"""A stand-in ``deep_ep`` for CPU tests: DeepEP's Python API, implemented over gloo.

The real module needs GPUs, NVSHMEM and a CUDA extension. This one keeps the signatures of
``deep_ep.Buffer`` at deepseek-ai/DeepEP 567632d (the commit the trainer image builds) --
test_trainer_bench_ep.py parses the pinned ``deep_ep/buffer.py`` and fails on any
difference -- and moves the same rows DeepEP's normal mode moves: one row per
(token, destination rank), the destination's local expert index per top-k slot (-1 when the
expert lives elsewhere), combine summing a token's rows without weights. It proves that
``DeepEPDispatcher`` calls the API the way the pinned source defines it; it says nothing about
DeepEP's kernels or EFA.

``get_dispatch_config`` / ``get_combine_config`` assert on a group size outside the pinned
table, as the pinned code does (``DEEPEP_RANK_COUNTS``, checked against it).

``RETURN_ARITY`` is the number of values each method returns, also checked against the
pinned source's return annotations.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from rltrainer.contract.names import DEEPEP_RANK_COUNTS

topk_idx_t = torch.int64

RETURN_ARITY = {"get_dispatch_layout": 5, "dispatch": 6, "combine": 3}

# How the calls went, for tests to inspect.
CALLS: list[tuple[str, dict]] = []


class Config:
    """deep_ep_cpp.Config: (num_sms, nvl_chunk, nvl_buffer, rdma_chunk, rdma_buffer)."""

    def __init__(self, num_sms: int, nvl_chunk_size: int, nvl_buffer_size: int, rdma_chunk_size: int = 4,
                 rdma_buffer_size: int = 128):
        self.args = (num_sms, nvl_chunk_size, nvl_buffer_size, rdma_chunk_size, rdma_buffer_size)

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return hidden_bytes * num_ranks

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return hidden_bytes * num_ranks


class EventOverlap:
    def __init__(self, event=None, extra_tensors=None) -> None:
        self.event = event
        self.extra_tensors = extra_tensors


class Buffer:
    num_sms: int = 20

    def __init__(self,
                 group: Optional[dist.ProcessGroup],
                 num_nvl_bytes: int = 0,
                 num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True,
                 allow_mnnvl: bool = False,
                 use_fabric: bool = False,
                 explicitly_destroy: bool = False,
                 enable_shrink: bool = False,
                 comm: Optional["mpi4py.MPI.Comm"] = None) -> None:  # noqa: F821
        if group is None:
            raise ValueError("Either 'group' or 'comm' must be provided.")
        self.group = group
        self.rank = group.rank()
        self.group_size = group.size()
        CALLS.append(("__init__", {"num_nvl_bytes": num_nvl_bytes, "num_rdma_bytes": num_rdma_bytes,
                                   "group_size": self.group_size}))

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        # The pinned code's table knows only these group sizes and asserts otherwise
        # (deep_ep/buffer.py:259); test_trainer_bench_ep.py checks the set against it.
        assert num_ranks in DEEPEP_RANK_COUNTS, f'Unsupported number of EP ranks: {num_ranks}'
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        assert num_ranks in DEEPEP_RANK_COUNTS, f'Unsupported number of EP ranks: {num_ranks}'
        return Config(Buffer.num_sms, 4, 256, 6, 128)

    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int,
                            previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                            allocate_on_comm_stream: bool = False) -> \
            Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor, EventOverlap]:
        assert topk_idx.dtype == topk_idx_t
        per_rank = num_experts // self.group_size
        owner = torch.where(topk_idx >= 0, topk_idx // per_rank, torch.full_like(topk_idx, self.group_size))
        in_rank = torch.zeros(topk_idx.shape[0], self.group_size + 1, dtype=torch.bool)
        in_rank.scatter_(1, owner, True)
        in_rank = in_rank[:, :self.group_size]
        per_expert = torch.bincount(topk_idx[topk_idx >= 0], minlength=num_experts).to(torch.int)
        CALLS.append(("get_dispatch_layout", {"num_experts": num_experts}))
        return in_rank.sum(dim=0).to(torch.int), None, per_expert, in_rank, EventOverlap()

    def dispatch(self, x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
                 handle: Optional[Tuple] = None,
                 num_tokens_per_rank: Optional[torch.Tensor] = None, num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,
                 is_token_in_rank: Optional[torch.Tensor] = None, num_tokens_per_expert: Optional[torch.Tensor] = None,
                 topk_idx: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0,
                 config: Optional[Config] = None,
                 previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> \
            Tuple[Union[Tuple[torch.Tensor, torch.Tensor], torch.Tensor], Optional[torch.Tensor],
                  Optional[torch.Tensor], List[int], Tuple, EventOverlap]:
        CALLS.append(("dispatch", {"cached": handle is not None, "config": config.args if config else None}))
        if handle is not None:  # cached mode, as DeepEP: no top-k, reuse the layout
            assert topk_idx is None and topk_weights is None
            order, send_splits, recv_splits, _ = handle
            recv = self._exchange(x.index_select(0, order), send_splits, recv_splits)
            return recv, None, None, None, None, EventOverlap()
        assert num_tokens_per_rank is not None and is_token_in_rank is not None and num_tokens_per_expert is not None
        rows = [is_token_in_rank[:, r].nonzero().squeeze(1) for r in range(self.group_size)]
        order = torch.cat(rows)
        send_splits = [len(r) for r in rows]
        counts = torch.tensor(send_splits, dtype=torch.int64)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)
        recv_splits = recv_counts.tolist()
        recv_x = self._exchange(x.index_select(0, order), send_splits, recv_splits)
        recv_topk_idx = recv_topk_w = None
        per_expert_list: List[int] = []
        if topk_idx is not None:
            per_rank = num_tokens_per_expert.numel() // self.group_size
            dest = torch.cat([torch.full((n,), r, dtype=torch.int64) for r, n in enumerate(send_splits)])
            sent_idx = topk_idx.index_select(0, order)
            local = torch.where(sent_idx // per_rank == dest.unsqueeze(1), sent_idx - dest.unsqueeze(1) * per_rank,
                                torch.full_like(sent_idx, -1))
            sent_w = topk_weights.index_select(0, order) * (local >= 0)
            recv_topk_idx = self._exchange(local, send_splits, recv_splits)
            recv_topk_w = self._exchange(sent_w, send_splits, recv_splits)
            per_expert_list = [int((recv_topk_idx == e).sum()) for e in range(per_rank)]
        handle = (order, send_splits, recv_splits, x.shape[0])
        return recv_x, recv_topk_idx, recv_topk_w, per_expert_list, handle, EventOverlap()

    def combine(self, x: torch.Tensor, handle: Tuple,
                topk_weights: Optional[torch.Tensor] = None,
                bias: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]] = None,
                config: Optional[Config] = None,
                previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False) -> \
            Tuple[torch.Tensor, Optional[torch.Tensor], EventOverlap]:
        CALLS.append(("combine", {"config": config.args if config else None}))
        order, send_splits, recv_splits, num_tokens = handle
        back = self._exchange(x, recv_splits, send_splits)
        out = torch.zeros(num_tokens, x.shape[1], dtype=x.dtype)
        out.index_add_(0, order, back)
        return out, None, EventOverlap()

    def _exchange(self, rows: torch.Tensor, send_splits, recv_splits) -> torch.Tensor:
        recv = rows.new_empty((sum(recv_splits), *rows.shape[1:]))
        dist.all_to_all_single(recv, rows.contiguous(), recv_splits, send_splits, group=self.group)
        return recv

"""The expert-parallel benchmark's problem: its shape, the seeded tokens and routing every rank
can regenerate, and DeepEP's byte accounting (what the published figures count)."""

from __future__ import annotations

from dataclasses import dataclass

from .common import DistContext, import_torch


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
    dist.all_reduce(counts, group=ctx.group)
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

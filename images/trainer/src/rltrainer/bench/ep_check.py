"""Correctness of one dispatch and one combine, against a reference every rank computes from
the seed."""

from __future__ import annotations

from .common import DistContext, import_torch
from .ep_dispatch import DispatchOutput
from .ep_shape import PER_EXPERT_COPY, EPShape, expert_scale, make_tokens


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

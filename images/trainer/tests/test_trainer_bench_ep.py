"""``rltrainer bench ep``: real gloo all-to-all runs, a correct and two broken dispatchers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer_helpers import broken_split_ep_worker, cli_worker, json_lines, run_ranks, unweighted_combine_ep_worker
from rltrainer.bench.ep import EPShape, expert_scale, make_tokens

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")

EP_KEYS = ["kind", "backend", "direction", "tokens_per_rank", "hidden", "topk", "experts", "time_us", "GBps",
           "world_size", "correct"]
SMALL = ["--tokens-per-rank", "48", "--hidden", "16", "--topk", "3", "--experts", "8", "--iters", "2", "--warmup", "1",
         "--device", "cpu"]


@pytest.mark.parametrize("world", [2, 4])
def test_all_to_all_dispatch_and_combine_are_correct_and_timed(tmp_path: Path, world: int):
    ranks = run_ranks(cli_worker, world, tmp_path, ["ep", "--backend", "nccl", *SMALL])
    assert [r["rc"] for r in ranks] == [0] * world, ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    assert [row["direction"] for row in rows] == ["dispatch", "combine"]
    for row in rows:
        assert list(row) == EP_KEYS
        assert row["kind"] == "ep"
        assert row["backend"] == "gloo"  # the transport that carried the all-to-all on CPUs
        assert (row["tokens_per_rank"], row["hidden"], row["topk"], row["experts"]) == (48, 16, 3, 8)
        assert row["world_size"] == world
        assert row["correct"] is True
        assert row["time_us"] > 0 and row["GBps"] > 0


def test_wrong_expert_split_is_caught_before_timing(tmp_path: Path):
    """Dispatch that puts expert boundaries one expert off: rows land on the wrong rank."""
    ranks = run_ranks(broken_split_ep_worker, 2, tmp_path, SMALL)
    assert [r["rc"] for r in ranks] == [1, 1]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["direction"], r["correct"], r["time_us"], r["GBps"]) for r in rows] == [
        ("dispatch", False, None, None),
        ("combine", False, None, None),
    ]
    # Each rank names the first row that is not where the router sent it (or the row count).
    for rank, record in enumerate(ranks):
        assert re.search(
            rf"dispatch check failed on rank {rank}: (received row \d+ is not token \d+ of rank \d routed to expert \d+; "
            rf"\d+ of \d+ rows are misplaced \(wrong split or ordering\)|received \d+ rows, expected \d+ \(every)",
            record["stderr"],
        ), record["stderr"]
    assert "correctness check FAILED; no timings reported" in ranks[0]["stderr"]


def test_combine_without_router_weights_is_caught(tmp_path: Path):
    ranks = run_ranks(unweighted_combine_ep_worker, 2, tmp_path, SMALL)
    assert [r["rc"] for r in ranks] == [1, 1]
    assert "combine check failed on rank 0: token 0, element 0" in ranks[0]["stderr"]
    assert "= sum over its 3 experts of weight x expert scale x input (48 of 48 tokens wrong)" in ranks[0]["stderr"]


def test_deepep_dispatcher_error_message(monkeypatch):
    import builtins

    from rltrainer.bench.common import DistContext
    from rltrainer.bench.ep import DeepEPDispatcher

    real_import = builtins.__import__

    def no_deep_ep(name, *a, **kw):
        if name == "deep_ep":
            raise ImportError("No module named 'deep_ep'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_deep_ep)
    import torch

    ctx = DistContext(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"), backend="gloo")
    with pytest.raises(SystemExit) as exc:
        DeepEPDispatcher(ctx, EPShape(8, 8, 2, 8))
    assert str(exc.value) == (
        "rltrainer bench ep --backend deepep: the deep_ep module is not importable (No module named 'deep_ep'). "
        "This image was built with EP_BACKEND=none; rebuild with --build-arg EP_BACKEND=deepep-nvshmem or deepep-gin, "
        "or benchmark the all-to-all path with --backend nccl."
    )


def test_routing_is_reproducible_and_topk_distinct():
    import torch

    shape = EPShape(tokens_per_rank=32, hidden=4, topk=4, experts=16)
    a = make_tokens(shape, src_rank=3, seed=7, dtype=torch.float32, device="cpu")
    b = make_tokens(shape, src_rank=3, seed=7, dtype=torch.float32, device="cpu")
    c = make_tokens(shape, src_rank=2, seed=7, dtype=torch.float32, device="cpu")
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0])
    idx = a[1]
    assert all(len(set(row.tolist())) == shape.topk for row in idx)
    assert torch.allclose(a[2].sum(dim=1), torch.ones(32))
    # every expert has its own scale, so a row sent to the wrong expert changes the result
    assert len(set(expert_scale(torch.arange(16), 16).tolist())) == 16


def test_shape_rules():
    assert EPShape(8, 8, 2, 6).validate(4) == [
        "--experts 6 must be a multiple of the world size 4 (each rank owns experts / world_size experts)"
    ]
    assert EPShape(8, 8, 9, 8).validate(2) == ["--topk 9 cannot exceed --experts 8 (experts per token are distinct)"]

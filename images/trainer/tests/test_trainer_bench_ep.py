"""``rltrainer bench ep``: real gloo all-to-all runs, a correct and two broken dispatchers,
DeepEP's byte accounting against an independent implementation, and the DeepEP code path
against a stand-in whose signatures are checked against the pinned DeepEP source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainer_helpers import (STANDIN, pinned_source, broken_split_ep_worker, cli_worker, json_lines, run_ranks,
                             small_acceptance_worker, standin_deepep_worker, standin_make_dispatcher_worker,
                             unweighted_combine_ep_worker)
from rltrainer.bench.ep import PUBLISHED_SHAPE, EPShape, expert_scale, make_tokens, rdma_tokens_sent, tokens_per_rank

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")

EP_KEYS = ["kind", "purpose", "backend", "direction", "tokens_per_rank", "hidden", "topk", "experts", "world_size",
           "ranks_per_node", "ep_size", "ep_stride", "ep_nodes", "ep_first", "ep_pool", "ep_tp", "step_time_us", "time_us", "timing", "rdma_bytes", "nvl_bytes", "rdma_GBps", "nvl_GBps",
           "correct"]
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
        assert row["step_time_us"] > 0 and row["time_us"] > 0 and row["timing"] == "wall"
        assert row["rdma_GBps"] > 0 and row["nvl_GBps"] > 0


def test_wrong_expert_split_is_caught_before_timing(tmp_path: Path):
    """Dispatch that puts expert boundaries one expert off: rows land on the wrong rank."""
    ranks = run_ranks(broken_split_ep_worker, 2, tmp_path, SMALL)
    assert [r["rc"] for r in ranks] == [1, 1]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["direction"], r["correct"], r["time_us"], r["rdma_GBps"]) for r in rows] == [
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
        "This image was built with EP_BACKEND=nccl; rebuild with --build-arg EP_BACKEND=deepep-nvshmem or deepep-gin, "
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


# --- DeepEP's byte accounting ---------------------------------------------------------------------
#
# Written from reading deepseek-ai/DeepEP tests/test_internode.py at 567632d, with plain Python
# loops and no code shared with rltrainer: a node owns experts [n * E/N, (n+1) * E/N) (``rdma_idx =
# topk_idx // (num_experts // num_nodes)``, made unique per token, ``-1`` ignored, summed: the
# sender's own node counts); a rank receives one row per token that has at least one expert on it
# (``recv_x.numel()``); both times ``hidden * 2`` (bf16). Combine moves the same bytes back.


def reference_rdma_bytes(topk: list[list[int]], experts: int, nodes: int, hidden: int) -> int:
    per_node = experts // nodes
    pairs = 0
    for row in topk:
        pairs += len({e // per_node for e in row if e >= 0})
    return pairs * hidden * 2


def reference_nvl_recv_bytes(topk_by_rank: list[list[list[int]]], experts: int, rank: int, hidden: int) -> int:
    ranks = len(topk_by_rank)
    per_rank = experts // ranks
    received = 0
    for rows in topk_by_rank:
        for row in rows:
            if any(e >= 0 and e // per_rank == rank for e in row):
                received += 1
    return received * hidden * 2


FIXED_ROUTING = [  # 4 ranks on 2 nodes, 16 experts: 4 per rank, 8 per node; -1 = no expert
    [0, 1, 2, 3],       # all on rank 0 (node 0): 1 node, 1 rank
    [0, 4, 8, 12],      # ranks 0,1,2,3: both nodes, 4 ranks
    [8, 9, -1, -1],     # rank 2 only (node 1)
    [15, 7, 6, 14],     # ranks 3,1 / nodes 1,0
    [-1, -1, -1, -1],   # nowhere
]


def test_rdma_accounting_matches_the_independent_formula_on_fixed_routing():
    import torch

    idx = torch.tensor(FIXED_ROUTING, dtype=torch.int64)
    # by hand: 1 + 2 + 1 + 2 + 0 (token, node) pairs
    assert reference_rdma_bytes(FIXED_ROUTING, 16, 2, hidden=7) == 6 * 7 * 2
    assert rdma_tokens_sent(idx, experts=16, num_nodes=2) * 7 * 2 == reference_rdma_bytes(FIXED_ROUTING, 16, 2, 7)
    # one node: every routed token is one (token, node) pair
    assert rdma_tokens_sent(idx, experts=16, num_nodes=1) == 4
    assert tokens_per_rank(idx, experts=16, world_size=4).tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize("world, per_node", [(16, 8), (32, 8), (4, 2)])
def test_rdma_accounting_matches_on_random_routing_at_the_published_shape(world, per_node):
    import torch

    shape = EPShape(256, 7168, 8, 256)  # the published hidden/experts/top-k, fewer tokens: CPU time
    _, idx, _ = make_tokens(shape, src_rank=1, seed=3, dtype=torch.float32, device="cpu")
    nodes = world // per_node
    assert rdma_tokens_sent(idx, 256, nodes) * 7168 * 2 == reference_rdma_bytes(idx.tolist(), 256, nodes, 7168)


@pytest.mark.external
def test_published_shape_is_deepeps_test_defaults():
    src = _pinned_source("tests/test_internode.py")
    defaults = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flag = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            for kw in node.keywords:
                if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                    defaults[flag] = kw.value.value
    assert (defaults["--num-tokens"], defaults["--hidden"], defaults["--num-topk"], defaults["--num-experts"]) == (
        PUBLISHED_SHAPE.tokens_per_rank, PUBLISHED_SHAPE.hidden, PUBLISHED_SHAPE.topk, PUBLISHED_SHAPE.experts)
    # and the byte formulas this file's reference implements are still the ones the test uses
    assert "num_rdma_token_sent * hidden * 2" in src and "recv_x.numel() * 2" in src
    assert "rdma_idx = topk_idx // (num_experts // num_nodes)" in src


def test_benchmark_rows_carry_deepeps_bytes_for_rank_0(tmp_path: Path):
    """4 gloo ranks as 2 nodes of 2: rank 0's RDMA and NVLink bytes equal the reference."""
    import torch

    argv = ["--tokens-per-rank", "48", "--hidden", "16", "--topk", "3", "--experts", "8", "--iters", "2", "--warmup",
            "1", "--device", "cpu", "--ranks-per-node", "2"]
    ranks = run_ranks(cli_worker, 4, tmp_path, ["ep", *argv])
    assert [r["rc"] for r in ranks] == [0] * 4, ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    shape = EPShape(48, 16, 3, 8)
    topk = [make_tokens(shape, r, 0, torch.float32, "cpu")[1].tolist() for r in range(4)]
    for row in rows:
        assert row["ranks_per_node"] == 2
        assert row["rdma_bytes"] == reference_rdma_bytes(topk[0], 8, 2, 16)
        assert row["nvl_bytes"] == reference_nvl_recv_bytes(topk, 8, 0, 16)
        assert row["rdma_GBps"] == pytest.approx(row["rdma_bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-3)


def test_ranks_per_node_must_divide_the_world(tmp_path: Path):
    ranks = run_ranks(cli_worker, 2, tmp_path, ["ep", *SMALL, "--ranks-per-node", "3"])
    assert [r["rc"] for r in ranks] == [2, 2]
    assert "rltrainer bench ep: --ranks-per-node 3 must divide the world size 2" in ranks[0]["stderr"]


def test_acceptance_adds_the_published_shape_after_the_model_shape(tmp_path: Path):
    ranks = run_ranks(small_acceptance_worker, 2, tmp_path, [*SMALL, "--acceptance"], [32, 24, 2, 4])
    assert [r["rc"] for r in ranks] == [0, 0], ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["purpose"], r["direction"], r["hidden"]) for r in rows] == [
        ("model", "dispatch", 16), ("model", "combine", 16), ("acceptance", "dispatch", 24), ("acceptance", "combine", 24)]


# --- the DeepEP code path, against the pinned API -------------------------------------------------

def _pinned_source(rel: str) -> str:
    return pinned_source("deepep-567632d", rel, "DeepEP")


def _methods(tree: ast.Module, cls: str) -> dict[str, ast.FunctionDef]:
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}


def _signature(fn: ast.FunctionDef) -> list[tuple[str, str | None]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    sig = [(arg.arg, d) for arg, d in zip(positional, defaults)]
    sig += [(f"*{a.kwonlyargs[i].arg}", ast.unparse(d) if d else None) for i, d in enumerate(a.kw_defaults)]
    decorators = [ast.unparse(d) for d in fn.decorator_list]
    return [("@", ",".join(decorators))] + sig


def _return_arity(fn: ast.FunctionDef) -> int:
    ann = fn.returns
    assert isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "Tuple", ast.unparse(ann)
    return len(ann.slice.elts)


USED = ("__init__", "get_dispatch_config", "get_combine_config", "get_dispatch_layout", "dispatch", "combine")


def check_standin_against(pinned_src: str) -> list[str]:
    """Every difference between the stand-in's Buffer API and ``pinned_src``'s."""
    pinned = _methods(ast.parse(pinned_src), "Buffer")
    standin_src = (STANDIN / "deep_ep" / "__init__.py").read_text()
    ours = _methods(ast.parse(standin_src), "Buffer")
    arity = ast.literal_eval(next(n.value for n in ast.parse(standin_src).body if isinstance(n, ast.Assign)
                                  and getattr(n.targets[0], "id", "") == "RETURN_ARITY"))
    problems = []
    for name in USED:
        if name not in pinned:
            problems.append(f"Buffer.{name} is gone from the pinned DeepEP")
            continue
        if _signature(pinned[name]) != _signature(ours[name]):
            problems.append(f"Buffer.{name}: pinned {_signature(pinned[name])} != stand-in {_signature(ours[name])}")
        if name in arity and _return_arity(pinned[name]) != arity[name]:
            problems.append(f"Buffer.{name} returns {_return_arity(pinned[name])} values, stand-in {arity[name]}")
    return problems


@pytest.mark.external
def test_standin_matches_the_pinned_deepep_api():
    assert check_standin_against(_pinned_source("deep_ep/buffer.py")) == []


def pinned_rank_counts(pinned_src: str) -> dict[str, tuple[int, ...]]:
    """The group sizes each of the pinned Buffer's config tables knows (its ``config_map`` keys)."""
    methods = _methods(ast.parse(pinned_src), "Buffer")
    out = {}
    for name in ("get_dispatch_config", "get_combine_config"):
        table = next(n.value for n in ast.walk(methods[name]) if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", "") == "config_map")
        out[name] = tuple(sorted(ast.literal_eval(k) for k in table.keys))
    return out


@pytest.mark.external
def test_deepep_rank_counts_are_the_pinned_config_tables():
    from rltrainer.contract import DEEPEP_RANK_COUNTS

    src = _pinned_source("deep_ep/buffer.py")
    assert pinned_rank_counts(src) == {"get_dispatch_config": DEEPEP_RANK_COUNTS,
                                       "get_combine_config": DEEPEP_RANK_COUNTS}
    assert "assert num_ranks in config_map, f'Unsupported number of EP ranks: {num_ranks}'" in src


def test_standin_refuses_a_group_size_the_pinned_deepep_cannot_configure(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))
    import sys

    import deep_ep

    try:
        for n in (2, 8, 16, 160):
            deep_ep.Buffer.get_dispatch_config(n), deep_ep.Buffer.get_combine_config(n)
        for n in (3, 12, 256):
            for fn in (deep_ep.Buffer.get_dispatch_config, deep_ep.Buffer.get_combine_config):
                with pytest.raises(AssertionError, match=f"^Unsupported number of EP ranks: {n}$"):
                    fn(n)
    finally:
        sys.modules.pop("deep_ep", None)


@pytest.mark.external
def test_signature_check_catches_api_drift():
    src = _pinned_source("deep_ep/buffer.py")
    drifted = src.replace("num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,\n                 is_token_in_rank",
                          "num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,\n                 token_mask", 1)
    assert drifted != src
    problems = check_standin_against(drifted)
    assert len(problems) == 1 and problems[0].startswith("Buffer.dispatch: pinned ")
    fewer = src.replace("Tuple[torch.Tensor, Optional[torch.Tensor], EventOverlap]:\n        \"\"\"\n        Combine",
                        "Tuple[torch.Tensor, EventOverlap]:\n        \"\"\"\n        Combine", 1)
    assert check_standin_against(fewer) == ["Buffer.combine returns 2 values, stand-in 3"]


@pytest.mark.external
def test_deepep_dispatcher_runs_layout_dispatch_cached_dispatch_and_combine(tmp_path: Path):
    _pinned_source("deep_ep/buffer.py")  # the stand-in is only meaningful next to the pinned API
    argv = ["--backend", "deepep", *SMALL, "--ranks-per-node", "1"]
    ranks = run_ranks(standin_deepep_worker, 2, tmp_path, argv)
    assert [r["rc"] for r in ranks] == [0, 0], ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["backend"], r["direction"], r["correct"]) for r in rows] == [
        ("deepep", "dispatch", True), ("deepep", "combine", True)]
    calls = [name for name, _ in ranks[0]["calls"]]
    assert calls[0] == "__init__" and "get_dispatch_layout" in calls
    calls = [(name, kw) for name, kw in ranks[0]["calls"] if name != "__init__"]
    assert any(name == "dispatch" and kw["cached"] for name, kw in calls)  # DeepEP-timed: layout reused
    assert any(name == "dispatch" and not kw["cached"] for name, kw in calls)
    assert all(kw["config"] is not None for name, kw in calls if name in ("dispatch", "combine"))


@pytest.mark.external
def test_acceptance_with_deepep_sweeps_chunk_sizes_like_deepeps_test(tmp_path: Path):
    _pinned_source("deep_ep/buffer.py")
    argv = ["--backend", "deepep", *SMALL, "--ranks-per-node", "1", "--acceptance", "--iters", "1"]
    ranks = run_ranks(standin_deepep_worker, 2, tmp_path, argv, [16, 8, 2, 4], timeout_s=180)
    assert [r["rc"] for r in ranks] == [0, 0], ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["purpose"], r["direction"]) for r in rows][2:] == [("acceptance", "dispatch"), ("acceptance", "combine")]
    for rank in ranks:
        configs = [tuple(kw["config"]) for name, kw in rank["calls"] if name == "dispatch" and kw["cached"]]
        swept = {c for c in configs if c[0] == 24}
        # test_internode.py's dispatch grid: NVL chunk 4..44 x RDMA chunk 4..32, 24 SMs, buffers 512/128
        assert {(c[1], c[3]) for c in swept} == {(n, r) for n in range(4, 45, 4) for r in range(4, 33, 4)}
        assert {(c[2], c[4]) for c in swept} == {(512, 128)}
        combines = {tuple(kw["config"]) for name, kw in rank["calls"] if name == "combine" and kw["config"][0] == 24}
        # combine: NVL chunk 1..7 x RDMA chunk from 12 on 2 nodes (here 2 ranks, 1 per node), else 8, to 32
        assert {(c[1], c[3]) for c in combines} == {(n, r) for n in range(1, 8) for r in range(12, 33, 4)}
    # after the sweep both ranks time the same (rank 0's) choice
    last = [[tuple(kw["config"]) for name, kw in r["calls"] if name == "dispatch" and kw["cached"]][-1] for r in ranks]
    assert last[0] == last[1]


def test_deepep_shapes_share_one_buffer_sized_for_the_widest(monkeypatch):
    """NVSHMEM initialises once per process: the acceptance shape reuses the model shape's buffer."""
    import sys

    import torch

    monkeypatch.syspath_prepend(str(STANDIN))
    from rltrainer.bench.common import DistContext
    from rltrainer.bench.ep import make_dispatcher

    class Group:
        def rank(self):
            return 0

        def size(self):
            return 16

    import deep_ep

    ctx = DistContext(rank=0, world_size=16, local_rank=0, device=torch.device("cpu"), backend="gloo")
    monkeypatch.setattr("torch.distributed.group", type("G", (), {"WORLD": Group()}))
    monkeypatch.setattr(deep_ep.Buffer, "__init__", lambda self, group, nvl=0, rdma=0, *a, **k: setattr(
        self, "sizes", (nvl, rdma)))
    import rltrainer.bench.ep as ep

    monkeypatch.setattr(ep.DeepEPDispatcher, "__init__", _cpu_ok(ep.DeepEPDispatcher.__init__))
    first = make_dispatcher("deepep", ctx, EPShape(4096, 2048, 8, 128), max_hidden=7168)
    second = make_dispatcher("deepep", ctx, PUBLISHED_SHAPE, previous=first, max_hidden=7168)
    assert second.buffer is first.buffer
    assert first.buffer.sizes == (7168 * 2 * 16, 7168 * 2 * 16)  # the stand-in's hint: hidden bytes x ranks
    sys.modules.pop("deep_ep", None)


@pytest.mark.external
def test_acceptance_after_a_span_gets_its_own_every_rank_buffer(tmp_path: Path):
    """The real make_dispatcher path: a --span subgroup's DeepEP buffer is not reused for the
    every-rank acceptance pass (it would move rows inside the subgroup and fail the check)."""
    _pinned_source("deep_ep/buffer.py")
    argv = ["--backend", "deepep", *SMALL, "--iters", "1", "--warmup", "0", "--ranks-per-node", "1",
            "--span", "training:2:1", "--acceptance", "--no-tune"]
    ranks = run_ranks(standin_make_dispatcher_worker, 4, tmp_path, argv, [24, 16, 2, 8], timeout_s=180)
    assert [r["rc"] for r in ranks] == [0] * 4, ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    assert [(r["purpose"], r["ep_size"], r["correct"]) for r in rows] == [
        ("training", 2, True), ("training", 2, True), ("acceptance", 4, True), ("acceptance", 4, True)]
    assert all(r["buffers"] == [2, 4] for r in ranks)  # one buffer per process group


@pytest.mark.external
def test_a_deepep_group_size_the_pinned_deepep_cannot_configure_is_named(tmp_path: Path):
    """3 ranks (and 256, the kit's old --acceptance at 32 HGX nodes) are not in DeepEP's table:
    a clear refusal before any buffer, not the stand-in's (DeepEP's) bare AssertionError."""
    _pinned_source("deep_ep/buffer.py")
    argv = ["--backend", "deepep", "--tokens-per-rank", "48", "--hidden", "16", "--topk", "3", "--experts", "6",
            "--iters", "1", "--warmup", "0", "--device", "cpu", "--ranks-per-node", "1", "--acceptance"]
    ranks = run_ranks(standin_make_dispatcher_worker, 3, tmp_path, argv, [24, 16, 2, 6], timeout_s=120)
    assert [r["rc"] for r in ranks] == [2, 2, 2], ranks[0]["stderr"]
    known = "2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160"
    assert ranks[0]["stderr"].splitlines() == [
        f"rltrainer bench ep: --backend deepep ({purpose}): a DeepEP group of 3 ranks cannot start, the pinned "
        f"DeepEP configures only {known} ranks (DeepEP 567632d deep_ep/buffer.py:245-259 "
        f"Buffer.get_dispatch_config / get_combine_config: 'Unsupported number of EP ranks'); {fix}, or --backend nccl"
        for purpose, fix in (("model", "run on a world size DeepEP knows, or use --span"),
                             ("acceptance", "drop --acceptance"))]
    assert all(r["buffers"] == [] for r in ranks)


def _cpu_ok(init):
    def wrapped(self, ctx, shape, group=None, allow_cpu=False, **kw):
        return init(self, ctx, shape, group, True, **kw)
    return wrapped


@pytest.mark.parametrize("ci, outcome", [("true", "failed"), (None, "skipped")])
def test_missing_pinned_sources_fail_in_ci_and_skip_elsewhere(monkeypatch, tmp_path, ci, outcome):
    import _pytest.outcomes as outcomes

    import trainer_helpers
    monkeypatch.setattr(trainer_helpers, "SHARED_UPSTREAM", tmp_path)
    monkeypatch.setenv("RLKIT_ARTIFACTS", str(tmp_path / "no-cache"))
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
    expected = outcomes.Failed if outcome == "failed" else outcomes.Skipped
    with pytest.raises(expected) as exc:
        _pinned_source("deep_ep/buffer.py")
    assert "DeepEP's pinned sources are missing" in str(exc.value) and "shared/upstream/README.md" in str(exc.value)


def test_span_measures_inside_the_runs_ep_groups(tmp_path: Path):
    """--span: the model's shape inside every EP group at once (4 ranks, 2 per node): training
    groups {0,1},{2,3} stay on a node, rollout groups {0,2},{1,3} (stride 2) cross nodes."""
    argv = ["ep", "--backend", "nccl", *SMALL, "--ranks-per-node", "2", "--span", "training:2:1",
            "--span", "rollout:2:2"]
    ranks = run_ranks(cli_worker, 4, tmp_path, argv)
    assert [r["rc"] for r in ranks] == [0] * 4, ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    got = [(r["purpose"], r["direction"], r["ep_size"], r["ep_stride"], r["ep_nodes"], r["world_size"])
           for r in rows]
    assert got == [("training", "dispatch", 2, 1, 1, 4), ("training", "combine", 2, 1, 1, 4),
                   ("rollout", "dispatch", 2, 2, 2, 4), ("rollout", "combine", 2, 2, 2, 4)]
    assert all(r["correct"] and r["step_time_us"] > 0 for r in rows)
    # no measurement over every rank at the model's shape: the run never does that all-to-all
    assert "model" not in {r["purpose"] for r in rows}


FORMAT = "use NAME:SIZE[:STRIDE[:FIRST[:COUNT[:TP]]]]"


@pytest.mark.parametrize("span, text", [
    ("training", FORMAT), ("training:1", "SIZE must be >= 2"), (":8", FORMAT), ("t:8:x", FORMAT),
    ("t:8:1:0:8:2:1", FORMAT), ("t:8:1:-1", "FIRST >= 0"), ("t:8:1:0:0", "COUNT and TP >= 1"),
    ("t:8:1:0:8:0", "COUNT and TP >= 1"), ("t:8:1:0::x", FORMAT)])
def test_bad_span_is_named(span: str, text: str):
    import argparse

    from rltrainer.bench.ep import Span, parse_span

    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(text)):
        parse_span(span)
    # the older NAME:SIZE[:STRIDE] still parses, to a layout over the whole world
    assert parse_span("rollout:4:2") == Span("rollout", 4, 2, 0, None)
    assert parse_span("training:8") == Span("training", 8, 1, 0, None)
    assert parse_span("rollout:16:1:8") == Span("rollout", 16, 1, 8, None)
    assert parse_span("training:8:1:0:8") == Span("training", 8, 1, 0, 8)
    assert parse_span("training:16:1:0:16:2") == Span("training", 16, 1, 0, 16, 2)
    assert parse_span("training:16:1:0::2") == Span("training", 16, 1, 0, None, 2)
    for text in ("training:8:1", "rollout:16:1:8", "training:8:1:0:8", "training:16:1:0:16:2", "t:16:1:0::2"):
        assert parse_span(text).text() == text


@pytest.mark.external
def test_a_tp_span_hands_deepep_every_expert_tp_shard(tmp_path: Path):
    """Megatron's DeepEP group with expert TP 2 and EP 2: 4 consecutive ranks, top-k and experts
    times 2 (token_dispatcher.py:1356-1361); the bench measures and checks that shape."""
    _pinned_source("deep_ep/buffer.py")
    argv = ["--backend", "deepep", "--tokens-per-rank", "24", "--hidden", "8", "--topk", "2", "--experts", "4",
            "--iters", "1", "--warmup", "0", "--device", "cpu", "--ranks-per-node", "2",
            "--span", "training:4:1:0:4:2"]
    ranks = run_ranks(standin_make_dispatcher_worker, 4, tmp_path, argv, timeout_s=180)
    assert [r["rc"] for r in ranks] == [0] * 4, ranks[0]["stderr"]
    rows = [r for r in json_lines(ranks[0]["stdout"]) if r["kind"] == "ep"]
    assert [(r["purpose"], r["ep_size"], r["ep_tp"], r["topk"], r["experts"], r["correct"]) for r in rows] == [
        ("training", 4, 2, 4, 8, True)] * 2
    assert [r["buffers"] for r in ranks] == [[4]] * 4


def test_span_that_does_not_divide_the_world_is_named(tmp_path: Path):
    ranks = run_ranks(cli_worker, 2, tmp_path, ["ep", "--backend", "nccl", *SMALL, "--span", "training:4",
                                                "--span", "rollout:2:1:1:2"])
    assert ranks[0]["rc"] == 2
    assert ranks[0]["stderr"].splitlines() == [
        "rltrainer bench ep: --span training:4:1: 4 x 1 must divide the 2 ranks its groups tile (from rank 0, "
        "world size 2)",
        "rltrainer bench ep: --span rollout:2:1:1:2: ranks 1..2 are not all in the world of 2 ranks"]


@pytest.mark.parametrize("backend", ["nccl", pytest.param("deepep", marks=pytest.mark.external)])
def test_span_pools_start_where_the_run_puts_them(tmp_path: Path, backend: str):
    """A disaggregated run on 3 "nodes" of 2 ranks: training on node 0 (ranks 0-1), the rollout
    engine's EP4 on nodes 1-2 (ranks 2-5), as infra/config/ep_spans.py places them. Each layout
    runs only on its pool; rank 0, outside the rollout pool, still prints its rows."""
    if backend == "deepep":
        _pinned_source("deep_ep/buffer.py")
    argv = ["--backend", backend, "--tokens-per-rank", "24", "--hidden", "8", "--topk", "2", "--experts", "4",
            "--iters", "1", "--warmup", "0", "--device", "cpu", "--ranks-per-node", "2",
            "--span", "training:2:1:0:2", "--span", "rollout:4:1:2"]
    ranks = run_ranks(standin_make_dispatcher_worker, 6, tmp_path, argv, timeout_s=180)
    assert [r["rc"] for r in ranks] == [0] * 6, ranks[0]["stderr"]
    rows = json_lines(ranks[0]["stdout"])
    got = [(r["purpose"], r["ep_size"], r["ep_first"], r["ep_pool"], r["ep_nodes"], r["world_size"], r["correct"])
           for r in rows if r["kind"] == "ep"]
    assert got == [("training", 2, 0, 2, 1, 6, True)] * 2 + [("rollout", 4, 2, 4, 2, 6, True)] * 2
    rollout = [r for r in rows if r["purpose"] == "rollout"]
    # the rollout group's rank 0 (world rank 2) measured these; world rank 0 printed them
    assert all(r["time_us"] > 0 and r["rdma_bytes"] > 0 and r["nvl_bytes"] > 0 for r in rollout)
    if backend == "deepep":  # a DeepEP buffer only on the pool's ranks, one per group
        assert [r["buffers"] for r in ranks] == [[2], [2], [4], [4], [4], [4]]

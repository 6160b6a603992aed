"""The run's EP groups (infra/config/ep_spans.py) against the pinned Megatron and Miles sources."""

from __future__ import annotations

import ast

import pytest

from infra.catalog import INSTANCE_TYPES
from infra.config import parse_config
from infra.config.ep_spans import MEGATRON_ORDER, EpSpan, ep_spans
from tests.support import artifacts

P5_GROUP = {"p5": {"instance_type": "p5.48xlarge", "max_size": 8, "availability_zone": "us-east-1a",
                   "capacity": {"type": "on-demand"}}}


def megatron_rank_generator():
    """RankGenerator and the function it calls, taken out of the pinned parallel_state.py (the
    module itself imports torch and the rest of megatron.core)."""
    root = artifacts.require("megatron-lm-37f9161", what="Megatron-LM 37f9161 sources")
    source = (root / "megatron/core/parallel_state.py").read_text()
    tree = ast.parse(source)
    wanted = [n for n in tree.body if getattr(n, "name", None) in
              ("generate_masked_orthogonal_rank_groups", "RankGenerator")]
    assert len(wanted) == 2, "parallel_state.py no longer defines both"
    scope: dict = {"List": list, "__name__": "megatron_extract"}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "parallel_state.py", "exec"), scope)
    assert f'order: str = "{MEGATRON_ORDER}"' in source  # initialize_model_parallel's default
    return scope["RankGenerator"]


@pytest.mark.external
@pytest.mark.parametrize("world, etp, ep, pp", [(16, 1, 8, 1), (16, 1, 16, 1), (32, 2, 8, 1), (32, 1, 8, 2),
                                                (16, 2, 4, 2), (64, 4, 16, 1)])
def test_training_groups_are_megatrons_expert_groups(world, etp, ep, pp):
    RankGenerator = megatron_rank_generator()
    gen = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=MEGATRON_ORDER)
    want = sorted(sorted(g) for g in gen.get_ranks("ep"))
    got = sorted(EpSpan("training", ep, etp, world, 8, 8).groups())
    assert got == want


@pytest.mark.external
@pytest.mark.parametrize("world, etp, ep, pp", [(16, 2, 8, 1), (32, 2, 8, 1), (32, 2, 4, 2), (64, 4, 8, 1),
                                                (16, 2, 1, 1)])
def test_deepep_training_groups_are_megatrons_tp_ep_groups(world, etp, ep, pp):
    """With a DeepEP backend Megatron's flex dispatcher hands DeepEP its tp_ep group (Megatron-LM
    37f9161 token_dispatcher.py:1356-1361; moe_utils.py:1364: parallel_state's expert tensor and
    model parallel group, built from RankGenerator.get_ranks('tp-ep'))."""
    RankGenerator = megatron_rank_generator()
    root = artifacts.require("megatron-lm-37f9161", what="Megatron-LM 37f9161 sources")
    dispatcher = (root / "megatron/core/transformer/moe/token_dispatcher.py").read_text()
    assert ("self._comm_manager = _DeepepManager(\n                group=self.tp_ep_group,\n"
            "                num_local_experts=self.num_local_experts,\n"
            "                router_topk=self.tp_size * self.config.moe_router_topk,\n"
            "                num_experts=self.tp_size * self.config.num_moe_experts,") in dispatcher
    assert "pg_collection.tp_ep = parallel_state.get_expert_tensor_and_model_parallel_group()" in (
        root / "megatron/core/transformer/moe/moe_utils.py").read_text()
    assert "for ranks in expert_decoder_rank_generator.get_ranks('tp-ep'):" in (
        root / "megatron/core/parallel_state.py").read_text()
    gen = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=MEGATRON_ORDER)
    want = sorted(sorted(g) for g in gen.get_ranks("tp-ep"))
    cfg = parse_config({"gpu_node_groups": P5_GROUP, "training": {
        "nodes": world // 8, "expert_parallel": {"backend": "deepep-nvshmem"},
        "parallel": {"tp": etp, "ep": ep, "etp": etp, "pp": pp}}})
    (span,) = [s for s in ep_spans(cfg, INSTANCE_TYPES["p5.48xlarge"]) if s.name == "training"]
    assert sorted(span.groups()) == want
    assert (span.size, span.stride, span.tp) == (etp * ep, 1, etp)
    # the NCCL path (Megatron's alltoall dispatcher) stays on the EP group: ep ranks etp apart
    nccl = cfg.model_copy(update={"training": cfg.training.model_copy(update={
        "expert_parallel": cfg.training.expert_parallel.model_copy(update={"backend": "nccl"})})})
    spans = [s for s in ep_spans(nccl, INSTANCE_TYPES["p5.48xlarge"]) if s.name == "training"]
    assert sorted(sorted(g) for g in gen.get_ranks("ep")) == sorted(spans[0].groups()) if ep > 1 else spans == []


@pytest.mark.external
def test_miles_places_rank_r_on_the_r_th_sorted_gpu_and_engines_on_consecutive_ones():
    root = artifacts.require("miles-v0.1.0", what="Miles v0.1.0 sources")
    actor = (root / "miles/ray/train/actor_factory.py").read_text()
    assert "placement_group_bundle_index=reordered_bundle_indices[rank]" in actor
    pg = (root / "miles/ray/placement_group.py").read_text()
    assert "return (node_ip_parts, gpu_id)" in pg  # sorted by node, then GPU
    assert "return max(actor_num_gpus, args.rollout_num_gpus), 0" in pg  # colocate: rollout offset 0
    group = (root / "miles/ray/rollout/server_group.py").read_text()
    assert "gpu_index = self.gpu_offset + i * num_gpu_per_engine" in group


def test_default_run_keeps_both_all_to_alls_inside_one_p5_node():
    cfg = parse_config({"training": {"nodes": 2}})
    spans = {s.name: s for s in ep_spans(cfg, INSTANCE_TYPES["p5.48xlarge"])}
    assert set(spans) == {"training", "rollout"}
    for s in spans.values():
        assert s.inside_nvlink and s.nodes == 1
        assert s.groups()[0] == list(range(8)) and len(s.groups()) == 2
    assert spans["training"].bench_arg(16) == "training:8:1"


def test_an_ep16_group_crosses_efa_on_hgx_but_not_inside_an_nvl72_domain():
    hgx = EpSpan("training", 16, 1, 32, 8, 8)
    assert not hgx.inside_nvlink and hgx.nodes == 2 and hgx.where == "across EFA (2 nodes)"
    nvl72 = EpSpan("training", 16, 1, 64, 4, 72)  # GB200: 4 GPUs per instance, 72 per domain
    assert nvl72.inside_nvlink and nvl72.nodes == 4
    assert nvl72.where == "inside one NVLink domain (4 nodes, 72 GPUs per domain)"
    # 144 GPUs = two domains: EP16 groups from rank 64 straddle the boundary at 72
    assert not EpSpan("training", 16, 1, 144, 4, 72).inside_nvlink


def test_rollout_group_is_strided_inside_its_engine():
    s = EpSpan("rollout", 4, 2, 16, 8, 8)  # engines of 8 GPUs, EP4 -> moe_tp 2
    assert s.groups()[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert s.inside_nvlink


def test_a_disaggregated_rollout_pool_starts_after_the_training_gpus():
    # radixark/miles@78527b9102b3 (v0.1.0) miles/ray/placement_group.py:105: the rollout GPUs
    # follow the actor's
    cfg = parse_config({"training": {"nodes": 2, "rollout": {"placement": "disaggregated",
                                                             "nodes": 1}}})
    spans = {s.name: s for s in ep_spans(cfg, INSTANCE_TYPES["p5.48xlarge"])}
    assert spans["training"].groups() == [list(range(8))]
    assert spans["rollout"].groups() == [list(range(8, 16))]
    # on GB200 (4 GPUs a node, 72 a domain) a pool after 17 training nodes straddles two domains
    assert not EpSpan("rollout", 8, 1, 8, 4, 72, first=68).inside_nvlink
    assert EpSpan("rollout", 8, 1, 8, 4, 72, first=72).inside_nvlink


LAYOUTS = [
    {"nodes": 2},
    {"nodes": 2, "parallel": {"tp": 2, "ep": 16, "etp": 1}, "rollout": {"gpus_per_engine": 8, "ep": 4}},
    {"nodes": 2, "parallel": {"tp": 2, "ep": 8, "etp": 2}},
    {"nodes": 4, "parallel": {"ep": 16}},
    {"nodes": 2, "rollout": {"placement": "disaggregated", "nodes": 1}},
    # 1 training node + 2 rollout nodes, engines of 16 GPUs: the rollout pool starts at GPU 8
    {"nodes": 3, "rollout": {"placement": "disaggregated", "nodes": 2, "gpus_per_engine": 16, "ep": 16}},
    {"nodes": 4, "parallel": {"ep": 16}, "rollout": {"placement": "disaggregated", "nodes": 2}},
    # DeepEP with expert TP: Megatron's tp-ep group (etp x ep consecutive ranks, TP fan-out)
    {"nodes": 2, "expert_parallel": {"backend": "deepep-nvshmem"}, "parallel": {"tp": 2, "ep": 8, "etp": 2}},
    {"nodes": 3, "expert_parallel": {"backend": "deepep-nvshmem"}, "parallel": {"tp": 2, "ep": 4, "etp": 2},
     "rollout": {"placement": "disaggregated", "nodes": 2, "gpus_per_engine": 16, "ep": 16}},
]


@pytest.mark.parametrize("training", LAYOUTS)
def test_the_bench_forms_exactly_the_groups_of_each_span(training):
    """The contract between the kit and ``rltrainer bench ep``: the --span the ep job passes makes
    the bench build exactly EpSpan.groups() (a disaggregated pool included), and the bench accepts it."""
    from rltrainer.bench.ep import span_problems
    from rltrainer.contract import parse_span, span_groups

    cfg = parse_config({"gpu_node_groups": P5_GROUP, "training": training})
    itype = INSTANCE_TYPES["p5.48xlarge"]
    total = cfg.training.nodes * itype.gpu_count
    spans = ep_spans(cfg, itype)
    assert spans
    for s in spans:
        bench = parse_span(s.bench_arg(total))
        first, count = bench.pool(total)
        assert span_problems(bench, total) == []
        assert span_groups(count, bench.size, bench.stride, first) == s.groups(), s.bench_arg(total)
        assert bench.tp == s.tp


def test_a_disaggregated_run_passes_each_pool_to_the_bench():
    cfg = parse_config({"gpu_node_groups": P5_GROUP, "training": LAYOUTS[5]})
    spans = {s.name: s for s in ep_spans(cfg, INSTANCE_TYPES["p5.48xlarge"])}
    assert spans["training"].bench_arg(24) == "training:8:1:0:8"
    assert spans["rollout"].bench_arg(24) == "rollout:16:1:8:16"
    assert spans["rollout"].groups() == [list(range(8, 24))]

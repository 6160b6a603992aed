"""The planner's parts: model catalog, memory and time models, backend rule, search, cost."""

from __future__ import annotations

import dataclasses
import math
import textwrap

import pytest

from infra.catalog import INSTANCE_TYPES
from infra.planner import (
    MODEL_CATALOG, Layout, Pins, PlannerError, PlanRequest, TrainingSetup, estimate_memory, evaluate,
    get_model, get_system, load_model_file, plan, recommend_backend, step_time,
)
from infra.catalog.gpus import GPU_SPECS
from infra.planner.hardware import GIB, REFERENCE_SYSTEMS, plannable_systems

SYSTEMS = plannable_systems()
from infra.planner.memory import stage_params
from infra.planner.timing import expected_remote_nodes

P5 = "p5.48xlarge"


# --- model catalog ---------------------------------------------------------------------------


def test_catalog_has_the_required_models():
    assert {"qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "mixtral-8x7b", "mixtral-8x22b",
            "kimi-k2"} <= set(MODEL_CATALOG)


@pytest.mark.parametrize("key", sorted(MODEL_CATALOG))
def test_parameter_counts_match_what_the_authors_publish(key):
    m = MODEL_CATALOG[key]
    assert m.total_params / 1e9 == pytest.approx(m.published_total_b, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(m.published_active_b, rel=0.03)
    assert m.source.startswith("https://huggingface.co/")


def test_deepseek_v3_mtp_module_is_about_14b_with_shared_embedding_and_head():
    m = MODEL_CATALOG["deepseek-v3"]
    # DeepSeek-V3 report: 685B on Hugging Face = 671B main model + 14B MTP module, the latter
    # counting its share of embedding and output head.
    assert (m.mtp_params + m.embedding_params + m.head_params) / 1e9 == pytest.approx(14, rel=0.05)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(PlannerError) as err:
        get_model("llama-moe")
    assert str(err.value) == (
        "unknown model 'llama-moe'; known models: deepseek-v3, kimi-k2, mixtral-8x22b, "
        "mixtral-8x7b, qwen3-235b-a22b, qwen3-30b-a3b (or describe your own with --model-file)")


def test_model_file_accepts_hugging_face_names(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(textwrap.dedent("""\
        key: tiny-moe
        num_hidden_layers: 4
        hidden_size: 1024
        vocab_size: 32000
        num_attention_heads: 16
        num_key_value_heads: 4
        head_dim: 64
        n_routed_experts: 16
        num_experts_per_tok: 2
        moe_intermediate_size: 512
        """))
    m = load_model_file(f)
    assert (m.key, m.num_layers, m.num_experts, m.top_k, m.expert_ffn) == ("tiny-moe", 4, 16, 2, 512)
    assert m.name == "tiny-moe"
    result = plan(PlanRequest(m, P5, nodes=1))
    assert result.best.memory.fits


def test_model_file_errors_name_the_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("key: x\nnum_hidden_layers: 4\nhidden_size: 64\nvocab_size: 10\n"
                 "num_attention_heads: 4\nn_routed_experts: 4\nnum_experts_per_tok: 8\n"
                 "moe_intermediate_size: 32\nnum_key_value_heads: 4\nhead_dim: 16\nbogus: 1\n")
    with pytest.raises(PlannerError) as err:
        load_model_file(f)
    assert "bogus" in str(err.value)
    f.write_text(f.read_text().replace("bogus: 1\n", ""))
    with pytest.raises(PlannerError, match="top_k cannot exceed num_experts"):
        load_model_file(f)


# --- hardware tables ------------------------------------------------------------------------------


def test_every_catalog_instance_is_plannable_with_its_catalog_facts():
    assert set(SYSTEMS) == set(INSTANCE_TYPES)
    for name, it in INSTANCE_TYPES.items():
        s = SYSTEMS[name]
        assert (s.gpu.name, s.gpus_per_node, s.nominal_memory_gib) == \
            (it.gpu_model, it.gpu_count, it.gpu_memory_gib)
        assert s.fabric.line_rate_gbps == it.efa_bandwidth_gbps / 8 / it.gpu_count


def test_layouts_fit_the_usable_gpu_memory_not_the_nominal_size():
    """EC2's GPU memory (80 GiB on p5) is the nominal size; CUDA can allocate less (79.2 GiB on
    H100). The planner fits against the GPU record's usable size, on every catalog type and
    reference system, and the usable size belongs to the memory variant the instance has."""
    for name, it in INSTANCE_TYPES.items():
        s = SYSTEMS[name]
        assert s.gpu_memory_gib == GPU_SPECS[it.gpu_model].usable_memory_gib
        assert 0.97 * it.gpu_memory_gib < s.gpu_memory_gib < it.gpu_memory_gib, name
    for ref in REFERENCE_SYSTEMS.values():
        assert ref.gpu_memory_gib == ref.gpu.usable_memory_gib < ref.nominal_memory_gib
    assert SYSTEMS["p5.48xlarge"].gpu_memory_gib == pytest.approx(79.21, abs=0.01)
    assert SYSTEMS["p5en.48xlarge"].gpu_memory_gib == pytest.approx(139.65, abs=0.01)
    # a layout at 79.6 GiB fitted the nominal 80 and does not fit an H100
    mem = plan(PlanRequest("qwen3-30b-a3b", "p5.48xlarge", nodes=2, top=10**9)).candidates
    assert mem and all(c.memory.peak <= 79.21 and c.memory.capacity < 80 for c in mem)


def test_gpu_peaks_are_dense_datasheet_values():
    assert GPU_SPECS["H100"].bf16_tflops == pytest.approx(989.4)
    assert GPU_SPECS["H100"].fp8_tflops == pytest.approx(2 * 989.4, rel=0.001)
    assert GPU_SPECS["H200"].bf16_tflops == GPU_SPECS["H100"].bf16_tflops
    assert GPU_SPECS["H800"].nvlink_gbps_bidir < GPU_SPECS["H100"].nvlink_gbps_bidir
    for b in ("B200", "B300"):
        assert GPU_SPECS[b].fp8_tflops == 2 * GPU_SPECS[b].bf16_tflops == 4500


def test_efa_all_to_all_rate_reproduces_the_p5_nccl_tests_measurement():
    # nccl-tests all_to_all on 8x p5 at the ~64 MiB EP payload: busbw 40.4 GB/s. Our model of
    # one call (latency + inter-node bytes at the asymptotic rate) must give that back.
    fab = SYSTEMS[P5].fabric
    S, n, gpn = 64 * 2**20, 64, 8
    t = (fab.a2a_latency_ms + fab.a2a_latency_per_node_ms * 7) * 1e-3 \
        + S * (n - gpn) / n / (fab.a2a_gbps * 1e9)
    busbw = S / t * (n - 1) / n / 1e9
    assert busbw == pytest.approx(40.4, rel=0.05)


def test_prices_are_dated_and_missing_ones_are_explicit():
    assert INSTANCE_TYPES["p5.48xlarge"].on_demand_usd_per_hour > 0
    assert INSTANCE_TYPES["p5e.48xlarge"].on_demand_usd_per_hour is None
    r = plan(PlanRequest("qwen3-30b-a3b", "p5e.48xlarge", nodes=1))
    assert r.best.cost.dollars_per_hour is None
    assert any("--price-per-hour" in w for w in r.warnings)
    r = plan(PlanRequest("qwen3-30b-a3b", "p5e.48xlarge", nodes=1, price_per_hour=60.0))
    assert r.best.cost.dollars_per_hour == 60.0


# --- memory model ---------------------------------------------------------------------------------


def test_distributed_optimizer_bytes_per_parameter():
    """Megatron distributed optimizer, BF16 params + FP32 grads: 6 + 12/d bytes per parameter."""
    m, s = MODEL_CATALOG["mixtral-8x7b"], get_system(P5)
    L = Layout(tp=2, pp=4, ep=8, dp=8)
    setup = TrainingSetup()
    mem = estimate_memory(m, s, L, setup, "nccl")
    p = stage_params(m, L, mem.stage)
    static = (mem.weights + mem.gradients + mem.optimizer) * GIB
    expected = 6 * (p.dense + p.expert) + 12 * (p.dense / (L.dp * L.cp) + p.expert / L.edp)
    assert static == pytest.approx(expected, rel=1e-9)
    bf16 = estimate_memory(m, s, L, dataclasses.replace(setup, optimizer_bf16_moments=True), "nccl")
    assert bf16.optimizer == pytest.approx(mem.optimizer * 8 / 12, rel=1e-9)


def test_expert_parameters_split_by_expert_parallelism():
    m = MODEL_CATALOG["qwen3-235b-a22b"]
    a = stage_params(m, Layout(tp=4, pp=4, ep=8, dp=8), "first")
    b = stage_params(m, Layout(tp=4, pp=4, ep=16, dp=8), "first")
    assert b.expert == pytest.approx(a.expert / 2)
    assert b.dense == pytest.approx(a.dense)


def test_recompute_reduces_activations():
    m, s = MODEL_CATALOG["qwen3-235b-a22b"], get_system("p5en.48xlarge")
    acts = [estimate_memory(m, s, Layout(tp=4, pp=8, ep=8, dp=2, recompute=rc),
                            TrainingSetup(), "nccl").activations
            for rc in ("none", "selective", "full")]
    assert acts[0] > acts[1] > acts[2]


def test_interleaving_adds_in_flight_activations():
    m, s = MODEL_CATALOG["mixtral-8x7b"], get_system(P5)
    base = Layout(tp=1, pp=4, ep=8, dp=16)
    a = estimate_memory(m, s, base, TrainingSetup(), "nccl").activations
    b = estimate_memory(m, s, dataclasses.replace(base, vpp=8), TrainingSetup(), "nccl").activations
    assert b / a == pytest.approx(1 + 3 / 32, rel=0.01)  # Korthikanti et al.: 1 + (p-1)/(p*v)


def test_colocated_rollout_kv_cache_counts_when_it_stays_resident():
    m, s = MODEL_CATALOG["qwen3-30b-a3b"], get_system(P5)
    L = Layout(tp=2, pp=1, ep=8, dp=4)
    alone = estimate_memory(m, s, L, TrainingSetup(), "nccl")
    kv_tokens = 200_000
    resident = estimate_memory(m, s, L, TrainingSetup(
        colocate_rollout=True, rollout_offload=False, rollout_tokens_per_gpu=kv_tokens), "nccl")
    kv = kv_tokens * m.kv_cache_bytes_per_token / GIB
    assert resident.rollout_kv_cache == pytest.approx(kv)
    assert resident.training_peak == pytest.approx(
        alone.training_peak + kv + resident.rollout_weights)
    offloaded = estimate_memory(m, s, L, TrainingSetup(
        colocate_rollout=True, rollout_offload=True, rollout_tokens_per_gpu=kv_tokens), "nccl")
    assert offloaded.training_peak < resident.training_peak
    assert offloaded.rollout_peak > kv


def test_deepep_adds_its_buffers():
    m, s = MODEL_CATALOG["deepseek-v3"], get_system("p5en.48xlarge")
    L = Layout(tp=1, pp=16, ep=16, dp=16, recompute="full")
    setup = TrainingSetup(global_batch=1024)
    assert estimate_memory(m, s, L, setup, "deepep-gin").comm_buffers > \
        estimate_memory(m, s, L, setup, "nccl").comm_buffers


# --- time model ------------------------------------------------------------------------------


def test_step_time_parts_add_up_and_throughput_follows():
    m, s = MODEL_CATALOG["qwen3-235b-a22b"], get_system("p5en.48xlarge")
    L = Layout(tp=4, pp=4, vpp=2, ep=16, dp=4, recompute="selective")
    setup = TrainingSetup(global_batch=512)
    t = step_time(m, s, L, setup, "nccl")
    parts = (t.compute + t.tp_comm + t.ep_comm_exposed + t.pp_bubble + t.pp_comm_exposed
             + t.dp_comm_exposed + t.optimizer)
    assert t.step == pytest.approx(parts, rel=1e-9)
    assert t.tokens_per_s_per_gpu == pytest.approx(512 * 4096 / (t.step * L.world))
    assert t.micro_batches == 512 // (4 * 1)


def test_bubble_is_pp_minus_one_over_vpp_stage_times():
    m, s = MODEL_CATALOG["mixtral-8x7b"], get_system(P5)
    setup = TrainingSetup(global_batch=256)
    t1 = step_time(m, s, Layout(tp=1, pp=4, ep=8, dp=16), setup, "nccl")
    t8 = step_time(m, s, Layout(tp=1, pp=4, vpp=8, ep=8, dp=16), setup, "nccl")
    assert t8.pp_bubble < t1.pp_bubble / 4


def test_all_to_all_grows_when_expert_groups_leave_the_node():
    m, s = MODEL_CATALOG["qwen3-30b-a3b"], get_system(P5)
    setup = TrainingSetup(global_batch=256)
    inside = step_time(m, s, Layout(tp=1, pp=2, ep=8, dp=32), setup, "nccl")
    across = step_time(m, s, Layout(tp=1, pp=2, ep=32, dp=32), setup, "nccl")
    assert inside.ep_span_nodes == 1 and across.ep_span_nodes == 4
    assert across.ep_comm > 3 * inside.ep_comm


def test_dualpipe_hides_all_to_all_behind_compute():
    m, s = MODEL_CATALOG["deepseek-v3"], get_system("h800-ib", allow_reference=True)
    L = Layout(tp=1, pp=16, ep=64, dp=128, recompute="selective")
    base = TrainingSetup(global_batch=15360, precision="fp8")
    plain = step_time(m, s, L, base, "deepep-nvshmem")
    dual = step_time(m, s, L, dataclasses.replace(base, schedule="dualpipe"), "deepep-nvshmem")
    assert plain.ep_comm_exposed == pytest.approx(plain.ep_comm)
    assert dual.ep_comm_exposed < 0.1 * dual.ep_comm
    assert dual.step < plain.step


def test_deepep_sends_fewer_bytes_across_nodes_with_node_limited_routing():
    m = MODEL_CATALOG["deepseek-v3"]  # top-8 limited to 4 of 8 groups
    assert expected_remote_nodes(m, 8, "nccl") == pytest.approx(8 * 7 / 8)
    assert expected_remote_nodes(m, 8, "deepep-gin") == pytest.approx(4 * 7 / 8)
    assert expected_remote_nodes(m, 1, "nccl") == 0


def test_fp8_is_faster_than_bf16_for_large_gemms():
    m, s = MODEL_CATALOG["deepseek-v3"], get_system("p5en.48xlarge")
    L = Layout(tp=1, pp=8, vpp=4, ep=32, dp=32, recompute="selective")
    bf16 = step_time(m, s, L, TrainingSetup(global_batch=1024), "deepep-gin")
    fp8 = step_time(m, s, L, TrainingSetup(global_batch=1024, precision="fp8"), "deepep-gin")
    assert fp8.compute < bf16.compute


# --- expert-parallel backend rule -----------------------------------------------------------


@pytest.mark.parametrize("itype,nodes,span,expected", [
    ("p5.48xlarge", 2, 2, "nccl"),
    ("p5.48xlarge", 8, 4, "nccl"),
    ("p5.48xlarge", 12, 4, "nccl"),
    ("p5.48xlarge", 16, 2, "deepep-nvshmem"),
    ("p5e.48xlarge", 32, 8, "deepep-nvshmem"),
    ("p5en.48xlarge", 16, 4, "deepep-nvshmem"),
    ("p6-b200.48xlarge", 32, 4, "deepep-nvshmem"),
    ("p6-b300.48xlarge", 64, 8, "deepep-nvshmem"),
    ("p5en.48xlarge", 32, 1, "nccl"),  # expert groups inside a node: NVLink only
])
def test_backend_recommendation_follows_published_efa_results(itype, nodes, span, expected):
    assert recommend_backend(itype, nodes, span).backend == expected


def test_backend_override_is_kept_with_a_warning():
    c = recommend_backend("p5.48xlarge", 4, 4, override="deepep-gin")
    assert c.backend == "deepep-gin" and c.recommended == "nccl"
    assert "overrides the recommended nccl" in c.warning
    assert "optimistic" in c.warning and "gin_mode: proxy" in c.warning
    with pytest.raises(PlannerError, match="unknown expert-parallel backend 'pplx'"):
        recommend_backend("p5.48xlarge", 4, 4, override="pplx")


# --- search, errors, cost -------------------------------------------------------------------


def test_node_count_beyond_quota_is_refused():
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=8, max_nodes=4))
    # The planner names its request's fields; the CLI spells them as flags (test_planner_cli.py).
    assert str(err.value) == "nodes 8 exceeds the quota given by max_nodes (4)"
    assert err.value.fields == ("nodes", "max_nodes")


def test_pinned_layout_that_does_not_divide_is_refused():
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, pins=Pins(ep=24)))
    assert str(err.value) == ("requested layout does not divide: ep=24 does not divide the 128 "
                              "routed experts of qwen3-30b-a3b")
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=3, pins=Pins(tp=8, pp=2)))
    assert str(err.value) == ("requested layout does not divide: tp x cp x pp = 16 does not "
                              "divide the 24 GPUs of 3 x p5.48xlarge")
    with pytest.raises(PlannerError) as err:
        evaluate("qwen3-30b-a3b", P5, 2, Layout(tp=3, pp=1, ep=8, dp=5, mbs=1), TrainingSetup())
    assert str(err.value) == ("layout TP3 PP1 EP8 DP5 MBS1 does not divide: tp x cp x pp x dp = "
                              "15 GPUs, but 2 node(s) of p5.48xlarge have 16")


def test_kit_plans_split_the_layers_as_the_trainer_does():
    # A pp that does not divide the layers runs the trainer's uneven split: the launcher passes
    # --decoder-first/last-pipeline-num-layers (rltrainer.contract.pipeline_split), which
    # Megatron-LM 37f9161 needs for it (arguments.py:623-636). The planner prices that same split.
    from rltrainer.contract import pipeline_split
    from infra.planner import layout

    assert layout.pipeline_split is pipeline_split  # one definition
    # Qwen3-235B-A22B's 94 layers on 8 p5en may use PP8 again (11 + 6 x 12 + 11)
    r = plan(PlanRequest("qwen3-235b-a22b", "p5en.48xlarge", nodes=8, top=10**6))
    assert 8 in {c.layout.pp for c in r.candidates}
    even = plan(PlanRequest("qwen3-235b-a22b", "p5en.48xlarge", nodes=8, top=10**6,
                            even_pipeline=True))  # a trainer image from before the split
    assert {c.layout.pp for c in even.candidates} <= {1, 2, 47, 94}
    # Megatron's middle stages are equal, so 48 layers over 14 stages are 6 + 12 x 3 + 6: the step
    # charges 6 layers on the fullest stage (not ceil(48 / 14) = 4), twice PP16's 3, and the end
    # stages' memory counts 6 layers, as PP8's does
    m, system, setup = get_model("qwen3-30b-a3b"), get_system(P5), TrainingSetup()
    pp14, pp16, pp8 = (Layout(tp=1, pp=pp, ep=1, dp=1) for pp in (14, 16, 8))
    assert step_time(m, system, pp14, setup, "nccl").compute == pytest.approx(
        2 * step_time(m, system, pp16, setup, "nccl").compute)
    assert stage_params(m, pp14, "first") == stage_params(m, pp8, "first")
    # a pinned pp that does not divide plans, and the plan says which split the launcher passes
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=5, pins=Pins(pp=5)))
    assert {c.layout.pp for c in r.candidates} == {5}
    assert ("48 layers do not split evenly over 5 pipeline stages: the launcher passes "
            "--decoder-first-pipeline-num-layers 9 --decoder-last-pipeline-num-layers 9 (9 + 3 x 10 + 9); "
            "the step time charges the fullest stage, 10 layers") in r.warnings
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, pins=Pins(pp=5), even_pipeline=True))
    assert str(err.value) == (
        "requested layout does not divide: pp=5 does not divide the 48 layers of qwen3-30b-a3b, "
        "and even_pipeline keeps to even splits; use a pp that divides 48 (1, 2, 3, 4, 6, 8, 12, "
        "16, 24, 48)")
    # every stage holds a layer: more stages than layers is refused, naming the sizes
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=8, pins=Pins(pp=64)))
    assert str(err.value) == ("requested layout does not divide: pp x vpp = 64 pipeline chunks "
                              "exceed the 48 layers of qwen3-30b-a3b")


def test_kit_plans_do_not_interleave_the_pipeline():
    # the trainer's run config has no vpp and its launcher passes no virtual-pipeline flag, so
    # Megatron runs vpp 1 (37f9161 arguments.py:620-621); the search used to pick VPP6/VPP8
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, top=10**6))
    assert {c.layout.vpp for c in r.candidates} == {1}
    free = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, top=10**6, interleaving=True))
    assert max(c.layout.vpp for c in free.candidates) > 1
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, pins=Pins(pp=2, vpp=2)))
    assert str(err.value) == (
        "requested layout: vpp 2: the kit's launcher runs no interleaved pipeline (the trainer's "
        "run config has no virtual-pipeline size, so Megatron would run vpp 1); drop vpp")
    from infra.planner.config_writer import write_config
    from tests.support import REPO_ROOT
    kit = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, top=10**6, interleaving=True,
                           setup=TrainingSetup(max_tokens_per_gpu=20480)))
    best = kit.candidates[[c.layout.vpp for c in kit.candidates].index(
        max(c.layout.vpp for c in kit.candidates))]
    assert best.layout.vpp > 1
    with pytest.raises(PlannerError, match=r"interleaves its pipeline \(vpp \d+\)"):
        write_config(REPO_ROOT / "examples" / "p5-2node.yaml", best, "qwen3-30b-a3b", P5, "p5")


def test_write_config_refuses_a_plan_for_fixed_micro_batches():
    """A plan sized for mbs x seq_len sequences is not what the launcher runs (dynamic batching,
    micro-batches up to the token cap): writing it would launch a layout never planned."""
    from infra.planner.config_writer import write_config
    from tests.support import REPO_ROOT
    fixed = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2)).best
    assert fixed.memory.max_tokens_per_gpu == 0
    with pytest.raises(PlannerError, match="plan sized fixed micro-batches"):
        write_config(REPO_ROOT / "examples" / "p5-2node.yaml", fixed, "qwen3-30b-a3b", P5, "p5")


def test_model_too_big_for_the_quota_says_how_close_it_got():
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("kimi-k2", P5, max_nodes=2))
    msg = str(err.value)
    assert msg.startswith("kimi-k2 does not fit on 1 to 2 nodes of p5.48xlarge: the closest layout")
    assert "GiB per GPU" in msg and "p5.48xlarge has 79.2 usable" in msg


def test_search_ranks_fitting_layouts_and_explains_rejections():
    r = plan(PlanRequest("qwen3-235b-a22b", "p5en.48xlarge", nodes=4, top=5))
    assert 1 <= len(r.candidates) <= 5
    tps = [c.time.tokens_per_s_per_gpu for c in r.candidates]
    assert tps == sorted(tps, reverse=True)
    assert all(c.memory.fits and c.nodes == 4 for c in r.candidates)
    memory = [x for x in r.rejected if x.needed_gib is not None]
    assert memory and all(re_.reason.endswith("p5en.48xlarge has 139.7 usable") for re_ in memory)
    assert any("GiB per GPU" in re_.reason for re_ in memory)
    assert all(re_.reason for re_ in r.rejected)


def test_node_search_stays_within_the_quota_and_prefers_cheap_tokens():
    r = plan(PlanRequest("qwen3-30b-a3b", P5, max_nodes=4, top=50))
    assert r.node_counts == (1, 2, 3, 4)
    assert all(c.nodes <= 4 for c in r.candidates)
    costs = [c.cost.dollars_per_million_tokens for c in r.candidates]
    assert costs == sorted(costs)
    fast = plan(PlanRequest("qwen3-30b-a3b", P5, max_nodes=4, objective="throughput"))
    assert fast.best.nodes == 4


def test_cost_per_hour_and_per_million_tokens():
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2))
    c = r.best
    assert c.cost.dollars_per_hour == pytest.approx(2 * INSTANCE_TYPES[P5].on_demand_usd_per_hour)
    tokens_per_hour = c.time.tokens_per_s_per_gpu * 16 * 3600
    assert c.cost.dollars_per_million_tokens == pytest.approx(
        c.cost.dollars_per_hour / tokens_per_hour * 1e6)


def test_pins_are_respected():
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2,
                         pins=Pins(tp=2, ep=8, recompute="full")))
    assert all((c.layout.tp, c.layout.ep, c.layout.recompute) == (2, 8, "full")
               for c in r.candidates)


def test_colocated_rollout_search_reports_both_phases():
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, setup=TrainingSetup(
        colocate_rollout=True, rollout_mem_fraction=0.7)))
    m = r.best.memory
    assert m.rollout_peak > 0.7 * m.capacity
    assert m.fits
    assert any("offload" in w for w in r.warnings)


def test_plan_result_serialises_to_plain_json():
    import json

    r = plan(PlanRequest("mixtral-8x7b", P5, nodes=2, top=2))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["model"] == "mixtral-8x7b" and len(d["candidates"]) == 2
    best = d["candidates"][0]
    assert set(best["layout"]) >= {"tp", "pp", "ep", "etp", "cp", "vpp", "dp", "mbs", "recompute"}
    assert best["ep_backend"]["backend"] in ("nccl", "deepep-nvshmem", "deepep-gin")


def test_deepseek_1024_gpu_search_is_fast():
    r = plan(PlanRequest("deepseek-v3", P5, nodes=128,
                         setup=TrainingSetup(global_batch=8192, precision="fp8")))
    assert r.best.layout.world == 1024
    assert math.isfinite(r.best.time.step)


def test_partial_pins_leave_the_rest_to_the_search():
    r = plan(PlanRequest("qwen3-30b-a3b", P5, nodes=4, pins=Pins(tp=8, pp=2, ep=16)))
    assert (r.best.layout.tp, r.best.layout.pp, r.best.layout.ep) == (8, 2, 16)
    assert plan(PlanRequest("qwen3-30b-a3b", P5, nodes=2, pins=Pins(mbs=2))).best.layout.mbs == 2


def test_rollout_engine_spans_enough_nodes_for_large_models():
    from infra.planner.memory import rollout_engine_gpus

    setup = TrainingSetup(colocate_rollout=True, rollout_mem_fraction=0.7)
    assert rollout_engine_gpus(MODEL_CATALOG["qwen3-30b-a3b"], get_system(P5), setup, 16) == 8
    big = rollout_engine_gpus(MODEL_CATALOG["deepseek-v3"], get_system("p5en.48xlarge"), setup,
                              128)
    assert big % 8 == 0 and big > 8
    pinned = dataclasses.replace(setup, rollout_engine_gpus=16)
    assert rollout_engine_gpus(MODEL_CATALOG["deepseek-v3"], get_system(P5), pinned, 128) == 16


@pytest.mark.parametrize("key", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "kimi-k2"])
@pytest.mark.parametrize("instance", ["p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"])
def test_a_training_plan_s_colocated_engine_is_the_grpo_engine_rule_s(key, instance):
    # was: a training plan's colocated engine (--colocate without a config) took whole nodes
    # whose weights used at most half of the share (deepseek-v3 on p5en: 32 GPUs), while the
    # GRPO search and a written config's engine allow 90% of it (16 GPUs)
    from infra.planner.colocated import colocated_engine

    m, s = MODEL_CATALOG[key], get_system(instance)
    try:
        grpo_rule, _ = colocated_engine(m, s, {}, "a new config")
    except PlannerError:
        return  # no engine fits: nothing to compare
    setup = TrainingSetup(colocate_rollout=True, rollout_mem_fraction=0.7)
    L = Layout(tp=8, pp=8, ep=8, dp=s.gpus_per_node)  # 64 nodes: every engine size tiles them
    mem = estimate_memory(m, s, L, setup, "nccl")
    assert mem.rollout_weights == pytest.approx(
        2 * (m.total_params + m.mtp_params) / grpo_rule / 2**30)


def test_colocate_warning_names_the_cli_flag():
    from infra.planner import PlanRequest, plan

    result = plan(PlanRequest("qwen3-30b-a3b", "p5en.48xlarge", nodes=1, setup=TrainingSetup(
        colocate_rollout=True, rollout_mem_fraction=0.5)))
    text = " ".join(result.warnings)
    assert "--no-rollout-offload" in text and "rollout_offload=False" in text


def test_rl_engines_with_deepep_span_the_whole_engine():
    from infra.planner import get_model, get_system
    from infra.planner.rl import RLSetup, engine_layouts

    layouts = engine_layouts(get_model("deepseek-v3"), get_system("p5en.48xlarge"),
                             rl=RLSetup(), gpus=256, backend="deepep-gin")
    assert layouts and all(e.ep == e.gpus for e in layouts)
    assert {e.gpus for e in layouts} >= {16, 32}  # BF16 DeepSeek-V3 needs >= 16 H200 per engine


def test_expert_groups_fill_the_nvlink_domain_before_the_fabric():
    # issue #24: an NVL72 domain keeps an EP32 group (4 nodes of 8) on NVLink; on HGX it spans
    # four nodes over EFA. A replaced System stands in for the NVL72 catalog entry here.
    from dataclasses import replace as _replace

    from infra.planner import get_model, get_system
    from infra.planner.timing import ep_span, step_time

    hgx = get_system("p6-b200.48xlarge")
    nvl = _replace(hgx, nvlink_domain_gpus=72)
    L = Layout(ep=32, dp=32)
    assert ep_span(L, hgx.nvlink_gpus) == (8, 4) and ep_span(L, nvl.nvlink_gpus) == (32, 1)
    setup = TrainingSetup(seq_len=4096, global_batch=256)
    m = get_model("qwen3-30b-a3b")
    over_efa = step_time(m, hgx, L, setup, "nccl")
    on_nvlink = step_time(m, nvl, L, setup, "nccl")
    assert on_nvlink.ep_span_nodes == 1 and over_efa.ep_span_nodes == 4
    assert on_nvlink.ep_comm < over_efa.ep_comm / 3


def test_dynamic_batching_sizes_activations_by_the_token_cap_not_mbs():
    """Miles' dynamic batching (what the launcher runs) packs each micro-batch up to the cap x cp
    tokens and ignores the micro-batch size: the activations are those of cap tokens per GPU
    (a fixed micro-batch of one cap x cp sequence), whatever mbs is; a sample longer than the
    cap x cp runs alone, so it sizes them instead."""
    m, s = get_model("qwen3-30b-a3b"), get_system(P5)
    dyn = TrainingSetup(seq_len=4096, global_batch=256, max_tokens_per_gpu=20480)
    for cp in (1, 2):
        acts = {mbs: estimate_memory(m, s, Layout(tp=2, pp=2, ep=8, dp=4 // cp, cp=cp, mbs=mbs,
                                                  recompute="selective"), dyn, "nccl").activations
                for mbs in (1, 2)}
        fixed = estimate_memory(m, s, Layout(tp=2, pp=2, ep=8, dp=4 // cp, cp=cp, mbs=1,
                                             recompute="selective"),
                                TrainingSetup(seq_len=20480 * cp, global_batch=256), "nccl")
        assert acts[1] == acts[2] == pytest.approx(fixed.activations)
    long = TrainingSetup(seq_len=4096, global_batch=256, max_tokens_per_gpu=4096,
                         longest_sample=8704)
    got = estimate_memory(m, s, Layout(tp=1, pp=1, ep=8, dp=16, recompute="full"), long, "nccl")
    assert got.micro_batch_tokens == 8704 and got.max_tokens_per_gpu == 4096

"""`rlkit plan`: table and JSON output, error texts, and writing the layout into a kit config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ops.cli import main
from tests.support import REPO_ROOT

REPO = REPO_ROOT
P5_EXAMPLE = REPO / "examples" / "p5-2node.yaml"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_table_output(capsys):
    rc, out, _ = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--top", "3")
    assert rc == 0
    for text in ("Qwen3-30B-A3B", "tok/s/GPU", "$/M tok", "Best", "memory per GPU", "step",
                 "EP backend"):
        assert text in out


def test_json_output(capsys):
    rc, out, _ = run(capsys, "--model", "deepseek-v3", "--instance", "p5en.48xlarge",
                     "--max-nodes", "16", "--precision", "fp8", "--bf16-moments", "--json",
                     "--top", "2")
    assert rc == 0
    d = json.loads(out)
    assert d["model"] == "deepseek-v3" and d["instance_type"] == "p5en.48xlarge"
    assert len(d["candidates"]) == 2
    best = d["candidates"][0]
    assert best["nodes"] <= 16 and best["memory_gib"]["fits"] is True
    assert best["cost"]["dollars_per_million_tokens"] > 0


@pytest.mark.parametrize("argv,message", [
    (["--model", "gpt-moe", "--instance", "p5.48xlarge"],
     "rlkit plan: error: unknown model 'gpt-moe'; known models: deepseek-v3, kimi-k2, "
     "mixtral-8x22b, mixtral-8x7b, qwen3-235b-a22b, qwen3-30b-a3b (or describe your own with "
     "--model-file)"),
    (["--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "8", "--max-nodes", "4"],
     "rlkit plan: error: --nodes 8 exceeds the quota given by --max-nodes (4)"),
    (["--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2", "--tp", "3"],
     "rlkit plan: error: requested layout does not divide: tp=3 does not divide the 32 attention "
     "heads of qwen3-30b-a3b"),
    (["--model", "qwen3-30b-a3b", "--instance", "p4d.24xlarge"],
     "rlkit plan: error: unknown instance type 'p4d.24xlarge'; known: p5.48xlarge, p5e.48xlarge, "
     "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge"),
])
def test_errors_are_one_clear_line(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert out == ""
    assert err.strip() == message


@pytest.mark.parametrize("flags,message", [
    (["--placement", "disaggregated"], "--placement disaggregated needs --rl: it shapes a GRPO "
     "step, which a training plan ignores; add --rl, or drop --placement"),
    (["--off-policy-steps", "3"], "--off-policy-steps 3 needs --rl: it shapes a GRPO step, which a "
     "training plan ignores; add --rl, or drop --off-policy-steps"),
    (["--prompts", "5", "--engine-gpus", "8"], "--prompts 5, --engine-gpus 8 need --rl: they "
     "shape a GRPO step, which a training plan ignores; add --rl, or drop them"),
    (["--rollout-mem-fraction", "0.5"], "--rollout-mem-fraction 0.5 needs --colocate or --rl: it "
     "sizes a rollout engine, and this training plan has none; add --colocate (the engine shares "
     "the training GPUs) or plan a GRPO step with --rl, or drop --rollout-mem-fraction"),
    (["--rollout-kv-tokens", "100000"], "--rollout-kv-tokens 100000 needs --colocate: it sizes a "
     "rollout engine, and this training plan has none; add --colocate (the engine shares the "
     "training GPUs), or drop --rollout-kv-tokens"),
    (["--rollout-kv-tokens", "0", "--no-rollout-offload"], "--rollout-kv-tokens 0, "
     "--no-rollout-offload need --colocate: they size a rollout engine, and this training plan "
     "has none; add --colocate (the engine shares the training GPUs), or drop them"),
])
def test_flags_a_training_plan_would_ignore_are_refused(capsys, flags, message):
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                       "--nodes", "2", *flags)
    assert (rc, out) == (2, "")
    assert err.strip() == f"rlkit plan: error: {message}"


def test_the_config_s_grpo_shape_is_not_a_typed_flag(capsys, tmp_path):
    # the config fills --prompts, --max-response-len, the mode... into the same options; a
    # training plan from it must still run
    path = tmp_path / "kit.yaml"
    data = yaml.safe_load(P5_EXAMPLE.read_text())
    data["training"]["rollout"] = {"overlap": "batch", "off_policy_steps": 1,
                                   "placement": "disaggregated", "nodes": 1}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rc, _, err = run(capsys, "--config", str(path))
    assert rc == 0, err
    rc, _, err = run(capsys, "--config", str(path), "--colocate", "--rollout-mem-fraction", "0.5",
                     "--rollout-kv-tokens", "1000")
    assert rc == 0, err


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "kit.yaml"
    shutil.copy(P5_EXAMPLE, path)
    return path


def test_write_config_sets_the_training_layout_and_keeps_the_rest(capsys, config):
    before = config.read_text()
    original = yaml.safe_load(before)
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                       "--nodes", "2", "--write-config", str(config), "--node-group", "p5",
                       "--json")
    assert rc == 0, err
    best = json.loads(out)["candidates"][0]
    data = yaml.safe_load(config.read_text())
    t = data["training"]
    assert t["model"] == "qwen3-30b-a3b" and t["node_group"] == "p5" and t["nodes"] == 2
    lay = best["layout"]
    assert t["parallel"] == {"tp": lay["tp"], "pp": lay["pp"], "cp": lay["cp"], "ep": lay["ep"],
                             "etp": lay["etp"], "vpp": lay["vpp"] if lay["vpp"] > 1 else None,
                             "recompute": lay["recompute"],
                             # the micro-batch token cap the memory was sized for (launcher default)
                             "max_tokens_per_gpu": best["memory_gib"]["max_tokens_per_gpu"]}
    assert t["parallel"]["max_tokens_per_gpu"] == 20480
    assert t["expert_parallel"]["backend"] == best["ep_backend"]["backend"]
    # every other key unchanged, and the text outside the training block byte-identical
    for key in original:
        if key != "training":
            assert data[key] == original[key], key
    head = before.split("\ntraining:")[0]
    assert config.read_text().startswith(head)
    assert "# Two p5.48xlarge on demand" in config.read_text()


def test_written_config_passes_the_kit_config_validation(capsys, config):
    from infra.config import load_config

    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(config), "--node-group", "p5")
    assert rc == 0, err
    cfg = load_config(config)
    assert cfg.training.model == "qwen3-30b-a3b"
    assert cfg.training.nodes == 2
    assert cfg.training.expert_parallel.backend in ("nccl", "deepep-nvshmem", "deepep-gin")


def test_write_config_refuses_a_missing_node_group(capsys, config):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(config), "--node-group", "p5en")
    assert rc == 2
    assert err.strip() == (
        f"rlkit plan: error: node group 'p5en' is not in gpu_node_groups of {config} (it has: "
        "p5); add it or pass --node-group with one of those")
    assert config.read_text() == P5_EXAMPLE.read_text()


def test_write_config_refuses_another_instance_type(capsys, config):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5en.48xlarge",
                     "--nodes", "2", "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert err.strip() == (
        f"rlkit plan: error: node group 'p5' in {config} runs p5.48xlarge, but the plan is for "
        "p5en.48xlarge; plan for p5.48xlarge or pick another group")
    assert config.read_text() == P5_EXAMPLE.read_text()


def test_write_config_refuses_more_nodes_than_the_group_allows(capsys, config):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "8", "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert "allows at most 4 (max_size)" in err


def test_write_config_needs_a_node_group(capsys, config):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(config))
    assert rc == 2
    assert "--write-config needs --node-group NAME" in err


def test_write_config_appends_a_training_block_when_there_is_none(capsys, tmp_path):
    path = tmp_path / "kit.yaml"
    data = yaml.safe_load(P5_EXAMPLE.read_text())
    data.pop("training")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # A model whose weights and checkpoints fit the example's shared filesystem: the writer
    # refuses a result that fails validation.
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(path), "--node-group", "p5")
    assert rc == 0, err
    assert yaml.safe_load(path.read_text())["training"]["model"] == "qwen3-30b-a3b"


def test_a_refused_write_to_a_new_file_leaves_no_file(capsys, tmp_path):
    # the starter config runs p6e-gb200 on demand, which validation refuses (Capacity Blocks
    # only), so the merged config is refused; the new file must not be left behind (a rerun
    # would then read it as the user's config)
    target = tmp_path / "new.yaml"
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p6e-gb200.36xlarge",
                     "--nodes", "2", "--price-per-hour", "100", "--write-config", str(target),
                     "--node-group", "gb")
    assert rc == 2
    assert f"not writing {target}: the result would not be a valid config" in err
    assert "created" not in err
    assert not target.exists() and list(tmp_path.iterdir()) == []  # no temp file either
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5en.48xlarge",
                     "--nodes", "2", "--write-config", str(target), "--node-group", "p5en")
    assert rc == 0, err
    assert f"created {target}" in err  # still a new file: the refused run left nothing
    assert yaml.safe_load(target.read_text())["training"]["model"] == "qwen3-30b-a3b"


def test_a_new_file_gets_the_shared_file_system_the_plan_sizes(capsys, tmp_path):
    # the starter's default 1,200 GiB cannot hold DeepSeek-V3's weights and checkpoints, so a new
    # file for it was always refused ("set capacity_gib" in a file that does not exist)
    target = tmp_path / "dsv3.yaml"
    rc, _, err = run(capsys, "--model", "deepseek-v3", "--instance", "p5en.48xlarge",
                     "--nodes", "16", "--write-config", str(target), "--node-group", "p5en")
    assert rc == 0, err
    assert f"created {target}" in err
    from infra.config import load_config
    cfg = load_config(target)
    assert cfg.storage.shared_filesystem.capacity_gib == 19200  # what the plan printed
    assert cfg.training.hf_checkpoint == "/fsx/models/DeepSeek-V3"


def _with_capacity(config: Path, gib: int, hf_checkpoint: str | None = None) -> None:
    data = yaml.safe_load(config.read_text())
    data["storage"]["shared_filesystem"] = {"capacity_gib": gib}
    if hf_checkpoint is not None:
        data["training"]["hf_checkpoint"] = hf_checkpoint
    config.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("before,after", [
    (None, "/fsx/models/Mixtral-8x7B-v0.1"),  # the default (Qwen3-30B-A3B's) -> the kit's
    ("/root/models/Qwen3-30B-A3B/", "/root/models/Mixtral-8x7B-v0.1/"),  # same place
    ("/fsx/models/my-finetune", "/fsx/models/Mixtral-8x7B-v0.1"),
])
def test_write_config_moves_the_checkpoint_with_the_model(capsys, config, before, after):
    # the example trains qwen3-30b-a3b; a plan for another model must not keep its weights
    _with_capacity(config, 2400, before)
    rc, _, err = run(capsys, "--model", "mixtral-8x7b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(config), "--node-group", "p5")
    assert rc == 0, err
    training = yaml.safe_load(config.read_text())["training"]
    assert (training["model"], training["hf_checkpoint"]) == ("mixtral-8x7b", after)
    assert f"note: set training.hf_checkpoint to {after}" in err


def test_write_config_keeps_the_checkpoint_of_the_same_model(capsys, config):
    _with_capacity(config, 1200, "/fsx/models/my-qwen3-finetune")
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(config), "--node-group", "p5")
    assert rc == 0, err
    assert yaml.safe_load(config.read_text())["training"]["hf_checkpoint"] == \
        "/fsx/models/my-qwen3-finetune"
    assert "hf_checkpoint" not in err


def test_write_config_refuses_a_model_without_a_known_checkpoint(capsys, config, tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text("key: tiny-moe\nnum_hidden_layers: 4\nhidden_size: 1024\nvocab_size: 32000\n"
                     "num_attention_heads: 16\nnum_key_value_heads: 4\nhead_dim: 64\n"
                     "n_routed_experts: 16\nnum_experts_per_tok: 2\nmoe_intermediate_size: 512\n")
    before = config.read_text()
    rc, _, err = run(capsys, "--model-file", str(model), "--instance", "p5.48xlarge",
                     "--nodes", "1", "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert err.strip() == (
        f"rlkit plan: error: not writing {config}: training.model would change from "
        "qwen3-30b-a3b to tiny-moe, but training.hf_checkpoint (/fsx/models/Qwen3-30B-A3B) holds "
        "qwen3-30b-a3b's weights and the kit knows no weights location for tiny-moe; the kit "
        "trains catalog models only: add tiny-moe to MODEL_CATALOG in infra/catalog/models.py "
        "(its config.json values and Hugging Face source), then rerun")
    assert config.read_text() == before


def _gb200_config(tmp_path, ultraserver_type: str, nodes: int):
    data = yaml.safe_load((REPO / "examples" / "p6e-gb200-ultraserver.yaml").read_text())
    data["gpu_node_groups"]["gb200"]["capacity"]["ultraserver_type"] = ultraserver_type
    data["training"]["nodes"] = nodes
    path = tmp_path / "gb200.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_node_counts_stop_at_one_nvlink_domain(capsys, tmp_path):
    # the kit refuses a run beyond one NVLink domain (infra/config/ultraserver.py: training.nodes
    # <= the UltraServer's instances), so the plan must not pick one: the domain comes from the
    # catalog (InstanceType.ultraservers / nvlink_domain_instances), never the type's name
    rc = main(["plan", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-235b-a22b",
               "--max-nodes", "32", "--price-per-hour", "100", "--json", "--top", "100"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    assert d["node_counts_searched"][-1] == 18
    assert max(c["nodes"] for c in d["candidates"]) <= 18
    assert d["warnings"][0] == (
        "searched up to 18 nodes, not 32: a run on p6e-gb200.36xlarge stays inside one NVLink "
        "domain (u-p6e-gb200x72, 18 instances): its workers claim one ComputeDomain, and the kit "
        "does not run across domains")
    rc = main(["plan", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-30b-a3b",
               "--nodes", "20", "--price-per-hour", "100"])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err.strip() == (
        "rlkit plan: error: --nodes 20: a run on p6e-gb200.36xlarge stays inside one NVLink "
        "domain (u-p6e-gb200x72, 18 instances): its workers claim one ComputeDomain, and the kit "
        "does not run across domains; plan 18 nodes or fewer")
    rc = main(["plan", "--rl", "--instance", "p6e-gb200.36xlarge", "--model", "qwen3-30b-a3b",
               "--max-nodes", "32", "--price-per-hour", "100", "--json", "--top", "1000",
               "--max-response-len", "1024"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert max(c["nodes"] for c in json.loads(out)["candidates"]) <= 18


def test_the_config_s_ultraserver_type_sets_the_domain(capsys, tmp_path):
    from infra.planner import get_system

    assert get_system("p6e-gb200.36xlarge", ultraserver_type="u-p6e-gb200x36").nvlink_gpus == 36
    config = _gb200_config(tmp_path, "u-p6e-gb200x36", 8)
    rc = main(["plan", "--config", str(config), "--max-nodes", "16", "--price-per-hour", "100",
               "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    assert d["node_counts_searched"][-1] == 9
    assert "(u-p6e-gb200x36, 9 instances)" in d["warnings"][0]
    assert "NVLink domain (u-p6e-gb200x36, 9 instances) holds 36" in \
        d["candidates"][0]["ep_backend"]["reason"]


def test_a_training_plan_from_a_config_trains_its_global_batch(capsys, config):
    # training.grpo.global_batch_size 20 on 16 GPUs: the trainer refuses a data-parallel size
    # that does not divide it (DP8 was picked for the planner's own 256)
    data = yaml.safe_load(config.read_text())
    data["training"]["grpo"] = {"rollout_batch_size": 5, "n_samples_per_prompt": 4,
                                "global_batch_size": 20}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    for argv in (["--config", str(config)],
                 ["--config", str(config), "--model", "qwen3-30b-a3b", "--instance",
                  "p5.48xlarge", "--nodes", "2"]):
        rc, out, err = run(capsys, *argv, "--json", "--top", "100")
        assert rc == 0, err
        d = json.loads(out)
        assert d["setup"]["global_batch"] == 20
        assert all(20 % c["layout"]["dp"] == 0 for c in d["candidates"])
    rc, _, err = run(capsys, "--config", str(config), "--write-config", str(config))
    assert rc == 0, err  # the written layout passes the trainer's validation
    rc, out, err = run(capsys, "--config", str(config), "--global-batch", "64", "--json")
    assert rc == 0 and json.loads(out)["setup"]["global_batch"] == 64  # the flag overrides it



def test_a_training_plan_from_a_disaggregated_config_uses_its_training_pool(capsys, config):
    """training.nodes counts both pools; the training plan planned the rollout pool's nodes as
    training nodes too."""
    data = yaml.safe_load(config.read_text())
    data["gpu_node_groups"]["p5"].update(desired_size=4, max_size=4)
    data["training"].update(nodes=4, rollout={"placement": "disaggregated", "nodes": 2})
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    rc, out, err = run(capsys, "--config", str(config), "--json")
    assert rc == 0, err
    assert {c["nodes"] for c in json.loads(out)["candidates"]} == {2}
    assert "planning training on its 2 of training.nodes 4 (the other 2 run the rollout " \
           "engines); --rl plans the whole GRPO step" in err



def test_writing_a_benchmark_only_backend_says_launch_will_refuse_it(capsys, config):
    """deepep-gin makes a valid config (the gate benchmarks it) that `rlkit launch` refuses to
    train with; the writer said nothing, so the refusal came only at launch."""
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--ep-backend", "deepep-gin", "--write-config", str(config),
                     "--node-group", "p5")
    assert rc == 0, err
    assert "note: rlkit launch will refuse this config: training.expert_parallel.backend = " \
           "'deepep-gin'" in err
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--ep-backend", "nccl", "--write-config", str(config),
                     "--node-group", "p5")
    assert rc == 0 and "will refuse" not in err


def test_benchmark_script_runs(capsys):
    import runpy

    module = runpy.run_path(str(REPO / "benchmarks" / "plan_search.py"))
    # One timed run of each search proves the script; three (its default) are for timing it.
    module["main"].__globals__["RUNS"] = 1
    assert module["main"]() == 0
    out = capsys.readouterr().out
    assert "DeepSeek-V3" in out and "1024 GPUs" in out


# --- RL (GRPO) planning, plot, setup validation ---------------------------------------------

RL_ARGS = ("--rl", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--max-nodes", "3",
           "--prompts", "16", "--samples-per-prompt", "8", "--max-response-len", "4096")


def test_rl_table_shows_the_breakdown_and_the_best_placement(capsys):
    rc, out, err = run(capsys, *RL_ARGS)
    assert rc == 0, err
    for text in ("GRPO step", "rollout", "sync", "train", "samples/s", "$/step",
                 "Best placement", "weight sync"):
        assert text in out


def test_rl_json_ranks_by_cost_per_step(capsys):
    rc, out, err = run(capsys, *RL_ARGS, "--json", "--top", "4")
    assert rc == 0, err
    d = json.loads(out)
    costs = [c["dollars_per_step"] for c in d["candidates"]]
    assert costs == sorted(costs)
    best = d["candidates"][0]
    t = best["time"]
    assert t["step"] == pytest.approx(t["rollout"] + t["sync"] + t["train"], rel=1e-3)
    assert {c["placement"] for c in d["best_per_nodes"]} <= {"colocated", "disaggregated"}


def test_rl_disaggregated_only(capsys):
    rc, out, err = run(capsys, *RL_ARGS, "--placement", "disaggregated", "--json")
    assert rc == 0, err
    for c in json.loads(out)["candidates"]:
        assert c["placement"] == "disaggregated"
        assert c["nodes"] == c["train_nodes"] + c["rollout_nodes"]


def test_rl_write_config_writes_the_engine_layout(capsys, config):
    from infra.config import load_config

    rc, out, err = run(capsys, *RL_ARGS, "--placement", "colocated", "--max-nodes", "2",
                       "--write-config", str(config), "--node-group", "p5", "--json")
    assert rc == 0, err
    best = json.loads(out)["candidates"][0]
    cfg = load_config(config)
    assert cfg.training.rollout.gpus_per_engine == best["engine"]["gpus"]
    assert cfg.training.rollout.ep == best["engine"]["ep"]
    assert cfg.training.nodes == best["nodes"]
    assert cfg.training.grpo.rollout_batch_size == 16
    assert cfg.training.grpo.global_batch_size == 128


def test_rl_write_config_writes_the_rollout_pool_and_mode_and_a_colocated_plan_clears_them(
        capsys, config):
    from infra.config import load_config

    rc, out, err = run(capsys, *RL_ARGS, "--placement", "disaggregated", "--overlap", "batch",
                       "--off-policy-steps", "2", "--write-config", str(config), "--node-group",
                       "p5", "--json")
    assert rc == 0, err
    best = json.loads(out)["candidates"][0]
    ro = load_config(config).training.rollout
    assert (ro.placement, ro.nodes, ro.overlap, ro.off_policy_steps) == (
        "disaggregated", best["rollout_nodes"], "batch", 2)
    assert load_config(config).training.nodes == best["nodes"]  # the pool is part of the run
    rc, _, err = run(capsys, *RL_ARGS, "--placement", "colocated", "--write-config", str(config),
                     "--node-group", "p5")
    assert rc == 0, err
    written = config.read_text()
    assert "placement" not in written and "off_policy_steps" not in written


def test_a_training_plan_is_not_written_over_a_disaggregated_rollout(capsys, config):
    text = config.read_text().replace(
        "  nodes: 2\n", "  nodes: 2\n  rollout:\n    placement: disaggregated\n    nodes: 1\n", 1)
    config.write_text(text)
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert err.strip() == (
        f"rlkit plan: error: not writing {config}: its training.rollout.placement is "
        "disaggregated (a rollout pool of 1 node(s)), but a training plan sizes the layout for "
        "every node; plan with --rl to write the GRPO step, or set training.rollout.placement: "
        "colocated (and remove training.rollout.nodes) first")
    assert config.read_text() == text


def test_rl_write_config_refuses_a_memory_share_the_config_cannot_hold(capsys, config):
    rc, _, err = run(capsys, *RL_ARGS, "--placement", "colocated", "--rollout-mem-fraction",
                     "0.5", "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert err.strip() == (
        "rlkit plan: error: --rollout-mem-fraction 0.5: the config has no field for the engines' "
        "memory share, and the launcher runs colocated engines with 0.7; drop "
        "--rollout-mem-fraction to plan what the launcher runs")
    assert config.read_text() == P5_EXAMPLE.read_text()


def test_plot_renders_a_png_from_a_fixed_plan(tmp_path):
    from infra.planner.plot import PlotData, draw

    data = PlotData(title="fixed plan", nodes=(1, 2, 4), dollars_per_million_tokens=(3.0, 2.5, 2.8),
                    chosen_nodes=2, chosen_label="colocated, 2x SGLang TP8 EP8",
                    breakdown=(("rollout", 90.0), ("weight sync", 10.0), ("training", 20.0)))
    path = draw(data, tmp_path / "plan.png")
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(raw) > 20_000  # two panels with axes, lines, bars and text


def test_plot_from_the_cli(capsys, tmp_path):
    png = tmp_path / "train.png"
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--max-nodes", "3", "--plot", str(png))
    assert rc == 0, err
    assert png.stat().st_size > 20_000


def test_plot_without_prices_is_one_clear_error(capsys, tmp_path):
    rc, _, err = run(capsys, *RL_ARGS[:3], "--instance", "p6-b300.48xlarge", "--max-nodes", "1",
                     "--plot", str(tmp_path / "x.png"))
    assert rc == 2
    assert err.strip() == ("rlkit plan: error: nothing to plot: no layout has a price; "
                           "pass --price-per-hour")


@pytest.mark.parametrize("name", ["x.txt", "myplot"])
def test_plot_names_a_png_file(capsys, tmp_path, name):
    # x.txt was a ValueError from matplotlib ("This is a bug in rlkit"); myplot was written as
    # myplot.png and reported as myplot
    target = tmp_path / name
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                       "--nodes", "2", "--plot", str(target))
    assert (rc, out) == (2, "")
    assert err.strip() == (f"rlkit plan: error: --plot {target}: the plot is a PNG image, written "
                           f"to exactly the file named; name a .png file, e.g. "
                           f"{tmp_path / 'x.png' if name == 'x.txt' else str(target) + '.png'}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--max-nodes", "--nodes"])
def test_node_counts_have_the_kit_s_upper_bound(capsys, flag):
    # --max-nodes 100000 searched for minutes; the kit never runs more than 256 nodes in a group
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                       flag, "100000")
    assert (rc, out) == (2, "")
    assert err.startswith(f"rlkit plan: error: argument {flag}: 100000 is not allowed: it must "
                          "be at most 256, the most nodes a kit GPU node group may have "
                          "(MAX_GPU_NODES_PER_GROUP, infra/config/values.py)\n")


def test_mxfp8_on_hopper_is_refused(capsys):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     "--nodes", "1", "--precision", "mxfp8")
    assert rc == 2
    assert err.strip() == (
        "rlkit plan: error: precision='mxfp8' needs Blackwell tensor cores (B200/B300); "
        "p5.48xlarge has H100, which supports bf16, fp8; use --precision fp8 or a p6 type")


def test_mxfp8_on_blackwell_plans(capsys):
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p6-b200.48xlarge",
                       "--nodes", "1", "--precision", "mxfp8", "--json")
    assert rc == 0, err
    assert json.loads(out)["setup"]["precision"] == "mxfp8"


def test_training_setup_rejects_unknown_values():
    from infra.planner import PlannerError, TrainingSetup

    with pytest.raises(PlannerError) as err:
        TrainingSetup(precision="fp4", schedule="gpipe", moe_imbalance=0.5)
    assert str(err.value) == (
        "invalid training setup: precision='fp4' is not one of bf16, fp8, mxfp8; use one of "
        "those; schedule='gpipe' is not one of 1f1b, a2a-overlap, dualpipe; use one of those; "
        "moe_imbalance=0.5 must be a number from 1.0 (balanced routing) to 4.0")


def test_rl_setup_rejects_a_broken_batch_invariant():
    from infra.planner import PlannerError
    from infra.planner.rl import RLSetup

    with pytest.raises(PlannerError, match="steps_per_rollout=3 does not divide the 256 samples"):
        RLSetup(prompts=32, samples_per_prompt=8, steps_per_rollout=3)

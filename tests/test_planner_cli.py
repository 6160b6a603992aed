"""`rlkit plan`: table and JSON output, error texts, and writing the layout into a kit config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ops.cli import main

REPO = Path(__file__).resolve().parent.parent
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
     "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge"),
])
def test_errors_are_one_clear_line(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert out == ""
    assert err.strip() == message


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
                             "etp": lay["etp"], "vpp": lay["vpp"] if lay["vpp"] > 1 else None}
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
    rc, _, err = run(capsys, "--model", "mixtral-8x7b", "--instance", "p5.48xlarge",
                     "--nodes", "2", "--write-config", str(path), "--node-group", "p5")
    assert rc == 0, err
    assert yaml.safe_load(path.read_text())["training"]["model"] == "mixtral-8x7b"


def test_benchmark_script_runs(capsys):
    import runpy

    module = runpy.run_path(str(REPO / "benchmarks" / "plan_search.py"))
    assert module["main"]() == 0
    out = capsys.readouterr().out
    assert "DeepSeek-V3" in out and "1024 GPUs" in out

"""`rlkit plan --write-config`: what the written file holds is what the launcher runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ops.cli import main
from tests.support import REPO_ROOT

P5_EXAMPLE = REPO_ROOT / "examples" / "p5-2node.yaml"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "kit.yaml"
    shutil.copy(P5_EXAMPLE, path)
    return path


@pytest.mark.parametrize("flags,named", [
    (("--precision", "fp8"), "--precision fp8, but the launcher trains in BF16"),
    (("--bf16-moments",), "--bf16-moments, but the launcher keeps Adam moments in FP32"),
    (("--schedule", "dualpipe"), "--schedule dualpipe, but the launcher runs Megatron's 1F1B"),
    (("--release", "mb-26.06"), "--release mb-26.06, but the launcher runs the baseline release"),
])
@pytest.mark.parametrize("rl", [False, True])
def test_write_config_refuses_a_plan_option_the_launcher_does_not_run(capsys, tmp_path, flags,
                                                                      named, rl):
    # these options were planned with and dropped from the file without a word: DeepSeek-V3 in
    # FP8 with BF16 moments on 16 p5en wrote a layout needing 145 GiB of 141 as the launcher runs it
    target = tmp_path / "new.yaml"
    shape = ("--rl", "--nodes", "2") if rl else ("--nodes", "16", "--global-batch", "1024")
    model = "qwen3-30b-a3b" if rl else "deepseek-v3"
    rc, _, err = run(capsys, "--model", model, "--instance", "p5en.48xlarge", *shape, *flags,
                     "--write-config", str(target), "--node-group", "p5en")
    assert rc == 2
    assert named in err
    assert f"re-plan without {' '.join(flags)} to write the config" in err
    assert err.count("\n") == 1  # one line
    assert not target.exists()


def test_write_config_names_every_option_the_launcher_does_not_run(capsys, config):
    rc, _, err = run(capsys, "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--nodes",
                     "16", "--precision", "fp8", "--bf16-moments", "--global-batch", "1024",
                     "--write-config", str(config), "--node-group", "p5")
    assert rc == 2
    assert "re-plan without --precision fp8, --bf16-moments to write the config" in err
    assert config.read_text() == P5_EXAMPLE.read_text()


def test_the_options_the_launcher_runs_are_still_written(capsys, config):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--precision", "bf16", "--schedule", "1f1b", "--release", "baseline",
                     "--write-config", str(config), "--node-group", "p5")
    assert rc == 0, err


# a node count each catalog model's training plan fits on p5en.48xlarge, beside the colocated
# engines of a new config (Kimi-K2's take 32 GPUs: a multiple of 4 nodes)
FITS_ON_P5EN = {"qwen3-30b-a3b": 1, "qwen3-235b-a22b": 6, "deepseek-v3": 16,
                "mixtral-8x7b": 2, "mixtral-8x22b": 4, "kimi-k2": 24}


def test_every_catalog_model_has_a_node_count_here():
    from infra.catalog.models import MODEL_CATALOG
    assert set(FITS_ON_P5EN) == set(MODEL_CATALOG)


@pytest.mark.parametrize("model", sorted(FITS_ON_P5EN))
def test_a_created_config_validates_and_the_printed_capacity_is_what_validation_needs(
        capsys, tmp_path, model):
    import json

    from infra.config import load_config, shared_fs_required_gib
    target = tmp_path / "new.yaml"
    rc, out, err = run(capsys, "--model", model, "--instance", "p5en.48xlarge", "--nodes",
                       str(FITS_ON_P5EN[model]), "--write-config", str(target), "--node-group",
                       "p5en", "--json")
    assert rc == 0, err
    cfg = load_config(target)  # validates, the shared file system's size included
    need = shared_fs_required_gib(model, cfg.training.checkpoint.keep_local)
    printed = json.loads(out)["shared_filesystem"]
    assert printed["required_gib"] == need
    assert printed["capacity_gib"] >= need
    assert cfg.storage.shared_filesystem.capacity_gib == printed["capacity_gib"]


@pytest.mark.parametrize("model,shape", [
    ("mixtral-8x7b", ("--nodes", "2")),
    ("deepseek-v3", ("--nodes", "16")),
    ("qwen3-30b-a3b", ("--rl", "--max-nodes", "2")),
])
def test_bf16_moments_do_not_shrink_the_proposed_file_system(capsys, model, shape):
    # the advice was sized with BF16 moments, below what validation (FP32 moments, as the
    # launcher saves them) requires: a config following it was refused
    import json

    from infra.config import shared_fs_required_gib
    rc, out, err = run(capsys, "--model", model, "--instance", "p5en.48xlarge", *shape,
                       "--bf16-moments", "--json")
    assert rc == 0, err
    assert json.loads(out)["shared_filesystem"]["required_gib"] == shared_fs_required_gib(model)


def _big_group(config: Path) -> None:
    import yaml
    data = yaml.safe_load(config.read_text())
    data["gpu_node_groups"]["p5"]["max_size"] = 32
    data["storage"]["shared_filesystem"] = {"capacity_gib": 7200}
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_training_plan_written_into_a_colocated_config_runs_beside_its_engine(capsys, config):
    # the example runs rollout colocated with engines of 8 GPUs; Qwen3-235B-A22B's weights over
    # 8 p5 GPUs (55 GiB each) do not fit the engines' 0.7 share of 80 GiB, which the GRPO
    # planner's own engine rule rejects, yet the training plan was written beside them unchecked
    import json

    import yaml

    from infra.config import load_config
    from infra.planner import get_model, get_system
    from infra.planner.colocated import engine_problem
    _big_group(config)
    rc, out, err = run(capsys, "--model", "qwen3-235b-a22b", "--instance", "p5.48xlarge",
                       "--write-config", str(config), "--node-group", "p5", "--json")
    assert rc == 0, err
    assert "note: training.rollout.gpus_per_engine 8 in" in err
    assert "more than 90% of its colocated memory share" in err
    assert "planned beside engines of 16 GPUs and wrote that" in err
    rollout = yaml.safe_load(config.read_text())["training"]["rollout"]
    assert rollout == {"gpus_per_engine": 16, "ep": 16}
    plan = json.loads(out)
    assert plan["setup"]["colocate_rollout"] and plan["setup"]["rollout_engine_gpus"] == 16
    assert plan["candidates"][0]["nodes"] % 2 == 0  # engines of 16 GPUs tile 2-node multiples
    cfg = load_config(config)
    assert engine_problem(get_model("qwen3-235b-a22b"), get_system("p5.48xlarge"),
                          cfg.training.rollout.gpus_per_engine) is None


def test_a_config_s_engine_that_fits_is_kept_and_planned_beside(capsys, config):
    import json

    import yaml
    rc, out, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                       "--nodes", "2", "--write-config", str(config), "--node-group", "p5",
                       "--json")
    assert rc == 0, err
    assert "rollout" not in yaml.safe_load(config.read_text())["training"]
    assert "rollout" not in err.split("wrote ")[-1]
    setup = json.loads(out)["setup"]
    assert setup["colocate_rollout"] and setup["rollout_engine_gpus"] == 8
    # and the plan of the config's own run is the same plan (the round trip)
    rc, again, err = run(capsys, "--config", str(config), "--json")
    assert rc == 0, err
    assert json.loads(again)["candidates"][0] == json.loads(out)["candidates"][0]


def test_engines_that_do_not_tile_the_node_count_are_refused(capsys, tmp_path):
    rc, _, err = run(capsys, "--model", "kimi-k2", "--instance", "p5en.48xlarge", "--nodes", "21",
                     "--write-config", str(tmp_path / "new.yaml"), "--node-group", "p5en")
    assert rc == 2
    assert ("the colocated engines of 32 GPUs (training.rollout.gpus_per_engine) tile: 32 must "
            "divide nodes x 8; plan a multiple of 4 nodes (--nodes, --max-nodes)") in err


@pytest.mark.parametrize("flags,named", [
    (("--rollout-mem-fraction", "0.5"), "--rollout-mem-fraction 0.5, but the launcher"),
    (("--rollout-kv-tokens", "100000"), "--rollout-kv-tokens, but the launcher"),
])
def test_an_engine_share_the_launcher_does_not_run_is_not_written(capsys, config, flags, named):
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--colocate", *flags, "--write-config", str(config), "--node-group",
                     "p5")
    assert rc == 2
    assert named in err and "re-plan without" in err
    assert config.read_text() == P5_EXAMPLE.read_text()


def test_no_engine_size_that_fits_is_refused():
    import dataclasses

    from infra.planner import PlannerError, get_model, get_system
    from infra.planner.colocated import colocated_engine
    huge = dataclasses.replace(get_model("qwen3-30b-a3b"), key="huge")
    system = dataclasses.replace(get_system("p5.48xlarge"), gpu_memory_gib=1.0)
    with pytest.raises(PlannerError, match=r"training.rollout.gpus_per_engine 8 in c.yaml: an "
                                           r"engine of 8 GPU\(s\) holds .* and no engine of "
                                           r"1, 2, 4, 8, 16, 32, 64 GPUs fits either"):
        colocated_engine(huge, system, {}, "c.yaml")


@pytest.mark.parametrize("rl", [False, True])
def test_a_new_config_keeps_the_saves_its_file_system_was_sized_for(capsys, tmp_path, rl):
    # was: --keep-local 3 sized the new file's shared file system for 3 kept saves but left
    # training.checkpoint.keep_local at its default 1, so the launcher kept 1
    from infra.catalog.fsx import shared_fs_required_gib
    from infra.config import load_config

    target = tmp_path / "keep3.yaml"
    shape = ("--rl", "--nodes", "2") if rl else ("--nodes", "2")
    rc, _, err = run(capsys, "--model", "qwen3-30b-a3b", "--instance", "p5en.48xlarge", *shape,
                     "--keep-local", "3", "--write-config", str(target), "--node-group", "p5en")
    assert rc == 0, err
    cfg = load_config(str(target))
    assert cfg.training.checkpoint.keep_local == 3
    capacity = cfg.storage.shared_filesystem.capacity_gib
    assert capacity >= shared_fs_required_gib("qwen3-30b-a3b", 3)
    # read back: --config plans the same run with the saves the file keeps
    rc, out, err = run(capsys, "--config", str(target), *(("--rl",) if rl else ()), "-o", "json")
    assert rc == 0, err
    import json
    fs = json.loads(out)["shared_filesystem"]
    assert fs["keep_local"] == 3
    assert fs["required_gib"] == shared_fs_required_gib("qwen3-30b-a3b", 3)

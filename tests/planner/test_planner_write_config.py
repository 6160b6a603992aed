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


# a node count each catalog model's training plan fits on p5en.48xlarge
FITS_ON_P5EN = {"qwen3-30b-a3b": 1, "qwen3-235b-a22b": 6, "deepseek-v3": 16,
                "mixtral-8x7b": 2, "mixtral-8x22b": 4, "kimi-k2": 21}


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

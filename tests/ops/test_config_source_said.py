"""The commands that neither delete nor bill (render, validate, plan) say on stderr when the
config they read came from RLKIT_CONFIG, a file nobody named on their command line; and `rlkit
plan --write-config NEW` with RLKIT_CONFIG naming NEW (the file being started) is no error."""

from __future__ import annotations

import json

import pytest

from ops import cli
from tests.support import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml"  # global batch 288, not 256


@pytest.fixture
def env_config(tmp_path, monkeypatch):
    cfg = tmp_path / "team.yaml"
    cfg.write_text(EXAMPLE.read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLKIT_CONFIG", str(cfg))
    return cfg


def said(cfg) -> str:
    return f"config: {cfg} (from RLKIT_CONFIG)"


def test_render_says_its_config_came_from_rlkit_config(tmp_path, env_config, capsys):
    assert cli.main(["render", "--no-validate", "--out", str(tmp_path / "out")]) == 0
    assert said(env_config) in capsys.readouterr().err.splitlines()


def test_validate_says_its_config_came_from_rlkit_config(tmp_path, env_config, capsys):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\n")
    assert cli.main(["validate", str(manifest)]) == 0
    assert said(env_config) in capsys.readouterr().err.splitlines()


def test_a_typed_config_is_not_repeated(tmp_path, env_config, capsys):
    assert cli.main(["render", "--no-validate", "--config", str(env_config), "--out",
                     str(tmp_path / "out")]) == 0
    assert "(from RLKIT_CONFIG)" not in capsys.readouterr().err


PLAN = ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2",
        "--top", "1"]


def test_plan_says_when_it_takes_a_value_from_rlkit_config(env_config, capsys):
    """Model, instance and nodes given: the global batch still comes from the config (288),
    and stderr says from which file."""
    assert cli.main([*PLAN, "--json"]) == 0
    captured = capsys.readouterr()
    assert said(env_config) in captured.err.splitlines()
    assert json.loads(captured.out)["setup"]["global_batch"] == 288


def test_plan_writes_the_new_file_rlkit_config_names(tmp_path, monkeypatch, capsys):
    """`export RLKIT_CONFIG=new.yaml` then `rlkit plan ... --write-config new.yaml`: the file
    to be created is not read (it does not exist), the plan uses the built-in default's values,
    which the new file starts from."""
    new = tmp_path / "new.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLKIT_CONFIG", str(new))
    assert cli.main([*PLAN, "--write-config", str(new), "--node-group", "p5"]) == 0
    err = capsys.readouterr().err
    assert new.is_file()
    assert (f"config: {new} (from RLKIT_CONFIG) does not exist yet: --write-config creates it "
            "from the built-in default config, whose values the plan uses") in err
    assert "no such config file" not in err
    # and the file is now the config RLKIT_CONFIG names: a later command reads it, and says so
    assert cli.main([*PLAN, "--json"]) == 0
    assert said(new) in capsys.readouterr().err.splitlines()


def test_a_missing_rlkit_config_that_is_not_the_new_file_is_still_an_error(tmp_path, monkeypatch,
                                                                            capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLKIT_CONFIG", str(tmp_path / "typo.yaml"))
    assert cli.main([*PLAN, "--write-config", str(tmp_path / "new.yaml"), "--node-group",
                     "p5"]) == 2
    err = capsys.readouterr().err
    assert f"config: {tmp_path / 'typo.yaml'} (from RLKIT_CONFIG)" in err
    assert not (tmp_path / "new.yaml").exists()

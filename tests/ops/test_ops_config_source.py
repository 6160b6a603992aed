"""Which environment: RLKIT_CONFIG as the default for --config (read in ops/cli.py only), and
commands that delete or bill naming the environment and its config before they act."""

from __future__ import annotations


import pytest
from botocore.exceptions import NoCredentialsError

from ops import cli
from tests.support.fakes import CONFIG, FIXTURES


@pytest.fixture
def env_config(tmp_path, monkeypatch):
    """A config file named by RLKIT_CONFIG, run from a scratch directory."""
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLKIT_CONFIG", raising=False)
    return cfg


def launch_dry_run(tmp_path, *extra: str) -> int:
    return cli.main(["launch", "--dry-run", "--state-dir", str(tmp_path / ".rlkit"), "--out",
                     str(tmp_path / "out"), *extra])


def first_line(text: str) -> str:
    return text.splitlines()[0]


def test_rlkit_config_is_the_default_config(tmp_path, env_config, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CONFIG", str(env_config))
    assert launch_dry_run(tmp_path) == 1  # a dry run without a passed gate: the real launch would refuse
    err = capsys.readouterr().out
    assert first_line(err) == (f"[dry-run] Launch into environment 'gt' (us-east-1); config: "
                               f"{env_config} (from RLKIT_CONFIG)")


def test_config_flag_beats_rlkit_config(tmp_path, env_config, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CONFIG", str(tmp_path / "elsewhere.yaml"))
    assert launch_dry_run(tmp_path, "--config", str(env_config)) == 1
    assert first_line(capsys.readouterr().out).endswith(f"config: {env_config} (from --config)")


def test_built_in_default_is_said_out_loud(tmp_path, env_config, capsys):
    assert launch_dry_run(tmp_path) == 1
    assert first_line(capsys.readouterr().out) == (
        "[dry-run] Launch into environment 'moe-rl' (us-east-1); config: the built-in default "
        "config (no --config given and RLKIT_CONFIG not set)")


def test_missing_rlkit_config_file_is_a_config_error(tmp_path, env_config, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CONFIG", str(tmp_path / "nope.yaml"))
    assert launch_dry_run(tmp_path) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_teardown_names_the_environment_before_touching_aws(tmp_path, env_config, capsys):
    from ops import config_source

    calls = []

    def no_credentials(region, profile):
        calls.append(region)
        raise NoCredentialsError()

    args = cli.build_parser().parse_args(["teardown", "--yes"])
    config_source.resolve(args, str(env_config))  # what cli.main does with RLKIT_CONFIG
    args.clients_factory = no_credentials
    assert args.func(args) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == (f"Teardown of environment 'gt' (us-east-1); config: {env_config} "
                      "(from RLKIT_CONFIG)")
    assert "no AWS credentials found" in captured.err and calls == ["us-east-1"]


def test_gate_names_the_environment(tmp_path, env_config, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CONFIG", str(env_config))
    assert cli.main(["gate", "--logs-dir", str(FIXTURES / "pass-p5-2node"), "--state-dir",
                     str(tmp_path / ".rlkit")]) == 0
    assert first_line(capsys.readouterr().out) == (
        f"Judging saved gate logs for environment 'gt' (us-east-1); config: {env_config} "
        "(from RLKIT_CONFIG)")


def test_only_the_cli_entry_reads_rlkit_config(tmp_path, env_config, monkeypatch, capsys):
    """Below ops/cli.py main() nothing reads the variable: a command run without the entry layer
    uses the built-in default even with RLKIT_CONFIG set."""
    monkeypatch.setenv("RLKIT_CONFIG", str(env_config))
    args = cli.build_parser().parse_args(["launch", "--dry-run", "--state-dir",
                                          str(tmp_path / ".rlkit"), "--out", str(tmp_path / "o")])
    assert args.func(args) == 1  # no gate ran: the dry run says the launch would refuse
    assert "environment 'moe-rl'" in first_line(capsys.readouterr().out)


def test_every_config_help_names_rlkit_config():
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0]
    for name in ("check", "preflight", "render", "gate", "launch", "teardown"):
        helps = [a.help for a in sub.choices[name]._actions if "--config" in a.option_strings]
        assert helps and "$RLKIT_CONFIG" in helps[0], name

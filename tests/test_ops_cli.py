"""The operator commands are wired into `rlkit` and each mutating one has --dry-run."""

from __future__ import annotations

import pytest

from ops import cli

OPS_COMMANDS = ("preflight", "gate", "launch", "status", "logs", "teardown")


def _subcommands():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


@pytest.mark.parametrize("command", OPS_COMMANDS)
def test_command_is_registered_with_a_handler(command):
    sub = _subcommands()[command]
    assert callable(sub.get_default("func"))


@pytest.mark.parametrize("command", ("gate", "launch", "teardown"))
def test_mutating_commands_offer_dry_run(command):
    options = {s for a in _subcommands()[command]._actions for s in a.option_strings}
    assert "--dry-run" in options


def test_gate_dry_run_through_main(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["gate", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "[dry-run] kubectl apply -f out/moe-rl/fabric/nodecheck" in out

"""The operator commands are wired into `rlkit` and each mutating one has --dry-run."""

from __future__ import annotations

import pytest

from ops import cli
from tests.support import REPO_ROOT

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


def test_ephemeral_workflow_assumes_a_role_and_always_tears_down():
    import yaml

    path = REPO_ROOT / ".github/workflows/ephemeral-cluster.yml"
    wf = yaml.safe_load(path.read_text())
    assert wf["jobs"]["ephemeral"]["permissions"]["id-token"] == "write"
    steps = wf["jobs"]["ephemeral"]["steps"]
    creds = next(s for s in steps if str(s.get("uses", "")).startswith(
        "aws-actions/configure-aws-credentials@"))
    assert len(creds["uses"].split("@")[1]) == 40  # pinned to a commit (version in a comment)
    runs = [s.get("run", "") for s in steps]
    order = [next(i for i, r in enumerate(runs) if key in r) for key in
             ("rlkit preflight", "deploy --all", "rlkit gate", "rlkit launch")]
    assert order == sorted(order)
    # Teardown is a job of its own that always runs after this one (tests/repo/test_workflow_lifecycle.py).
    job = wf["jobs"]["teardown"]
    assert job["needs"] == "ephemeral" and job["if"] == "always()"
    teardown = next(s for s in job["steps"] if "rlkit teardown" in s.get("run", ""))
    assert "--yes" in teardown["run"]


def test_a_command_imports_only_its_module_and_no_command_needs_boto3_to_start():
    """`rlkit plan ...` builds the plan parser alone (ops/cli.py COMMANDS), so it imports no other
    command module; boto3 and botocore.config (about 0.25 s) load when a command first makes a
    client (ops/aws.py): planning and building every command's parser need neither."""
    import subprocess
    import sys

    probe = ("import sys; from ops import cli; "
             "code = cli.main(['plan', '--model', 'qwen3-30b-a3b', '--instance', 'p5.48xlarge', "
             "'--nodes', '2', '-o', 'json']); "
             "print(code, sorted(m for m in cli.COMMAND_MODULES if m in sys.modules), "
             "file=sys.stderr); cli.build_parser(); "
             "print(sorted(m for m in ('boto3', 'botocore.config', 'botocore.session') "
             "if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-2:] == ["0 ['ops.plan_cmd']", "[]"], \
        done.stderr[-2000:]


def test_each_command_registers_where_the_command_table_says():
    """cli.COMMANDS names, for each command, the module whose register() adds it; a command run
    through that module alone gets the same parser as in the whole CLI."""
    import argparse
    import importlib

    registered = {}
    for module_name in cli.COMMAND_MODULES:
        scratch = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module_name).register(scratch)
        registered.update(dict.fromkeys(scratch.choices, module_name))
    assert registered == cli.COMMANDS
    whole = _subcommands()
    assert set(whole) == set(cli.COMMANDS) | {"help"}
    for command in cli.COMMANDS:
        alone = next(a for a in cli.build_parser(command)._actions if a.dest == "command")
        assert list(alone.choices) == [c for c, m in cli.COMMANDS.items()
                                       if m == cli.COMMANDS[command]] + ["help"]
        assert alone.choices[command].format_help() == whole[command].format_help()

"""The CLI's shared pieces: the lazily built AWS client bundle, the shared options, the one config
loader, and the rule that command modules only import the operations layer."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ProfileNotFound

from infra.config import ConfigError, load_config
from ops import aws, cli, options
from tests.support import REPO_ROOT

OPS = REPO_ROOT / "ops"


@pytest.fixture
def fake_credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)


def test_bundle_makes_each_client_once_on_first_use_with_the_kit_limits(monkeypatch,
                                                                       fake_credentials):
    made = []
    real = aws.client

    def counting(sess, service):
        made.append(service)
        return real(sess, service)

    monkeypatch.setattr(aws, "client", counting)
    bundle = aws.AwsClients("eu-west-1")
    assert made == []  # a command that ends early needs no client, and no credentials
    quotas = bundle.quotas
    assert bundle.quotas is quotas and made == ["service-quotas"]
    assert quotas.meta.region_name == "eu-west-1"
    assert quotas.meta.config.connect_timeout == aws.CONNECT_TIMEOUT_S
    assert quotas.meta.config.read_timeout == aws.READ_TIMEOUT_S
    assert quotas.meta.config.retries == {"mode": "standard", "total_max_attempts": aws.MAX_ATTEMPTS + 1}
    bundle.cloudformation
    assert made == ["service-quotas", "cloudformation"]


def test_bundle_takes_given_clients_and_refuses_unknown_ones():
    sts = boto3.client("sts", region_name="us-east-1")
    bundle = aws.AwsClients(sts=sts)
    assert bundle.sts is sts
    with pytest.raises(AttributeError, match="no ec2 client was given and no region"):
        bundle.ec2
    with pytest.raises(AttributeError):
        bundle.not_a_service
    with pytest.raises(TypeError, match="unknown client.*lambda_"):
        aws.AwsClients(lambda_=object())


def test_one_reader_of_aws_tag_lists():
    """describe_stacks, GetResources, DescribeCapacityReservations and templates all write tags
    as Key/Value lists; an absent list is no tags, not an error."""
    assert aws.tag_dict([{"Key": "rlkit:environment", "Value": "dev"}, {"Key": "team", "Value": ""}]) \
        == {"rlkit:environment": "dev", "team": ""}
    assert aws.tag_dict(None) == aws.tag_dict([]) == {}


def test_an_opened_bundle_reports_a_mistyped_profile_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    lazy = aws.AwsClients("us-east-1", "no-such-profile")  # nothing made, nothing raised yet
    with pytest.raises(ProfileNotFound):
        lazy.sts
    with pytest.raises(ProfileNotFound):
        aws.AwsClients.opened("us-east-1", "no-such-profile")


def test_load_config_prints_the_config_error_and_returns_none(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Not_Valid\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert options.load_config(argparse.Namespace(config=bad)) is None
    # where the file name came from, then every problem
    assert capsys.readouterr().err == f"config: {bad} (from --config)\n{err.value}\n"


def test_load_config_adjusts_and_reports_problems_of_the_adjusted_config(capsys):
    def refuse(cfg):
        raise ConfigError([], "adjusted")

    args = argparse.Namespace(config=None)
    assert options.load_config(args).name == "moe-rl"
    assert options.load_config(args, lambda cfg: cfg.model_copy()).name == "moe-rl"
    assert options.load_config(args, refuse) is None
    assert "adjusted" in capsys.readouterr().err


def _option_helps(parser: argparse.ArgumentParser, flag: str) -> dict[str, str]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update({f"{name} {k}".strip(): v for k, v in _option_helps(sub, flag).items()})
        elif flag in action.option_strings:
            found[""] = action.help
    return found


def test_shared_options_read_the_same_everywhere():
    parser = cli.build_parser()
    configs = _option_helps(parser, "--config")
    assert set(configs) == {"check", "image build", "image status", "render", "validate",
                            "preflight", "gate", "launch", "status", "logs", "teardown", "plan"}
    standard = {text for name, text in configs.items() if name != "validate"}
    assert standard == {"kit config YAML (default: $RLKIT_CONFIG, else the built-in default "
                        "config)"}
    assert set(_option_helps(parser, "--region").values()) == {options.REGION_HELP}
    assert set(_option_helps(parser, "--region")) == {"image build", "image status", "preflight",
                                                      "teardown", "gate", "launch", "render"}


def _ops_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ops"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ops")}
    return found


def test_no_command_module_imports_another():
    commands = {f"ops.{p.stem}" for p in OPS.glob("*_cmd.py")}
    assert len(commands) >= 10
    crossing = {(c, i) for c in commands for i in _ops_imports(OPS / f"{c[4:]}.py")
                if i in commands and i != c}
    assert crossing == set()

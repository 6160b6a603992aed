"""`rlkit preflight`'s exit code: 1 when a check failed, 2 when nothing on the AWS side could be
checked (no or expired credentials, AWS unreachable), so CI can tell the two apart."""

from __future__ import annotations

import json

from infra.config import parse_config
from ops.aws import AwsClients
from ops.preflight import FAIL, aws_unanswered, run_preflight
from tests.support.preflight import parse, stubbed


def config(**over):
    return parse_config({"name": "pf", "region": "us-east-1",
                         "availability_zones": ["us-east-1a", "us-east-1b"], **over})


def _expired(*_args):
    sts, stub = stubbed("sts")
    stub.add_client_error("get_caller_identity", service_error_code="ExpiredToken",
                          service_message="The security token included in the request is expired")
    stub.activate()
    return AwsClients(sts=sts)


def test_command_without_working_credentials_exits_2_not_1(tmp_path, capsys, monkeypatch):
    """Nothing on the AWS side was checked: 2 (could not run), so CI tells it from a failed
    check (1). JSON says the AWS checks did not run."""
    monkeypatch.setattr("ops.preflight._distribution_installed", lambda package: True)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\n")
    args = parse(["preflight", "--config", str(cfg), "--width", "250"])
    args.clients_factory = _expired
    assert args.func(args) == 2
    out = capsys.readouterr().out
    assert "ExpiredToken" in out
    assert out.strip().endswith("NOT RUN: AWS could not be asked (the credentials check above), "
                                "so the AWS checks did not run. Fix: configure AWS credentials "
                                "(aws configure, aws sso login, or AWS_PROFILE) for the account "
                                "you deploy to, then run the command again")
    args = parse(["preflight", "--config", str(cfg), "-o", "json"])
    args.clients_factory = _expired
    assert args.func(args) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["aws_checks"] == "not-run"


def test_command_without_credentials_and_a_failed_offline_check_exits_1(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.setattr("ops.preflight._distribution_installed", lambda package: False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\n")
    args = parse(["preflight", "--config", str(cfg), "--width", "250"])
    args.clients_factory = _expired
    assert args.func(args) == 1
    assert "FAILED: fix the failures above" in capsys.readouterr().out


def test_credentials_for_another_account_is_a_failed_check_not_a_check_not_run():
    sts, stub = stubbed("sts")
    stub.add_response("get_caller_identity", {"Account": "123456789012",
                                              "Arn": "arn:aws:iam::123456789012:role/x",
                                              "UserId": "AROAEXAMPLEEXAMPLE1"})
    with stub:
        checks = run_preflight(config(account="999999999999"), AwsClients(sts=sts),
                               installed=lambda p: True)
    assert checks[0].status == FAIL and not aws_unanswered(checks)

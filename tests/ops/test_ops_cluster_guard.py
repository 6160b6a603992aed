"""The operator CLI never hangs and never acts on the wrong cluster (issue 12): kubectl and AWS
timeouts, the kube-context check before launch/gate apply or delete, corrupt local state."""

from __future__ import annotations

import json
import socket
import sys
import threading

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError

from ops import aws, gate
from ops.kube import Kubectl, KubectlError, check_cluster
from tests.support.fakes import FakeKubectl, kubeconfig, rayjob, run, run_gate, write_state


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    return FakeKubectl(tmp_path, monkeypatch)


def point_at(kubectl: FakeKubectl, cluster: str, region: str = "us-east-1") -> None:
    kubectl.rules[0] = {"match": ["config", "view"], "stdout": kubeconfig(cluster, region)}
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))


# --- right cluster -------------------------------------------------------------------------------


def test_launch_refuses_a_context_on_another_cluster(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    point_at(kubectl, "prod-cluster")
    assert run(tmp_path, "launch") == 2
    err = capsys.readouterr().err
    assert ("context 'arn:aws:eks:us-east-1:123456789012:cluster/prod-cluster' points at cluster "
            "'arn:aws:eks:us-east-1:123456789012:cluster/prod-cluster', not this environment's EKS "
            "cluster gt-cluster in us-east-1; nothing was applied or deleted") in err
    assert "aws eks update-kubeconfig --name gt-cluster --region us-east-1" in err
    assert kubectl.calls == []


def test_replace_never_deletes_a_same_named_rayjob_on_another_cluster(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    point_at(kubectl, "gt-cluster", region="eu-west-1")  # same name, another region
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "launch", "--replace") == 2
    assert not any(c[0] in ("delete", "apply", "get") for c in kubectl.calls)


def test_launch_pins_the_checked_context_for_every_call(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "launch", "--replace") == 0
    arn = "arn:aws:eks:us-east-1:123456789012:cluster/gt-cluster"
    after_check = kubectl.all_calls[1:]
    assert kubectl.all_calls[0] == ["config", "view", "--minify", "-o", "json"]
    assert after_check and all(c[:2] == ["--context", arn] for c in after_check)
    assert [c[2:4] for c in after_check][:4] == [["get", "--raw"], ["get", "nodes"],
                                                 ["get", "rayjob"], ["delete", "--ignore-not-found"]]


def test_gate_refuses_a_context_on_another_cluster(tmp_path, kubectl, capsys):
    point_at(kubectl, "someone-elses")
    assert run_gate(tmp_path) == 2
    assert "not this environment's EKS cluster gt-cluster in us-east-1" in capsys.readouterr().err
    assert kubectl.calls == []


def test_no_selected_context_is_a_clean_error(tmp_path, kubectl):
    kubectl.rules[0] = {"match": ["config", "view"], "stderr": "error: current-context is not set",
                        "rc": 1}
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    with pytest.raises(KubectlError) as err:
        check_cluster(Kubectl(), "gt-cluster", "us-east-1")
    assert "current-context is not set" in str(err.value)


def test_context_matched_by_the_token_command_when_the_entry_is_not_an_arn(tmp_path, kubectl):
    doc = json.loads(kubeconfig("gt-cluster"))
    doc["contexts"][0]["context"]["cluster"] = "my-alias"
    kubectl.rules[0] = {"match": ["config", "view"], "stdout": json.dumps(doc)}
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    k = Kubectl()
    assert check_cluster(k, "gt-cluster", "us-east-1") == doc["contexts"][0]["name"]
    with pytest.raises(KubectlError):
        check_cluster(Kubectl(), "other", "us-east-1")


# --- timeouts ------------------------------------------------------------------------------------


def test_kubectl_that_hangs_is_stopped_with_a_clear_error(tmp_path):
    slow = tmp_path / "kubectl"
    slow.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(30)'\n")
    slow.chmod(0o755)
    k = Kubectl(binary=str(slow), timeout_s=0.5)
    with pytest.raises(KubectlError) as err:
        k.get_json(["rayjob", "x"])
    assert "no answer within 0 s (kubectl was stopped)" in str(err.value)
    assert "check that the cluster endpoint is reachable from here" in str(err.value)


def test_every_kubectl_call_has_a_time_limit(monkeypatch):
    seen = []

    def fake_run(argv, **kw):
        seen.append((argv[1], kw.get("timeout")))
        import subprocess
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("ops.kube.subprocess.run", fake_run)
    k = Kubectl()
    k.get_json(["pods"])
    k.apply(["x.yaml"])
    k.delete(["x.yaml"], wait=True, timeout_s=120)
    k.logs("p", "ns")
    assert seen == [("get", 120.0), ("apply", 120.0), ("delete", 180.0), ("logs", 120.0)]


def test_aws_clients_have_connect_and_read_timeouts_and_bounded_retries():
    client = aws.client(aws.session("us-east-1"), "cloudformation")
    assert client.meta.config.connect_timeout == aws.CONNECT_TIMEOUT_S == 10
    assert client.meta.config.read_timeout == aws.READ_TIMEOUT_S == 60
    # botocore normalizes max_attempts (retries after the first call) to total_max_attempts
    assert client.meta.config.retries == {"total_max_attempts": 5, "mode": "standard"}


def test_an_aws_call_that_hangs_times_out_with_a_clear_message(monkeypatch):
    # A server that accepts the connection and never answers.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []  # keep the accepted connection open, silent
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("cloudformation", region_name="us-east-1",
                          endpoint_url=f"http://127.0.0.1:{server.getsockname()[1]}",
                          config=aws.client_config().merge(Config(read_timeout=0.5,
                                                                retries={"total_max_attempts": 1})))
    with pytest.raises(ReadTimeoutError) as err:
        client.list_stacks()
    text = aws.describe_error(err.value)
    assert text.startswith("no answer from AWS (Read timeout on endpoint URL")
    assert "check the network path to the AWS endpoint" in text
    server.close()


# --- bad local state -----------------------------------------------------------------------------


MEASURED = '{"ok": true, "ep": {"measurements": {"nccl": %s}}}'


@pytest.mark.parametrize("content, why", [
    ("{not json", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
                  "(char 1)"),
    (json.dumps({"ok": True}).encode("utf-16"), "not UTF-8 text: byte 0xff at offset 0"),
    ("[1, 2]", "not a JSON object"),
    ('{"ok": "yes"}', 'ok is "yes", not true or false'),
    ('{"ok": true, "nodes": "2"}', 'nodes is "2", not an integer'),
    ('{"ok": true, "nodes": true}', "nodes is true, not an integer"),
    ('{"ok": false, "findings": ["x"]}', 'findings[0] is "x", not an object'),
    ('{"ok": false, "findings": [{"status": "fail"}]}', "findings[0] lacks 'check'"),
    ('{"ok": false, "findings": [{"check": "c", "status": 3}]}',
     "findings[0].status is 3, not a string"),
    ('{"ok": false, "findings": [{"check": "c", "status": "fail", "measured": 1}]}',
     "findings[0].measured is 1, not a string"),
    (MEASURED % "5", "ep.measurements.nccl is 5, not an object"),
    (MEASURED % '{"passed": true}', "ep.measurements.nccl lacks 'time_us'"),
    (MEASURED % '{"time_us": "fast"}', 'ep.measurements.nccl.time_us is "fast", not a number'),
    (MEASURED % '{"time_us": 1, "passed": "yes"}',
     'ep.measurements.nccl.passed is "yes", not true or false'),
    ('{"ok": true, "ep": {"layout": {"train": 8}}}', "ep.layout.train is 8, not an object"),
    ('{"ok": true, "ep": {"layout": {"train": {"ep_size": "8"}}}}',
     'ep.layout.train.ep_size is "8", not an integer'),
    ('{"ok": true, "figures": {"a": "x"}}', 'figures["a"] is "x", not a number'),
    ('{"ok": true, "measured_nodes": {"ip-10-0-1-10": "i-0aaa"}}',
     'measured_nodes is {"ip-10-0-1-10": "i-0aaa"}, not a list'),
    ('{"ok": true, "measured_nodes": [{"instance": "i-0aaa"}]}', "measured_nodes[0] lacks 'name'"),
])
def test_corrupt_gate_json_is_a_clean_error(tmp_path, kubectl, capsys, content, why):
    """Hand-edited, older or corrupt records: one message naming the file, the first bad place
    and the fix, exit 2, where launch used to stop with a KeyError or AttributeError."""
    state = tmp_path / ".rlkit" / "gt" / "gate.json"
    state.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        state.write_bytes(content)
    else:
        state.write_text(content)
    assert run(tmp_path, "launch", "--dry-run") == 2
    assert capsys.readouterr().err == (
        f"Not launching: {state} is corrupt ({why}), so the last gate result cannot be trusted. "
        f"Fix: delete it and run `rlkit gate` again (or judge saved logs: rlkit gate --logs-dir "
        f"{state.parent / 'gate-logs'}).\n")
    assert kubectl.calls == []


def test_gate_replaces_a_corrupt_gate_json(tmp_path, capsys):
    state = tmp_path / "gate.json"
    state.write_text("{not json")
    with pytest.raises(gate.GateStateError):
        gate.load_state(state)


# --- no traceback from the CLI -------------------------------------------------------------------


def test_an_unexpected_error_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    from ops import cli, teardown_cmd

    def boom(*_args, **_kw):
        raise RuntimeError("x" * 2000)

    monkeypatch.setattr(teardown_cmd, "_run", boom)
    monkeypatch.delenv("RLKIT_DEBUG", raising=False)
    parser_defaults = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda *a: _with_func(parser_defaults(*a), boom))
    assert cli.main(["teardown", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rlkit teardown failed: RuntimeError: " + "x" * 500 + "... (2000")
    assert "Traceback" not in err and "set RLKIT_DEBUG=1 to see the traceback" in err
    monkeypatch.setenv("RLKIT_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["teardown", "--dry-run"])


def _with_func(parser, func):
    real = parser.parse_args

    def parse_args(argv=None):
        args = real(argv)
        args.func = func
        return args

    parser.parse_args = parse_args
    return parser

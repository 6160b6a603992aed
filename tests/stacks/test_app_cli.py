"""`python app.py -c config=FILE` builds what `cdk synth -c config=FILE` builds, or refuses.

`cdk synth` hands cdk.json's context plus every ``-c KEY=VALUE`` to ``python3 app.py``; make_app
reads the same cdk.json, and app.py takes the same ``-c`` arguments. Before, app.py ignored its
arguments and silently synthesized the built-in default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.cdk import NO_AWS_ENV, REPO_ROOT


def _run_app(args: list[str], outdir, *, validation: bool = False) -> subprocess.CompletedProcess:
    """`python app.py ARGS` on a machine with no AWS credentials or config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update({**NO_AWS_ENV, "CDK_OUTDIR": str(outdir),
                "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"})
    if not validation:
        env["CDK_VALIDATION"] = "false"
    return subprocess.run([sys.executable, "app.py", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_python_app_py_with_a_config_builds_that_config(synth, tmp_path):
    """As a user runs it: with CDK's built-in CloudFormation validation, which
    @aws-cdk/core:validateAgainstDefaultRules turns from warnings into errors, and without AWS
    credentials (synth never needs them)."""
    example = "p5-2node"  # not the default: a silently ignored -c would show
    result = _run_app(["-c", f"config=examples/{example}.yaml"], tmp_path / "out",
                      validation=True)
    assert result.returncode == 0, result.stderr[-3000:]
    # No config warning for this example, no CDK warning, nothing in the validation report.
    assert (result.stdout, result.stderr) == ("", "")
    report = json.loads((tmp_path / "out" / "validation-report.json").read_text())
    assert [p["pluginName"] for p in report["pluginReports"]] == ["CloudFormation Validate"]
    assert [v for p in report["pluginReports"] for v in p["violations"]] == []
    expected = synth(example)  # in-process make_app + build_stacks, the tests' (and cdk's) path
    produced = {p.name.removesuffix(".template.json"): json.loads(p.read_text())
                for p in (tmp_path / "out").glob("*.template.json")}
    assert sorted(produced) == sorted(expected.templates)
    for stack_name, template in expected.templates.items():
        assert produced[stack_name] == template, stack_name


def _main_in_process(args: list[str], outdir, monkeypatch, capsys) -> tuple[int, str]:
    """app.py's main as `python app.py ARGS` runs it (the process itself: the test above)."""
    import app

    monkeypatch.setenv("CDK_OUTDIR", str(outdir))
    monkeypatch.setenv("CDK_VALIDATION", "false")
    code = app.main(args)
    return code, capsys.readouterr().err


def test_long_form_context_argument(tmp_path, monkeypatch, capsys):
    code, err = _main_in_process(["--context", "config=examples/nonexistent.yaml"],
                                 tmp_path / "out", monkeypatch, capsys)
    assert code == 2  # it did read the config argument: the file is missing
    assert "nonexistent.yaml" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, shown", [
    (["examples/p5-2node.yaml"], "'examples/p5-2node.yaml'"),
    (["-c", "examples/p5-2node.yaml"], "'-c examples/p5-2node.yaml'"),
    (["-c"], "'-c'"),
    (["--config", "examples/p5-2node.yaml"], "'--config examples/p5-2node.yaml'"),
])
def test_other_arguments_are_refused_with_the_right_command(args, shown, tmp_path, monkeypatch,
                                                            capsys):
    code, err = _main_in_process(args, tmp_path / "out", monkeypatch, capsys)
    assert code == 2
    assert err == (
        f"error: app.py: argument {shown} is not -c KEY=VALUE; app.py takes only the context "
        "arguments `cdk synth` takes. Fix: python app.py -c config=FILE, or "
        "npx aws-cdk@2.1148.1 synth -c config=FILE\n")
    assert not (tmp_path / "out").exists()


def test_the_suggested_cdk_version_is_the_one_the_readme_pins():
    import app

    pinned = set(re.findall(r"npx aws-cdk@([0-9.]+)", (REPO_ROOT / "README.md").read_text()))
    assert pinned == {app.CDK_SYNTH.split("@")[1].split()[0]}

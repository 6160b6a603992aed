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


REFUSED = ("is neither the kit's (config) nor CDK's own (a misspelt key would be ignored and the "
           "built-in default config built). Fix: ")


def test_a_misspelt_context_key_is_refused_not_ignored(tmp_path, monkeypatch, capsys):
    # `python app.py -c conifg=FILE` used to synthesize the built-in default without a word
    code, err = _main_in_process(["-c", "conifg=examples/p5-2node.yaml", "-c", "stage=dev"],
                                 tmp_path / "out", monkeypatch, capsys)
    assert code == 2
    assert err == (
        f"error: app.py: context key 'conifg' {REFUSED}did you mean -c config=...? Nothing was "
        f"written.\nerror: app.py: context key 'stage' {REFUSED}remove it; the config file is "
        "-c config=FILE. Nothing was written.\n")
    assert not (tmp_path / "out").exists()


def test_context_keys_the_kit_and_cdk_read_pass():
    from app import foreign_context_key
    from stacks.feature_flags import cdk_json_context

    cdk_json = set(cdk_json_context())
    # what the CDK CLI adds for every app (aws-cdk-cli toolkit-lib cloud-assembly/environment.ts
    # contextFromSettings), cdk.json's flags, `cdk acknowledge`'s list and a lookup's cache key
    for key in ("config", "aws:cdk:enable-path-metadata", "aws:cdk:bundling-stacks",
                "@aws-cdk/core:failSynthOnValidationErrors", "acknowledged-issue-numbers",
                "availability-zones:account=123456789012:region=us-east-1", *cdk_json):
        assert foreign_context_key(key, cdk_json, only_near_misses=False) is None, key
    # the CLI also hands over ~/.cdk.json's context, which may hold other apps' keys: from the
    # CLI only a near miss of a kit key is refused
    assert foreign_context_key("stage", cdk_json, only_near_misses=True) is None
    assert foreign_context_key("stage", cdk_json, only_near_misses=False) is not None
    assert foreign_context_key("Config", cdk_json, only_near_misses=True).startswith(
        f"context key 'Config' {REFUSED}did you mean -c config=...?")


def test_cdk_cli_context_with_a_misspelt_key_is_refused(tmp_path):
    """As `cdk synth -c Config=FILE` runs the app: the context arrives in CDK_CONTEXT_JSON, and
    what does not fit there in the file CONTEXT_OVERFLOW_LOCATION_ENV names (aws-cdk-cli
    toolkit-lib prepare-source.ts writeContextToEnv; aws-cdk-lib 2.275.0 core/lib/app.js
    loadContext reads both). A process of its own: the jsii runtime reads its environment once."""
    overflow = tmp_path / "context-overflow.json"
    overflow.write_text(json.dumps({"conifg": "examples/p5-2node.yaml"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update({**NO_AWS_ENV, "CDK_OUTDIR": str(tmp_path / "out"),
                "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
                "CDK_CONTEXT_JSON": json.dumps({"Config": "examples/p5-2node.yaml",
                                                "aws:cdk:enable-path-metadata": True,
                                                "other-app-setting": "x"}),
                "CONTEXT_OVERFLOW_LOCATION_ENV": str(overflow)})
    result = subprocess.run([sys.executable, "app.py"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: context key 'Config' {REFUSED}did you mean -c config=...? Nothing was written.\n"
        f"error: context key 'conifg' {REFUSED}did you mean -c config=...? Nothing was written.\n")
    assert not (tmp_path / "out").exists()


def test_the_suggested_cdk_version_is_the_one_the_readme_pins():
    import app

    pinned = set(re.findall(r"npx aws-cdk@([0-9.]+)", (REPO_ROOT / "README.md").read_text()))
    assert pinned == {app.CDK_SYNTH.split("@")[1].split()[0]}
    # ... and the one the CI workflow deploys with
    workflow = (REPO_ROOT / ".github/workflows/ephemeral-cluster.yml").read_text()
    assert set(re.findall(r"CDK_VERSION: ([0-9.]+)", workflow)) == pinned

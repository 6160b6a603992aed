"""Synth is offline: no lookups, no missing context, and no Lambda-backed custom resources."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.cdk import EXAMPLES, NO_AWS_ENV


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_missing_context(synth, example):
    assert "missing" not in synth(example).manifest


CUSTOM_PREFIXES = ("Custom::", "AWS::CloudFormation::CustomResource")


@pytest.mark.parametrize("example", EXAMPLES)
def test_lambda_and_custom_resource_count(synth, example):
    """The kubectl provider (handler + provider-framework function, kubectl and awscli layers)
    is the one Lambda-backed provider the kit accepts, in the cluster stack only; its only
    custom resources are the Helm charts."""
    s = synth(example)
    for name, template in s.templates.items():
        types = [r["Type"] for r in template["Resources"].values()]
        functions = types.count("AWS::Lambda::Function")
        custom = [t for t in types if t.startswith(CUSTOM_PREFIXES)]
        if name == s.config.stack_names["cluster"]:
            assert functions == 2
            assert types.count("AWS::Lambda::LayerVersion") == 2
            enabled = [n for n in type(s.config.addons).model_fields if s.config.addon_enabled(n)]
            assert custom == ["Custom::AWSCDK-EKS-HelmChart"] * len(enabled)
        else:
            assert functions == 0, name
            assert custom == [], name


def test_app_py_without_a_config_or_credentials_builds_the_default(synth, tmp_path, monkeypatch):
    """The README's first command, `python app.py`: no config, no AWS credentials. Its main runs
    here; the CDK runtime it talks to keeps this process's first environment, so the process
    itself, with no credentials anywhere, is tests/stacks/test_app_cli.py's."""
    import app

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in {**NO_AWS_ENV, "CDK_OUTDIR": str(tmp_path / "out")}.items():
        monkeypatch.setenv(key, value)  # what app.py's Python side reads
    assert app.main([]) == 0
    produced = {p.name.removesuffix(".template.json"): json.loads(p.read_text())
                for p in (tmp_path / "out").glob("*.template.json")}
    assert sorted(produced) == ["moe-rl-cluster", "moe-rl-data", "moe-rl-gpu-p5", "moe-rl-network",
                                "moe-rl-observability", "moe-rl-storage", "moe-rl-storage-access"]
    assert produced == synth("default").templates

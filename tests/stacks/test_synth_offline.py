"""Synth is offline: no lookups, no missing context, and no Lambda-backed custom resources."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.cdk import EXAMPLES, REPO_ROOT


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


def test_python_app_py_without_credentials_or_network(tmp_path):
    """The README's first command: `python app.py` with no config, no AWS credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "",
                "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true", "CDK_OUTDIR": str(tmp_path / "out"),
                "CDK_VALIDATION": "false"})
    result = subprocess.run([sys.executable, "app.py"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    produced = sorted(p.name for p in (tmp_path / "out").glob("*.template.json"))
    assert produced == ["moe-rl-cluster.template.json", "moe-rl-data.template.json",
                        "moe-rl-gpu-p5.template.json", "moe-rl-network.template.json",
                        "moe-rl-observability.template.json",
                        "moe-rl-storage-access.template.json", "moe-rl-storage.template.json"]

"""The README's Operate section, run top to bottom as written: every `rlkit` line goes through
rlkit's own entry point, with AWS stubbed by moto (CodeBuild's build itself replaced: moto runs no
Docker build), kubectl by the recording stub on PATH (tests/fixtures/gate/fake_kubectl.py)
answering as a healthy cluster would, and `cdk deploy` by writing the stacks it would create."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import time
import types
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from infra.config import load_config
from infra.names import OutputKeys, stack_names
from manifests.validate import crd_documents
from ops import cli, image_cmd, preflight_services
from ops.image_build import BuildResult, base_image
from tests.support.fakes import FakeKubectl, job_json, script_cluster
from tests.support import REPO_ROOT, artifacts
from tests.support.outputs import real_outputs

ACCOUNT = "123456789012"


def operate_blocks() -> list[list[str]]:
    """The command lines of the bash blocks under '## Operate', comments dropped."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n## Operate", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = []
    for block in blocks:
        commands = []
        for raw in block.splitlines():
            words = shlex.split(raw, comments=True)
            if words:
                commands.append(" ".join(words))  # the README quotes nothing
        lines.append(commands)
    return lines


def deploy(cfg_path: Path, outputs: Path) -> None:
    """What `cdk deploy --all --outputs-file` leaves: the stacks (tagged) and the outputs file."""
    cfg = load_config(cfg_path)
    data = real_outputs(cfg)
    names = stack_names(cfg.name)
    data[names["data"]].update({
        OutputKeys.IMAGE_CACHE_REPOSITORY_URI:
            f"{ACCOUNT}.dkr.ecr.{cfg.region}.amazonaws.com/{cfg.name}-trainer-cache",
        OutputKeys.IMAGE_BUILD_PROJECT: f"{cfg.name}-trainer-image",
        OutputKeys.IMAGE_BUILD_LOG_GROUP: f"/aws/codebuild/{cfg.name}-trainer-image"})
    outputs.write_text(json.dumps(data))
    cfn = boto3.client("cloudformation", region_name=cfg.region)
    for stack in data:
        cfn.create_stack(StackName=stack, TemplateBody=json.dumps(
            {"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}),
            Tags=[{"Key": "rlkit:environment", "Value": cfg.name}])
    boto3.client("s3", region_name=cfg.region).create_bucket(Bucket=f"{cfg.name}-data-{ACCOUNT}")
    boto3.client("ecr", region_name=cfg.region).create_repository(
        repositoryName=f"{cfg.name}-trainer")


@pytest.mark.external  # `rlkit check` renders the pinned charts with the real Helm
def test_the_readme_operate_section_runs_top_to_bottom(chart_dir, tmp_path, monkeypatch, capsys):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "HOME": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    for key in ("XDG_STATE_HOME", "XDG_CACHE_HOME", "RLKIT_CONFIG", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    kubectl = FakeKubectl(tmp_path, monkeypatch)
    kubectl.point_at("my-env")  # `aws eks update-kubeconfig --name my-env` was run
    for key in ("nodecheck", "allreduce", "ep"):  # each fabric job done at the first look
        kubectl.rule(["get", "job", f"fabric-p5-{key}"], stdout=job_json(True))
    script_cluster(kubectl, "pass-p5-2node")
    kubectl.rule(["get", "rayjob"], stdout_seq=["", json.dumps({
        "metadata": {"name": "qwen3-30b-a3b-grpo"},
        "status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}})])
    kubectl.rule(["get", "job"], stdout=json.dumps({"metadata": {"name": "qwen3-30b-a3b-grpo"}}))
    kubectl.rule(["logs", "job/qwen3-30b-a3b-grpo"], stdout="step 1 reward 0.12\n")
    crds = chart_dir.parent.parent / "crds/kuberay-v1.7.0" if (
        chart_dir.parent.parent / "crds/kuberay-v1.7.0").is_dir() else artifacts.find("kuberay-v1.7.0")
    for kind in ("rayjobs", "rayclusters"):  # what the cluster's KubeRay operator installed
        (crd,) = crd_documents((crds / f"ray.io_{kind}.yaml").read_bytes())
        kubectl.rule(["get", "crd", f"{kind}.ray.io"], stdout=json.dumps(crd))
    builds: list = []  # the plans `rlkit image build` started
    monkeypatch.setattr(image_cmd, "start_build",
                        lambda codebuild, plan: builds.append(plan) or "my-env-build:1")
    monkeypatch.setattr(image_cmd, "follow_build", lambda *a, **k: BuildResult(
        "SUCCEEDED", f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/my-env-trainer:t-nccl",
        "sha256:" + "ab" * 32))
    # moto does not implement Service Quotas' ListServiceQuotas: the account lists no CodeBuild
    # quota (preflight warns), as one with no such quota would
    real_quota_check = preflight_services.check_image_build_quota
    monkeypatch.setattr(preflight_services, "check_image_build_quota",
                        lambda quotas, region: real_quota_check(_NoQuotaPages(), region))
    monkeypatch.setattr("sys.stdin", _Terminal("my-env\n"))  # teardown asks for the name

    ran: list[tuple[str, int]] = []
    took: list[str] = []  # for a failure's message
    with mock_aws():
        for block in operate_blocks():
            for line in block:
                for command in line.split("; "):
                    started = time.monotonic()
                    code, err = _run(command, tmp_path, monkeypatch, capsys)
                    ran.append((command, code))
                    took.append(f"{time.monotonic() - started:5.1f} s {command}: {code} {err}")
    expected = {  # what each line exits with against a healthy, stubbed account and cluster
        "preflight": {0, 1},  # moto has no quota data: a preflight WARN/FAIL, never a crash
    }
    for command, code in ran:
        word = command.split()[1] if command.startswith("rlkit") else command.split()[0]
        assert code in expected.get(word, {0}), "\n".join(took)
    assert [c.split()[1] for c, _ in ran if c.startswith("rlkit")][:11] == [
        "plan", "check", "preflight", "image", "render", "gate", "launch", "status", "logs",
        "teardown", "teardown"]
    assert (tmp_path / ".local/state/rlkit/my-env/gate.json").is_file()  # XDG state, not cwd
    assert not (tmp_path / ".rlkit").exists()
    # the build ran as written, on the base image digest images/trainer/Dockerfile pins
    assert [(p.base_name, p.base_digest_from) for p in builds] == [
        ("radixark/miles:v0.1.0", "Dockerfile")]
    assert builds[0].base_digest == base_image()[1]
    assert (tmp_path / "out/my-env/rl-job").is_dir()


class _NoQuotaPages:
    def get_paginator(self, operation: str):
        return types.SimpleNamespace(paginate=lambda **kwargs: [{"Quotas": []}])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(command: str, tmp_path: Path, monkeypatch, capsys) -> tuple[int, str]:
    words = [os.path.expanduser(w) for w in shlex.split(command)]
    if words[0] == "export":
        key, value = words[1].split("=", 1)
        monkeypatch.setenv(key, value)
        return 0, ""
    if words[0] == "npx":  # cdk deploy
        deploy(tmp_path / words[words.index("-c") + 1].split("=", 1)[1],
               tmp_path / words[words.index("--outputs-file") + 1])
        return 0, ""
    if words[0] == "source":  # source <(rlkit completion bash)
        words = shlex.split(command.split("<(", 1)[1].rstrip(")"))
    pipe = words.index("|") if "|" in words else None
    argv, after = (words[1:pipe], words[pipe + 1:]) if pipe else (words[1:], [])
    code = cli.main(argv)
    out, err = capsys.readouterr()
    if after[:1] == ["jq"]:  # `| jq .ok`: one JSON document with that field
        assert after[1].lstrip(".") in json.loads(out)
    return code, err[-600:]

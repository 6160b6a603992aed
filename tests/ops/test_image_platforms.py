"""The trainer image's platforms follow the catalog: a multi-arch tag where a GPU group is arm64
(P6e-GB200), x86 only otherwise; the dry run prints the exact buildx platform list."""

from __future__ import annotations

from infra.config import load_config, parse_config
from ops.image_build import (
    BuildTarget,
    base_image,
    describe_plan,
    image_platforms,
    plan_build,
    start_build,
)
from ops.image_context import context_zip
from tests.support import REPO_ROOT

DIGEST = base_image()[1]  # what images/trainer/Dockerfile pins (plan_build refuses another)
TARGET = BuildTarget(stack="kit-data", bucket="kit-data-bucket",
                     repository_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer",
                     cache_repository_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-cache",
                     project="kit-image-build", log_group="kit-image-build-logs")


def test_x86_groups_build_amd64_only_and_pass_no_override():
    cfg = parse_config({})
    assert image_platforms(cfg) == "linux/amd64"
    plan = plan_build(cfg, TARGET, backend="nccl", vcs_ref="deadbeef", context=context_zip(),
                      files=3, base_digest=DIGEST)
    assert "IMAGE_PLATFORMS" not in {o["name"] for o in plan.overrides}
    assert any("--platform linux/amd64 " in line for line in describe_plan(plan, "us-east-1"))


def test_an_arm64_group_makes_one_multi_arch_tag():
    cfg = load_config(REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml")
    assert image_platforms(cfg) == "linux/amd64,linux/arm64"
    plan = plan_build(cfg, TARGET, backend="nccl", vcs_ref="deadbeef", context=context_zip(),
                      files=3, base_digest=DIGEST)
    assert {"name": "IMAGE_PLATFORMS", "value": "linux/amd64,linux/arm64",
            "type": "PLAINTEXT"} in plan.overrides
    lines = describe_plan(plan, "us-east-1")
    assert any("--platform linux/amd64,linux/arm64 " in line for line in lines)


def test_a_multi_arch_build_gets_a_longer_timeout():
    """The arm64 half compiles under QEMU: the project's 4 h killed it, and a build killed by the
    timeout exports no layer cache, so every retry started cold."""
    x86 = plan_build(parse_config({}), TARGET, backend="nccl", vcs_ref="deadbeef",
                     context=context_zip(), files=3, base_digest=DIGEST)
    assert x86.timeout_minutes is None  # the project's own 4 h
    cfg = load_config(REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml")
    plan = plan_build(cfg, TARGET, backend="nccl", vcs_ref="deadbeef", context=context_zip(),
                      files=3, base_digest=DIGEST)
    assert plan.timeout_minutes == 600  # under the 12 h of the ECR login it pushes with

    class CodeBuild:
        def start_build(self, **kwargs):
            self.kwargs = kwargs
            return {"build": {"id": "b:1"}}

    codebuild = CodeBuild()
    assert start_build(codebuild, plan) == "b:1"
    assert codebuild.kwargs["timeoutInMinutesOverride"] == 600

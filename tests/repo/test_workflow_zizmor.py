"""The CI workflow: zizmor (GitHub Actions static analysis) finds nothing, and the config the
workflow writes gives its deploy role cluster-admin access and the account it deploys to."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cdk import REPO_ROOT
from infra.config import load_config

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "ephemeral-cluster.yml"


def zizmor_binary() -> str:
    found = shutil.which("zizmor") or str(Path(sys.executable).parent / "zizmor")
    if not Path(found).is_file():
        message = "zizmor is not installed (pip install -r requirements-dev.txt)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def zizmor_findings(path: Path, *extra: str) -> list[dict]:
    result = subprocess.run([zizmor_binary(), "--offline", "--format", "json", *extra, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 10, 11, 12, 13, 14), result.stderr  # 1x: findings by severity
    return json.loads(result.stdout or "[]")


def test_zizmor_finds_nothing_in_the_workflows():
    findings = zizmor_findings(WORKFLOWS)
    assert findings == [], [f"{f['ident']}: {f['desc']}" for f in findings]


def test_zizmor_does_catch_an_unpinned_action(tmp_path):
    # The check above can fail: the same run on a workflow with a tag-pinned checkout that keeps
    # its credentials reports both.
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - uses: actions/checkout@v4\n")
    idents = {f["ident"] for f in zizmor_findings(bad.parent)}
    assert {"unpinned-uses", "artipacked"} <= idents


def test_every_action_is_pinned_to_a_commit_with_its_version():
    uses = re.findall(r"uses:\s*(\S+)(.*)", WORKFLOW.read_text())
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s*# v\d+\.\d+\.\d+", comment), (ref, comment)


def _config_step() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["ephemeral"]["steps"]
    return next(s for s in steps if s.get("name") == "Write the config with a unique name")


def test_workflow_passes_its_deploy_role_into_the_config(tmp_path):
    step = _config_step()
    assert step["env"]["DEPLOY_ROLE_ARN"] == "${{ secrets.AWS_ROLE_ARN }}"
    script = step["run"].split("<<'PY'\n", 1)[1].split("\nPY", 1)[0]
    role = "arn:aws:iam::123456789012:role/github-rlkit-deploy"
    env = {"PATH": os.environ["PATH"], "SOURCE": str(REPO_ROOT / "examples" / "ci-ephemeral.yaml"),
           "RUN_NAME": "ci-1234567890123-1", "TRAINER_IMAGE": "", "DEPLOY_ROLE_ARN": role,
           "COMMIT": "0123456789abcdef0123456789abcdef01234567"}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "::add-mask::123456789012" in result.stdout
    cfg = load_config(tmp_path / "ci.yaml")
    assert cfg.admin_role_arns == [role]
    assert cfg.account == "123456789012"
    assert cfg.name == "ci-1234567890123-1"
    # No TRAINER_IMAGE: the run builds the image for its commit (rlkit image build).
    assert cfg.training.image is None
    assert cfg.training.image_tag == "ci-0123456789ab"


def test_jobs_hold_only_the_permissions_they_use():
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc["permissions"] == {}
    assert doc["jobs"]["ephemeral"]["permissions"] == {"id-token": "write", "contents": "read"}

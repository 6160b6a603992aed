"""The CI workflow always cleans up: teardown runs in a job of its own with fresh credentials,
whatever happened to the deploy job, and no job's credentials can expire before the job ends."""

from __future__ import annotations

import yaml

from tests.support.cdk import REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "ephemeral-cluster.yml"
ROLE_ACTION = "aws-actions/configure-aws-credentials@"


def _jobs() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def _role_steps(job: dict) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(ROLE_ACTION)]


def test_teardown_is_its_own_job_that_always_runs_after_the_deploy_job():
    # One job with a 300-minute timeout and a 300-minute session could reach its teardown step
    # with expired credentials and leave p5 nodes running.
    jobs = _jobs()
    teardown = [name for name, job in jobs.items()
                if any("rlkit teardown" in s.get("run", "") for s in job["steps"])]
    assert teardown == ["teardown"], f"jobs that run rlkit teardown: {teardown}"
    job = jobs["teardown"]
    assert job["if"] == "always()"
    assert job["needs"] == "ephemeral"
    assert _role_steps(job), "the teardown job must assume the role itself (fresh credentials)"
    steps = [s.get("name") for s in job["steps"]]
    assert steps.index("Assume the deploy role (OIDC), fresh") < steps.index(
        "Tear down and verify nothing is left")


def test_every_session_outlives_its_job_by_half_an_hour():
    for name, job in _jobs().items():
        for step in _role_steps(job):
            session_min = int(step["with"]["role-duration-seconds"]) / 60
            assert session_min >= job["timeout-minutes"] + 30, (
                f"job {name}: a {session_min:.0f}-minute session in a "
                f"{job['timeout-minutes']}-minute job")


def test_the_teardown_job_gets_the_config_before_anything_is_deployed():
    # The config (the environment's name) is handed over before the first deploy, so a deploy
    # job that dies half-way still leaves the teardown job something to delete.
    steps = _jobs()["ephemeral"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    handover = names.index("Hand the config to the teardown job")
    first_deploy = min(i for i, s in enumerate(steps) if "cdk@" in s.get("run", "")
                       or "aws-cdk@" in s.get("run", ""))
    assert handover < first_deploy
    upload = steps[handover]["with"]
    download = next(s for s in _jobs()["teardown"]["steps"]
                    if s.get("uses", "").startswith("actions/download-artifact@"))
    assert upload["name"] == download["with"]["name"]
    assert upload["path"] == "ci.yaml"

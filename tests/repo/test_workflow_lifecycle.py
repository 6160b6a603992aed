"""The CI workflow always cleans up: teardown runs in a job of its own with fresh credentials,
whatever happened to the deploy job, and no job's credentials can expire before the job ends."""

from __future__ import annotations

import fnmatch

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
    # One artifact per attempt (a name is taken once per run, re-runs included: a second upload
    # of the same name fails), and the teardown job takes every attempt's.
    assert "${{ github.run_attempt }}" in upload["name"]
    pattern = download["with"]["pattern"]
    for attempt in ("1", "2"):
        assert fnmatch.fnmatchcase(_expand(upload["name"], attempt), _expand(pattern, attempt))
    assert upload["path"] == "ci.yaml"


def _expand(text: str, attempt: str) -> str:
    return text.replace("${{ github.run_id }}", "1234567890").replace(
        "${{ github.run_attempt }}", attempt)


def test_a_cancel_cannot_stop_the_teardown():
    """A step whose `if` lacks a status function gets an implicit success(), which is false once
    the run is cancelled: GitHub then skips it, or cancels it mid-way (GitHub Actions docs,
    "Workflow cancellation"). Every teardown step after the install runs on always()."""
    steps = _jobs()["teardown"]["steps"]
    first = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith(
        "actions/download-artifact@"))
    for step in steps[first + 1:]:
        assert str(step.get("if", "")).startswith("always()"), step.get("name")


def test_the_teardown_job_outlasts_the_stages_it_waits_for():
    """rlkit teardown waits up to --timeout (default an hour) for each of its four stages; a job
    killed before the network and data stages leaves them standing."""
    from ops.teardown_cmd import register
    import argparse
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    per_stage_s = parser.parse_args(["teardown"]).timeout
    assert _jobs()["teardown"]["timeout-minutes"] >= 4 * per_stage_s / 60 + 15


def test_the_results_of_every_run_are_kept_hidden_folders_included():
    """The gate results live in .state/ (XDG_STATE_HOME): upload-artifact v4 leaves files under a
    dot folder out unless include-hidden-files is set, so failed gates kept nothing."""
    for job in _jobs().values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/upload-artifact@"):
                paths = str(step["with"]["path"]).split()
                if any(p.startswith(".") or "/." in p for p in paths):
                    assert step["with"].get("include-hidden-files") is True, step.get("name")

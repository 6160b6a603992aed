"""checkov on every template of every example: zero failed checks, and a reason for every skip.

One checkov process scans the templates of all examples together with a canary template that
must fail (an S3 bucket with none of the settings checkov asks for), so a checkov that parses
nothing or checks nothing cannot pass. Accepted findings sit on the resource as
``Metadata: checkov: skip`` with a comment, written by ``infra.constructs.nag.skip_checkov`` where
the resource is made. checkov runs from its own virtualenv (requirements-checkov.txt).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.support.cdk import EXAMPLES, REPO_ROOT

CHECKOV = REPO_ROOT / ".venv" / "checkov" / "bin" / "checkov"

CANARY_TEMPLATE = {
    "AWSTemplateFormatVersion": "2010-09-09",
    "Resources": {"UnprotectedBucket": {"Type": "AWS::S3::Bucket", "Properties": {}}},
}
# What checkov must find on the canary: no access logging, no versioning.
CANARY_MUST_FAIL = {"CKV_AWS_18", "CKV_AWS_21"}


def run_checkov(directory) -> dict:
    """checkov's JSON report for every CloudFormation template under ``directory``, offline."""
    result = subprocess.run(
        [str(CHECKOV), "--directory", str(directory), "--framework", "cloudformation",
         "--skip-download", "--compact", "--output", "json"],
        capture_output=True, text=True, timeout=600,
        # In this process: checkov's default forks a parser per core and pickles every parsed
        # template back (about 1.5 CPU-s of 15 here), while the test workers hold the cores.
        # The same report either way (1,472 passed, 6 failed, 112 skipped checks: compared).
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_PARALLELIZATION_TYPE": "none"},
    )
    # Exit 1 means failed checks (the canary's at least); anything else is checkov itself failing.
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    [report] = [r for r in (report if isinstance(report, list) else [report])
                if r["check_type"] == "cloudformation"]
    return report


@pytest.fixture(scope="module")
def scanned(synth, tmp_path_factory):
    """(checkov report, {example: template file names}) for all examples plus the canary."""
    if not CHECKOV.exists():
        message = f"checkov is not installed at {CHECKOV}: run `bash scripts/setup.sh dev`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("checkov")
    templates = {}
    for example, s in synth.all(EXAMPLES).items():
        (root / example).mkdir()
        templates[example] = sorted(p.name for p in s.outdir.glob("*.template.json"))
        assert len(templates[example]) == len(s.templates)
        for name in templates[example]:
            shutil.copy(s.outdir / name, root / example / name)
    (root / "canary").mkdir()
    (root / "canary" / "canary.template.json").write_text(json.dumps(CANARY_TEMPLATE))
    return run_checkov(root), templates


def _results(report: dict, kind: str) -> list[dict]:
    return report["results"][kind]


def test_checkov_parsed_every_template(scanned):
    report, templates = scanned
    assert report["summary"]["parsing_errors"] == 0
    checked_files = {r["file_path"].lstrip("/") for kind in ("passed_checks", "failed_checks",
                                                             "skipped_checks")
                     for r in _results(report, kind)}
    expected = {f"{example}/{name}" for example, names in templates.items() for name in names}
    assert expected - checked_files == set(), "checkov checked nothing in these templates"


def test_checkov_fails_the_canary(scanned):
    report, _ = scanned
    canary_failures = {r["check_id"] for r in _results(report, "failed_checks")
                       if r["file_path"].lstrip("/").startswith("canary/")}
    assert CANARY_MUST_FAIL <= canary_failures, canary_failures


def test_checkov_finds_nothing_in_the_examples(scanned):
    report, _ = scanned
    failures = [f"{r['file_path']} {r['resource']}: {r['check_id']} {r['check_name']}"
                for r in _results(report, "failed_checks")
                if not r["file_path"].lstrip("/").startswith("canary/")]
    assert not failures, (
        f"{len(failures)} failed checkov check(s); fix each, or accept it where the resource "
        "is made with infra.constructs.nag.skip_checkov and a reason:\n" + "\n".join(failures))


def test_every_checkov_skip_says_why(scanned):
    report, _ = scanned
    skipped = _results(report, "skipped_checks")
    assert skipped, "expected the kit's written skips (e.g. the kubectl provider's functions)"
    silent = [f"{r['file_path']} {r['resource']}: {r['check_id']}" for r in skipped
              if len((r["check_result"].get("suppress_comment") or "").strip()) < 20]
    assert not silent, "checkov skips without a reason:\n" + "\n".join(silent)

"""cfn-lint on every template of every example: zero errors, warnings and informational findings.

Run with ``--regions <config region>``, so cfn-lint's regional data also checks that the GPU
instance type exists in that region. Suppressions live next to the resource they concern
(CloudFormation metadata written by the construct), each with a comment saying why.

cfn-lint's own command-line entry point runs in this process (same arguments, same findings), once
per region for all the examples of that region: most of a run is loading its rules, so a process,
or a run, per example spent most of its time loading the same rules again. A broken template
rides along in every run and must be reported, so a run that checked nothing cannot pass.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import defaultdict
from pathlib import Path
from unittest import mock

import pytest

from tests.support.cdk import EXAMPLES

BROKEN = '{"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {"BucketNameTypo": "x"}}}}'


def cfn_lint(*args: str) -> tuple[int, str]:
    """``cfn-lint ARGS`` (the console script's ``cfnlint.runner.main``): exit code and stdout."""
    from cfnlint.runner import main

    out = io.StringIO()
    with mock.patch.object(sys, "argv", ["cfn-lint", *args]), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as done:  # the command line always ends in sys.exit
            return done.code, out.getvalue()
    raise AssertionError(f"cfn-lint returned without an exit code: {out.getvalue()[-2000:]}")


@pytest.fixture(scope="module")
def findings(synth, tmp_path_factory) -> dict[str, list[dict]]:
    """cfn-lint's findings by template path: one run per region over its examples' templates
    and the broken canary (whose findings are under its own path)."""
    broken = tmp_path_factory.mktemp("cfn-lint") / "broken.template.json"
    broken.write_text(BROKEN)
    by_region: dict[str, list[str]] = defaultdict(list)
    for example, s in synth.all(EXAMPLES).items():
        by_region[s.config.region] += sorted(str(p) for p in s.outdir.glob("*.template.json"))
    found: dict[str, list[dict]] = defaultdict(list)
    for region, templates in sorted(by_region.items()):
        code, output = cfn_lint("--regions", region, "--format", "json", "--",
                                str(broken), *templates)
        matches = json.loads(output)
        assert code == 2 and matches, f"{region}: the broken template was not reported: {output}"
        for m in matches:
            found[str(Path(m["Filename"]))].append(m)
        canary = found.pop(str(broken))
        assert any(m["Rule"]["Id"] == "E3002" and "BucketNameTypo" in m["Message"]
                   for m in canary), f"{region}: {canary}"
    return found


def test_cfn_lint_fails_a_broken_template(tmp_path):
    """The in-process run reports what the command line reports: a wrong property fails."""
    broken = tmp_path / "broken.template.json"
    broken.write_text(BROKEN)
    code, output = cfn_lint("--regions", "us-east-1", "--", str(broken))
    assert code == 2, output  # 2: errors
    assert "E3002" in output and "BucketNameTypo" in output, output


@pytest.mark.parametrize("example", EXAMPLES)
def test_cfn_lint_clean(synth, findings, example):
    s = synth(example)
    templates = sorted(str(p) for p in s.outdir.glob("*.template.json"))
    assert len(templates) == len(s.templates)
    problems = [f"{m['Level']} {m['Rule']['Id']} {Path(t).name} {'/'.join(map(str, m['Location']['Path']))}: "
                f"{m['Message']}" for t in templates for m in findings.get(t, [])]
    assert not problems, "\n".join(problems)

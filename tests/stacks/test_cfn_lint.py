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
from dataclasses import dataclass
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


@dataclass
class Findings:
    by_template: dict[str, list[dict]]  # the examples' templates
    canary: dict[str, tuple[int, list[dict]]]  # region -> (exit code, the broken template's)


@pytest.fixture(scope="module")
def findings(synth, tmp_path_factory) -> Findings:
    """cfn-lint's findings: one run per region over its examples' templates and the broken
    canary."""
    broken = tmp_path_factory.mktemp("cfn-lint") / "broken.template.json"
    broken.write_text(BROKEN)
    by_region: dict[str, list[str]] = defaultdict(list)
    for example, s in synth.all(EXAMPLES).items():
        by_region[s.config.region] += sorted(str(p) for p in s.outdir.glob("*.template.json"))
    found = Findings(defaultdict(list), {})
    for region, templates in sorted(by_region.items()):
        code, output = cfn_lint("--regions", region, "--format", "json", "--",
                                str(broken), *templates)
        for m in json.loads(output):
            found.by_template[str(Path(m["Filename"]))].append(m)
        found.canary[region] = code, found.by_template.pop(str(broken), [])
    return found


def test_cfn_lint_fails_a_broken_template(findings):
    """Every run reports the canary's wrong property and exits 2 (errors): a run that checked
    nothing cannot pass the examples."""
    assert len(findings.canary) >= 2  # the examples span regions: one run each
    for region, (code, canary) in findings.canary.items():
        assert code == 2, region
        assert any(m["Rule"]["Id"] == "E3002" and "BucketNameTypo" in m["Message"]
                   for m in canary), f"{region}: {canary}"


@pytest.mark.parametrize("example", EXAMPLES)
def test_cfn_lint_clean(synth, findings, example):
    s = synth(example)
    templates = sorted(str(p) for p in s.outdir.glob("*.template.json"))
    assert len(templates) == len(s.templates)
    problems = [f"{m['Level']} {m['Rule']['Id']} {Path(t).name} {'/'.join(map(str, m['Location']['Path']))}: "
                f"{m['Message']}" for t in templates for m in findings.by_template.get(t, [])]
    assert not problems, "\n".join(problems)

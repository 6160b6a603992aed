"""cfn-lint on every template of every example: zero errors and zero warnings.

Run per example with ``--regions <config region>``, so cfn-lint's regional data also checks that
the GPU instance type exists in that region. Suppressions live next to the resource they concern
(CloudFormation metadata written by the construct), each with a comment saying why.

cfn-lint's own command-line entry point runs in this process (same arguments, same exit code):
a process per example spent most of its time starting up and loading the same schemas again.
"""

from __future__ import annotations

import contextlib
import io
import sys
from unittest import mock

import pytest

from tests.support.cdk import EXAMPLES


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


def test_cfn_lint_fails_a_broken_template(tmp_path):
    """The in-process run reports what the command line reports: a wrong property fails."""
    broken = tmp_path / "broken.template.json"
    broken.write_text('{"Resources": {"B": {"Type": "AWS::S3::Bucket", '
                      '"Properties": {"BucketNameTypo": "x"}}}}')
    code, output = cfn_lint("--regions", "us-east-1", "--", str(broken))
    assert code == 2, output  # 2: errors
    assert "E3002" in output and "BucketNameTypo" in output, output


@pytest.mark.parametrize("example", EXAMPLES)
def test_cfn_lint_clean(synth, example):
    s = synth(example)
    templates = sorted(str(p) for p in s.outdir.glob("*.template.json"))
    assert len(templates) == len(s.templates)
    code, output = cfn_lint("--regions", s.config.region, "--", *templates)
    assert code == 0, output[-5000:]

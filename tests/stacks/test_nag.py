"""cdk-nag AwsSolutions (3.x, a validation plugin) on every example.

Every finding is either fixed or acknowledged on one construct with a written reason; the test
fails on any open finding and on any acknowledgement without a reason. The plugin runs inside the
session's one synth of each example (tests/conftest.py), not in a second synth.
"""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_aws_solutions_clean(example, synth):
    s = synth(example)
    if s.nag_error is not None:  # the plugin fails synth on open findings; the report says which
        report = (s.outdir / "validation-report.json").read_text()
        pytest.fail(f"{s.nag_error}\n{report[-6000:]}")
    nag = s.nag_report
    assert nag["violations"] == []
    for suppressed in nag.get("suppressedViolations", []):
        reason = json.dumps(suppressed)
        assert '"reason": "' in reason and '"reason": ""' not in reason, suppressed
        # Acknowledged per finding or per construct, never for a whole stack or the app.
        for construct in suppressed["violatingConstructs"]:
            assert construct["constructPath"].count("/") >= 2, construct

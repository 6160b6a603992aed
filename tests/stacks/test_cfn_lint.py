"""cfn-lint on every template of every example: zero errors and zero warnings.

Run per example with ``--regions <config region>``, so cfn-lint's regional data also checks that
the GPU instance type exists in that region. Suppressions live next to the resource they concern
(CloudFormation metadata written by the construct), each with a comment saying why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cdk import EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_cfn_lint_clean(synth, example):
    s = synth(example)
    templates = sorted(str(p) for p in s.outdir.glob("*.template.json"))
    assert len(templates) == len(s.templates)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--regions", s.config.region, "--", *templates],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]

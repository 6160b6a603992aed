"""cdk.json carries aws-cdk-lib's recommended feature flags, and synth prints no warnings.

The recommended list is the one the installed aws-cdk-lib ships (``recommended-feature-flags.json``
in its jsii package, the list ``cdk init`` and ``cdk flags`` use), so upgrading aws-cdk-lib makes
these tests name every new flag. Each flag kept off its recommended value has its reason in
``stacks/feature_flags.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES
from stacks.feature_flags import CDK_JSON, NOT_RECOMMENDED, cdk_json_context, recommended_flags



@pytest.fixture(scope="module")
def recommended() -> dict:
    """aws-cdk-lib's recommended flags (read from its package archive: not at collection)."""
    return recommended_flags()


def test_cdk_json_sets_every_recommended_flag(recommended):
    context = cdk_json_context()
    missing = sorted(set(recommended) - set(context))
    assert not missing, (f"cdk.json lacks {len(missing)} flag(s) the installed aws-cdk-lib "
                         f"recommends: {missing}. Fix: add each at its recommended value, or at "
                         "another value with the reason in stacks/feature_flags.py "
                         "NOT_RECOMMENDED (check the templates before and after).")
    unknown = sorted(k for k in context if k.startswith("@aws-cdk") and k not in recommended)
    assert not unknown, f"cdk.json sets flags aws-cdk-lib does not recommend: {unknown}"


def test_cdk_json_values_are_recommended_unless_a_reason_says_otherwise(recommended):
    context = cdk_json_context()
    wrong = {}
    for flag, value in recommended.items():
        expected = NOT_RECOMMENDED[flag][0] if flag in NOT_RECOMMENDED else value
        if context.get(flag) != expected:
            wrong[flag] = (context.get(flag), expected)
    assert not wrong, f"cdk.json flag -> (value, expected): {wrong}"


@pytest.mark.parametrize("flag", sorted(NOT_RECOMMENDED))
def test_each_flag_kept_off_is_a_real_flag_with_a_reason(flag, recommended):
    value, reason = NOT_RECOMMENDED[flag]
    assert flag in recommended, f"{flag} is not in aws-cdk-lib's recommended list any more"
    assert value != recommended[flag], f"{flag}: {value!r} is the recommended value; drop it"
    assert len(reason) > 40, f"{flag}: say why it is not {recommended[flag]!r}"


def test_make_app_builds_with_cdk_json_context():
    """`python app.py` and the tests get what `cdk synth` passes from cdk.json."""
    from stacks.kit import make_app

    app = make_app()
    context = json.loads(CDK_JSON.read_text())["context"]
    assert {k: app.node.try_get_context(k) for k in context} == context


@pytest.mark.parametrize("example", EXAMPLES)
def test_synth_has_no_warnings(synth, example):
    """What `cdk synth` would print: warnings and errors in the assembly's metadata, and the
    construct-annotation validation report (@aws-cdk/core:annotationsInValidationReport)."""
    s = synth(example)
    found = []
    for metadata_file in sorted(s.outdir.glob("*.metadata.json")):
        for path, entries in json.loads(metadata_file.read_text()).items():
            found += [f"{path}: {e['data']}" for e in entries
                      if e["type"] in ("aws:cdk:warning", "aws:cdk:error")]
    assert not found, "\n".join(found)
    # Nothing in the validation report but cdk-nag's own (it runs in this synth; test_nag.py
    # judges it): no construct annotation, no built-in CloudFormation validation.
    report = json.loads((s.outdir / "validation-report.json").read_text())
    assert [p["pluginName"] for p in report["pluginReports"]] == ["AwsSolutions"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_stacks_carry_the_environment_tag(synth, example):
    """@aws-cdk/core:explicitStackTags: the stack tags rlkit teardown reads are set explicitly."""
    from infra import names

    s = synth(example)
    for stack_name in s.templates:
        tags = s.manifest["artifacts"][stack_name]["properties"].get("tags", {})
        assert tags.get(names.ENVIRONMENT_TAG) == s.config.name, stack_name


@pytest.mark.parametrize("example", EXAMPLES)
def test_nothing_joins_the_vpc_default_security_group(synth, example):
    """Why @aws-cdk/aws-ec2:restrictDefaultSecurityGroup can stay off (feature_flags.py)."""
    s = synth(example)
    for stack_name, template in s.templates.items():
        assert "DefaultSecurityGroup" not in json.dumps(template), stack_name

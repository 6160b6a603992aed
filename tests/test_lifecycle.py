"""What ends with the environment ends with it: keys follow the data they protect.

Read from the synthesized templates of every example config.
"""

from __future__ import annotations

import json

import pytest

from conftest import EXAMPLES, resources

# Resource types that hold data a key encrypts (policies and aliases only point at a key).
_PROTECTED_TYPES = {"AWS::S3::Bucket", "AWS::Logs::LogGroup", "AWS::EKS::Cluster",
                    "AWS::FSx::FileSystem", "AWS::ECR::Repository"}


def _policy(resource: dict) -> str:
    return resource.get("DeletionPolicy", "Delete")  # CloudFormation's default


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_kms_key_lives_exactly_as_long_as_what_it_encrypts(synth, example):
    # A key kept after its data is destroyed is a monthly charge and a teardown leftover that
    # the "verify empty" check must then excuse; a key destroyed while its data is kept makes the
    # data unreadable. Before: the cluster's secrets key and its log-group key were retained
    # while the cluster and the log groups were deleted.
    s = synth(example)
    checked = 0
    for stack, template in s.templates.items():
        for key_id, key in resources(template, "AWS::KMS::Key").items():
            users = {rid: r for rid, r in template["Resources"].items()
                     if r["Type"] in _PROTECTED_TYPES
                     and (f'"Fn::GetAtt": ["{key_id}", "Arn"]' in json.dumps(r["Properties"])
                          or f'"Ref": "{key_id}"' in json.dumps(r["Properties"]))}
            assert users, f"{stack}: key {key_id} encrypts nothing the test knows"
            for rid, r in users.items():
                assert _policy(key) == _policy(r), (
                    f"{stack}: key {key_id} is {_policy(key)} but {rid} ({r['Type']}), which it "
                    f"encrypts, is {_policy(r)}")
                checked += 1
    assert checked  # every example has at least the cluster's secrets key

"""What ends with the environment ends with it: keys follow the data they protect.

Read from the synthesized templates of every example config.
"""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES, resources

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


@pytest.mark.parametrize("example", EXAMPLES)
def test_gpu_instances_their_volumes_and_interfaces_carry_the_environment_tags(synth, example):
    # Node group tags do not propagate to the instances EKS launches, so before this the p5s,
    # their EBS volumes and their 32 ENIs carried no environment tag: teardown's leftover check
    # and the cost trail could not see them.
    from infra.config.derived import resource_tags

    s = synth(example)
    expected = resource_tags(s.config)
    assert expected["rlkit:environment"] == s.config.name
    for group in s.config.gpu_node_groups:
        (lt,) = resources(s.template("gpu", group), "AWS::EC2::LaunchTemplate").values()
        specs = {spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec["Tags"]}
                 for spec in lt["Properties"]["LaunchTemplateData"].get("TagSpecifications", [])}
        assert set(specs) == {"instance", "volume", "network-interface"}, (group, sorted(specs))
        for kind, tags in specs.items():
            assert tags == {**expected, "rlkit:node-group": group}, (group, kind)


@pytest.mark.parametrize("example", ["p6e-gb200-ultraserver", "default"])
def test_no_rule_expires_the_images_a_multi_arch_trainer_tag_lists(synth, example):
    """The trainer repository's tags are immutable, so its only untagged images are the
    per-platform images of a multi-arch tag (an arm64 GPU group's build): an "untagged" lifecycle
    rule would select exactly those, under a tag a resumed job still pulls."""
    data = synth(example).template("data")
    (repo,) = [r for r in resources(data, "AWS::ECR::Repository").values()
               if r["Properties"].get("ImageTagMutability") == "IMMUTABLE"]
    rules = json.loads(repo["Properties"].get("LifecyclePolicy", {}).get(
        "LifecyclePolicyText", '{"rules": []}'))["rules"]
    assert not [r for r in rules if r["selection"]["tagStatus"] in ("untagged", "any")], rules


@pytest.mark.parametrize("example", ["default", "ci-ephemeral"])  # kept data, then destroyed data
def test_a_bucket_policy_lives_exactly_as_long_as_its_bucket(synth, example):
    """Before: the data and access-log buckets were retained but their policies were not, so a
    data stack deleted around kept buckets left the checkpoint bucket without its TLS-only deny
    and the log bucket without the log delivery grant (access logging then stopped silently)."""
    template = synth(example).template("data")
    policies = resources(template, "AWS::S3::BucketPolicy")
    assert len(policies) == 2  # the data bucket and its access-log bucket
    for pid, policy in policies.items():
        bucket = template["Resources"][policy["Properties"]["Bucket"]["Ref"]]
        assert _policy(policy) == _policy(bucket), pid


def test_delete_markers_of_expired_versions_are_removed(synth):
    """Pruned saves leave a delete marker per file once their versions expire; without
    ExpiredObjectDeleteMarker they stayed for good (S3 API LifecycleExpiration)."""
    template = synth("default").template("data")
    (bucket,) = [b for b in resources(template, "AWS::S3::Bucket").values()
                 if b["Properties"].get("VersioningConfiguration")]
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-noncurrent-versions"]["ExpiredObjectDeleteMarker"] is True
    assert "NoncurrentVersionExpiration" in rules["expire-noncurrent-versions"]


@pytest.mark.parametrize("example", ["default", "ci-ephemeral"])  # kept data, then destroyed data
def test_a_repository_deleted_with_its_stack_is_emptied_by_cloudformation(synth, example):
    """CloudFormation cannot delete a repository that holds an image; teardown deletes the images
    first, but an image pushed after that (a build still running) failed the data stack's delete.
    ECR's native EmptyOnDelete (no custom resource) empties the repository as it is deleted; a
    retained repository keeps its images and does not set it."""
    template = synth(example).template("data")
    repos = resources(template, "AWS::ECR::Repository")
    assert len(repos) == 2  # the trainer repository and the build cache
    for rid, repo in repos.items():
        assert repo["Properties"].get("EmptyOnDelete", False) is (_policy(repo) == "Delete"), rid
    assert example == "default" or all(_policy(r) == "Delete" for r in repos.values())
    assert not [r for r in template["Resources"].values()
                if r["Type"].startswith("Custom::") or r["Type"] == "AWS::Lambda::Function"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_kept_file_system_keeps_its_lustre_rules_and_its_links_to_s3(synth, example):
    """Before: the file system and its security group were retained, but the group's
    self-referencing Lustre rules and the /datasets and /models associations kept the default
    Delete: a storage stack deleted around a kept file system (cdk destroy, the console) left its
    servers without the Lustre ports between them and its directories unlinked from the bucket."""
    s = synth(example)
    if not s.config.storage.shared_filesystem.type == "fsx-lustre":
        pytest.skip("no shared file system")
    template = s.template("storage")
    ((fs_id, fs),) = resources(template, "AWS::FSx::FileSystem").items()
    ((sg_id, sg),) = resources(template, "AWS::EC2::SecurityGroup").items()
    expected = "Delete" if s.config.ephemeral or not s.config.storage.retain else "Retain"
    assert _policy(fs) == fs.get("UpdateReplacePolicy", "Delete") == expected
    rules = {rid: r for rid, r in resources(template, "AWS::EC2::SecurityGroupIngress").items()
             if r["Properties"]["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}}
    links = resources(template, "AWS::FSx::DataRepositoryAssociation")
    assert len(rules) == 2 and len(links) == 2, (sorted(rules), sorted(links))
    for rid, r in {sg_id: sg, **rules, **links}.items():
        assert r["Properties"].get("FileSystemId", {"Ref": fs_id}) == {"Ref": fs_id}, rid
        assert _policy(r) == r.get("UpdateReplacePolicy", "Delete") == expected, (
            f"{rid} ({r['Type']}) is {_policy(r)}/{r.get('UpdateReplacePolicy')} while the file "
            f"system {fs_id} is {expected}")

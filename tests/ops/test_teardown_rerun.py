"""`rlkit teardown` run again after a teardown that stopped part way: what CloudFormation already
deleted is not touched again, and the retry is not failed by a stale status (moto, Stubber)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import Stubber

from ops.teardown import TeardownError, delete_stacks, stack_resources
from tests.support.teardown import (  # noqa: F401 (aws: autouse fixture)
    DATA, REGION, Recording, aws, fill_bucket, live_names, make_env, run)

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


class PartlyDeleted(Recording):
    """A data stack that ended DELETE_FAILED: ListStackResources still lists the resources
    CloudFormation deleted, with their physical IDs and ResourceStatus DELETE_COMPLETE (moto
    keeps every resource CREATE_COMPLETE, so the statuses are set here)."""

    def __init__(self, client, deleted_logical_ids):
        super().__init__(client)
        self.deleted_ids = set(deleted_logical_ids)

    def get_paginator(self, name):
        paginator = self._client.get_paginator(name)
        if name != "list_stack_resources":
            return paginator
        deleted_ids = self.deleted_ids

        class Marked:
            def paginate(self, **kw):
                for page in paginator.paginate(**kw):
                    for r in page.get("StackResourceSummaries", []):
                        if r["LogicalResourceId"] in deleted_ids:
                            r["ResourceStatus"] = "DELETE_COMPLETE"
                    yield page
        return Marked()


class SkipsWhatIsGone(PartlyDeleted):
    """CloudFormation's delete skips what it deleted before and treats a resource that no longer
    exists as deleted; moto's DeleteStack raises NoSuchBucket / RepositoryNotFoundException
    instead. So the data stack's missing bucket and repository are recreated, empty, just before
    its delete (after teardown has asked S3 and ECR about them)."""

    def __init__(self, client, deleted_logical_ids=(), buckets=(), repositories=()):
        super().__init__(client, deleted_logical_ids)
        self.buckets, self.repositories = buckets, repositories

    def delete_stack(self, **kw):
        if kw["StackName"] == "tt-data":
            for bucket in self.buckets:
                boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
            for repository in self.repositories:
                boto3.client("ecr", region_name=REGION).create_repository(
                    repositoryName=repository)
        return super().delete_stack(**kw)


def test_resources_cloudformation_deleted_already_are_not_listed():
    make_env()
    cfn = PartlyDeleted(boto3.client("cloudformation", region_name=REGION), {"Bucket"})
    types = sorted(r.type for r in stack_resources(cfn, "tt-data"))
    assert types == ["AWS::ECR::Repository", "AWS::S3::Bucket"]  # Logs only, not Bucket


def test_a_rerun_after_a_partial_data_delete_carries_on(tmp_path, capsys):
    """Run 1 emptied the bucket, CloudFormation deleted it, and the stack ended DELETE_FAILED (an
    image pushed meanwhile, say). Run 2 asked S3 about the deleted bucket (NoSuchBucket) and exited
    1, every time."""
    ids = make_env()
    boto3.client("s3", region_name=REGION).delete_bucket(Bucket=ids["Bucket"])
    cfn = SkipsWhatIsGone(boto3.client("cloudformation", region_name=REGION), {"Bucket"},
                          buckets=[ids["Bucket"]])
    code, _ = run(tmp_path, "--yes", "--delete-data", cfn=cfn)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert ids["Bucket"] not in captured.out  # not asked about, not reported emptied
    assert "tt-data" in cfn.deleted and live_names() == []


def test_a_bucket_and_repository_gone_outside_cloudformation_are_gone_already(tmp_path, capsys):
    """What S3 and ECR say no longer exists (deleted by hand, or by CloudFormation while its
    resource status still lagged) is what teardown wants, not an error."""
    ids = make_env()
    fill_bucket(ids["Bucket"])
    s3 = boto3.client("s3", region_name=REGION)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=ids["Logs"]):
        assert not page.get("Versions")
    s3.delete_bucket(Bucket=ids["Logs"])
    boto3.client("ecr", region_name=REGION).delete_repository(repositoryName="tt-trainer")
    cfn = SkipsWhatIsGone(boto3.client("cloudformation", region_name=REGION),
                          buckets=[ids["Logs"]], repositories=["tt-trainer"])
    code, _ = run(tmp_path, "--yes", "--delete-data", cfn=cfn)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"bucket {ids['Logs']} is gone already" in captured.out
    assert "ECR repository tt-trainer is gone already" in captured.out
    assert (f"Deleted: 3 object version(s) and delete marker(s) in bucket {ids['Bucket']}"
            in captured.out)
    assert cfn.deleted[-1] == "tt-data"


def test_the_log_bucket_is_emptied_last_on_a_rerun_with_logging_already_off(tmp_path, capsys):
    """Run 1 turned the bucket's access logging off; run 2 reads no logging and used to empty the
    log bucket first (it sorts first by name), so a late log record could fail its delete again.
    The deployed template still names the log bucket (LoggingConfiguration)."""
    data = {"DataAccessLogs": {"Type": "AWS::S3::Bucket"},  # the kit's logical IDs
            "DataBucket": {"Type": "AWS::S3::Bucket", "Properties": {"LoggingConfiguration": {
                "DestinationBucketName": {"Ref": "DataAccessLogs"}, "LogFilePrefix": "d/"}}}}
    ids = make_env(data=data)
    logs, bucket = ids["DataAccessLogs"], ids["DataBucket"]
    assert logs < bucket
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_bucket_logging(Bucket=bucket, BucketLoggingStatus={})  # what run 1 did
    fill_bucket(bucket)
    code, _ = run(tmp_path, "--yes", "--delete-data")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "access logging" not in out  # off already: nothing to turn off
    assert out.index(f"in bucket {bucket}") < out.index(f"in bucket {logs}")


# --- a DELETE_FAILED stack deleted again ---------------------------------------------------------


def _answers(stack, *statuses):
    cfn = boto3.client("cloudformation", region_name=REGION)
    stub = Stubber(cfn)
    stub.add_response("delete_stack", {}, {"StackName": stack})
    for status in statuses:
        if status == "gone":
            stub.add_client_error("describe_stacks", service_error_code="ValidationError",
                                  service_message=f"Stack with id {stack} does not exist")
        else:
            stub.add_response("describe_stacks", {"Stacks": [
                {"StackName": stack, "StackStatus": status, "CreationTime": T0}]})
    return cfn, stub


def test_the_old_delete_failed_right_after_the_retry_is_not_a_new_failure():
    """The poll right after DeleteStack may still show the stack's old DELETE_FAILED, as it may
    any old status (REFUSED_AFTER_S): the retry was failed on it at once."""
    cfn, stub = _answers("tt-network", "DELETE_FAILED", "DELETE_IN_PROGRESS", "gone")
    shown = []
    with stub:
        delete_stacks(cfn, ["tt-network"], echo=shown.append, poll_s=0,
                      clock=iter(range(0, 100, 5)).__next__)
    assert shown == ["  deleting tt-network",
                     "  tt-network: still DELETE_FAILED from before; waiting for CloudFormation to "
                     "start deleting it again",
                     "  tt-network: DELETE_IN_PROGRESS [15 s]", "  tt-network: deleted [25 s]"]


def test_delete_failed_that_stays_past_the_grace_is_a_failure():
    cfn, stub = _answers("tt-network", "DELETE_FAILED", "DELETE_FAILED")
    stub.add_response("describe_stack_events", {"StackEvents": [{
        "StackId": "id", "EventId": "e", "StackName": "tt-network", "Timestamp": T0,
        "LogicalResourceId": "Vpc", "ResourceType": "AWS::EC2::VPC",
        "ResourceStatus": "DELETE_FAILED", "ResourceStatusReason": "has dependencies"}]})
    with stub, pytest.raises(TeardownError, match=r"^stack tt-network is DELETE_FAILED: Vpc "
                             r"\(AWS::EC2::VPC\): has dependencies\. Fix: resolve"):
        delete_stacks(cfn, ["tt-network"], echo=lambda s: None, poll_s=0,
                      clock=iter([0, 5, 35, 35]).__next__)


def test_delete_failed_after_delete_in_progress_fails_at_once():
    cfn, stub = _answers("tt-network", "DELETE_IN_PROGRESS", "DELETE_FAILED")
    stub.add_response("describe_stack_events", {"StackEvents": []})
    with stub, pytest.raises(TeardownError, match="is DELETE_FAILED: see the stack's events"):
        delete_stacks(cfn, ["tt-network"], echo=lambda s: None, poll_s=0,
                      clock=iter([0, 1, 2, 3]).__next__)


# --- what a deleted stack retained, on every later teardown --------------------------------------

TAGS = [{"Key": "rlkit:environment", "Value": "tt"}]
RETAINED_DATA = {**DATA, "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
                 "Key": {"Type": "AWS::KMS::Key", "DeletionPolicy": "Retain",
                         "Properties": {"KeyPolicy": {}}}}
DONT_DELETE = ("Delete what remains", "delete it by hand", "in the console")


def tag_retained(ids):
    boto3.client("s3", region_name=REGION).put_bucket_tagging(
        Bucket=ids["Bucket"], Tagging={"TagSet": TAGS})
    boto3.client("kms", region_name=REGION).tag_resource(
        KeyId=ids["Key"], Tags=[{"TagKey": "rlkit:environment", "TagValue": "tt"}])


def test_what_a_deleted_data_stack_retained_is_kept_on_every_later_teardown(tmp_path, capsys):
    """The data stack was deleted by an earlier teardown with the bucket and its key retained
    (storage.retain: true). Every later teardown listed both as leftovers to "delete in the
    console" (the checkpoints and the key that decrypts them) and exited 1."""
    ids = make_env(data=RETAINED_DATA)
    tag_retained(ids)
    fill_bucket(ids["Bucket"])
    # CloudFormation's own tags on what it created (moto adds none)
    stack_id = boto3.client("cloudformation", region_name=REGION).describe_stacks(
        StackName="tt-data")["Stacks"][0]["StackId"]
    tagging = Tagging({
        f"arn:aws:s3:::{ids['Bucket']}": cfn_tags("tt-data", stack_id, "Bucket"),
        f"arn:aws:kms:us-east-1:123456789012:key/{ids['Key']}": cfn_tags("tt-data", stack_id, "Key")})
    code1, _ = run(tmp_path, "--yes", "--delete-data", tagging=tagging)
    out1 = capsys.readouterr().out
    code2, _ = run(tmp_path, "--yes", "--delete-data", tagging=tagging)
    out2 = capsys.readouterr().out
    assert (code1, code2) == (0, 0), out2
    for out in (out1, out2):
        assert (f"kept on purpose (retained by the stack's policy): arn:aws:s3:::{ids['Bucket']}"
                in out)
        assert ("kept on purpose (retained by the stack's policy): "
                f"arn:aws:kms:us-east-1:123456789012:key/{ids['Key']}") in out
        assert "Teardown complete." in out
    assert "No stacks of 'tt' to delete" in out2
    for out in (out1, out2):
        assert not any(words in out for words in DONT_DELETE), out


class Tagging:
    """The Resource Groups Tagging API, listing ``extra`` ARN -> tags besides what moto has:
    tags moto refuses to set (aws:cloudformation:*, which CloudFormation adds), or a resource
    deleted a moment ago (the API lists one for a while)."""

    def __init__(self, extra: dict[str, list[dict[str, str]]]):
        self.client = boto3.client("resourcegroupstaggingapi", region_name=REGION)
        self.extra = extra

    def get_paginator(self, name):
        real, extra = self.client.get_paginator(name), self.extra

        class Pages:
            def paginate(self, **kw):
                for page in real.paginate(**kw):
                    listed = {m["ResourceARN"]: m for m in page["ResourceTagMappingList"]}
                    for arn, tags in extra.items():
                        if arn in listed:
                            listed[arn]["Tags"] = listed[arn].get("Tags", []) + tags
                        else:
                            page["ResourceTagMappingList"].append({"ResourceARN": arn,
                                                                   "Tags": TAGS + tags})
                    yield page
        return Pages()


def cfn_tags(stack: str, stack_id: str | None = None, logical_id: str = "DataBucket"
             ) -> list[dict[str, str]]:
    """The tags CloudFormation puts on what it creates (a made-up stack ID by default: a stack it
    no longer knows)."""
    return [{"Key": "aws:cloudformation:stack-name", "Value": stack},
            {"Key": "aws:cloudformation:stack-id", "Value": stack_id or "arn:aws:cloudformation:"
             f"us-east-1:123456789012:stack/{stack}/0f0e0d0c-0000-0000-0000-000000000000"},
            {"Key": "aws:cloudformation:logical-id", "Value": logical_id}]


def test_what_someone_retained_from_a_failed_stack_delete_is_a_leftover():
    """Before: any DELETE_SKIPPED resource of a deleted stack counted as "kept on purpose
    (retained by the stack's policy)", so a NAT gateway retained from the console while deleting a
    failed network stack went on billing behind an exit 0. Only a DeletionPolicy Retain counts;
    each deleted stack is read once, however many of its resources are left."""
    from ops.teardown_leftovers import retained_by_its_stack

    cfn = boto3.client("cloudformation", region_name=REGION)
    stub = Stubber(cfn)
    sid = "arn:aws:cloudformation:us-east-1:123456789012:stack/tt-network/1"
    stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": "tt-network", "StackId": sid, "CreationTime": datetime(2026, 11, 1, tzinfo=timezone.utc),
        "StackStatus": "DELETE_COMPLETE"}]}, {"StackName": sid})
    stub.add_response("get_template", {"TemplateBody": json.dumps({"Resources": {
        "Nat": {"Type": "AWS::EC2::NatGateway"},
        "Logs": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain"}}})}, {"StackName": sid})
    stub.add_response("list_stack_resources", {"StackResourceSummaries": [
        {"LogicalResourceId": "Nat", "PhysicalResourceId": "nat-0abc", "ResourceType": "AWS::EC2::NatGateway",
         "ResourceStatus": "DELETE_SKIPPED", "LastUpdatedTimestamp": datetime(2026, 11, 2, tzinfo=timezone.utc)},
        {"LogicalResourceId": "Logs", "PhysicalResourceId": "tt-flow", "ResourceType": "AWS::Logs::LogGroup",
         "ResourceStatus": "DELETE_SKIPPED", "LastUpdatedTimestamp": datetime(2026, 11, 2, tzinfo=timezone.utc)}]},
        {"StackName": sid})
    read: dict = {}
    with stub:
        nat = retained_by_its_stack(cfn, "tt", {t["Key"]: t["Value"] for t in cfn_tags("tt-network", sid, "Nat")},
                                    read)
        logs = retained_by_its_stack(cfn, "tt", {t["Key"]: t["Value"] for t in cfn_tags("tt-network", sid, "Logs")},
                                     read)
    assert (nat, logs) == (False, True)
    stub.assert_no_pending_responses()


def test_a_resource_of_a_stack_deleted_beyond_cloudformations_memory_is_kept_by_its_tags(
        tmp_path, capsys):
    """CloudFormation lists a deleted stack for 90 days; after that only the resource's own
    aws:cloudformation:* tags (CloudFormation adds them) say which stack it outlived."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="tt-data-bucket-old")
    s3.put_bucket_tagging(Bucket="tt-data-bucket-old", Tagging={"TagSet": TAGS})
    tagging = Tagging({"arn:aws:s3:::tt-data-bucket-old": cfn_tags("tt-data")})
    code, _ = run(tmp_path, "--yes", tagging=tagging)
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("kept on purpose (retained by the stack's policy): arn:aws:s3:::tt-data-bucket-old"
            in out)


def test_a_resource_naming_another_environments_stack_is_still_a_leftover(tmp_path, capsys):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="stray")
    s3.put_bucket_tagging(Bucket="stray", Tagging={"TagSet": TAGS})
    code, _ = run(tmp_path, "--yes", tagging=Tagging({"arn:aws:s3:::stray": cfn_tags("tt-2-data")}))
    out = capsys.readouterr().out
    assert code == 1
    assert "Still tagged rlkit:environment=tt (1), 180 s after the deletes:\n  arn:aws:s3:::stray" \
        in out


def test_a_deleted_resource_the_tagging_api_still_lists_is_not_called_retained(tmp_path, capsys):
    """The tagging API lists a deleted resource for a while: a bucket CloudFormation deleted is
    not "retained" because its deleted stack is still in CloudFormation's history, whatever its
    aws:cloudformation:* tags say."""
    ids = make_env()
    stack_id = boto3.client("cloudformation", region_name=REGION).describe_stacks(
        StackName="tt-data")["Stacks"][0]["StackId"]
    tags = [{"Key": "aws:cloudformation:stack-name", "Value": "tt-data"},
            {"Key": "aws:cloudformation:stack-id", "Value": stack_id}]
    code, _ = run(tmp_path, "--yes", "--delete-data",
                  tagging=Tagging({f"arn:aws:s3:::{ids['Bucket']}": tags}))
    out = capsys.readouterr().out
    assert code == 1
    assert "retained by the stack's policy" not in out
    assert f"  arn:aws:s3:::{ids['Bucket']}" in out


def test_the_log_bucket_is_found_in_the_data_template_the_kit_synthesizes(synth):
    """The kit's data stack names its access-log bucket in the data bucket's LoggingConfiguration
    (CDK's server_access_logs_bucket): that is what a rerun reads."""
    from ops.teardown import data_resources

    template = synth("default").template("data")
    summaries = [{"LogicalResourceId": rid, "ResourceType": r["Type"],
                  "PhysicalResourceId": f"phys-{rid.lower()}", "ResourceStatus": "CREATE_COMPLETE"}
                 for rid, r in template["Resources"].items()]

    class Cfn:
        def get_template(self, StackName):  # noqa: N803
            return {"TemplateBody": template}

        def get_paginator(self, name):
            assert name == "list_stack_resources"
            return type("P", (), {"paginate": lambda _s, **kw: [
                {"StackResourceSummaries": summaries}]})()

    buckets = [r for r in data_resources(Cfn(), "moe-rl-data") if r.kind == "bucket"]
    assert len(buckets) == 2
    (log_bucket,) = [b for b in buckets if b.log_target]
    assert "accesslogs" in log_bucket.name

"""`rlkit teardown`: order, data emptying, leftovers (moto), failures (Stubber)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import Stubber

from infra import names
from ops import teardown_cmd
from ops.teardown import TeardownError, delete_images, delete_stacks, empty_bucket
from tests.support.teardown import (  # noqa: F401 (aws: autouse fixture)
    DATA, REGION, Recording, aws, fill_bucket, live_names, make_env, make_stack, push_image,
    run, write_config)


# --- order and data ------------------------------------------------------------------------------


def test_deletes_in_dependency_order_and_keeps_data(tmp_path, capsys):
    make_env(extra_gpu=("tt-gpu-old",))
    code, cfn = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 0, out
    assert cfn.deleted == ["tt-gpu-old", "tt-gpu-p5", "tt-cluster", "tt-network"]
    assert live_names() == ["tt-data"]
    assert "Keeping tt-data (bucket and ECR repository outlive clusters)" in out


def test_ephemeral_empties_versioned_bucket_and_images_before_deleting_data(tmp_path, capsys):
    ids = make_env()
    fill_bucket(ids["Bucket"])
    push_image("tt-trainer", "a")
    push_image("tt-trainer", "b")
    code, cfn = run(tmp_path, "--yes", ephemeral=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert cfn.deleted[-1] == "tt-data"
    assert f"Deleted: 3 object version(s) and delete marker(s) in bucket {ids['Bucket']}" in out
    assert "Deleted: 2 image(s) in ECR repository tt-trainer" in out
    assert live_names() == []
    assert "Teardown complete." in out


def test_access_logging_stops_first_and_the_log_bucket_is_emptied_last(tmp_path, capsys):
    """S3 delivers access logs late: a record landing in a log bucket emptied before the bucket
    it logs made CloudFormation's delete of it fail (BucketNotEmpty)."""
    ids = make_env(data={"DataAccessLogs": {"Type": "AWS::S3::Bucket"},  # the kit's logical IDs
                         "DataBucket": {"Type": "AWS::S3::Bucket"}})
    s3 = boto3.client("s3", region_name=REGION)
    logs, data = ids["DataAccessLogs"], ids["DataBucket"]
    assert logs < data  # by name the log bucket comes first, as in the kit's data stack
    s3.put_bucket_policy(Bucket=logs, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
        "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{logs}/*"}]}))
    s3.put_bucket_logging(Bucket=data, BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": logs, "TargetPrefix": "data/"}})
    fill_bucket(data)
    code, _ = run(tmp_path, "--yes", ephemeral=True)
    out = capsys.readouterr().out
    assert code == 0, out
    turned_off = out.index(f"Turned off access logging of bucket {data} (to {logs})")
    emptied_data = out.index(f"in bucket {data}")
    emptied_logs = out.index(f"in bucket {logs}")
    assert turned_off < emptied_data < emptied_logs


def test_delete_data_flag_deletes_data_of_a_normal_config(tmp_path):
    make_env()
    code, cfn = run(tmp_path, "--yes", "--delete-data")
    assert code == 0 and "tt-data" in cfn.deleted


def test_retained_bucket_is_not_emptied_and_is_reported_as_kept(tmp_path, capsys):
    data = dict(DATA)
    data["Bucket"] = {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"}
    ids = make_env(data=data)
    fill_bucket(ids["Bucket"])
    code, _ = run(tmp_path, "--yes", "--delete-data")
    out = capsys.readouterr().out
    assert f"bucket {ids['Bucket']} has DeletionPolicy Retain" in out
    versions = boto3.client("s3", region_name=REGION).list_object_versions(Bucket=ids["Bucket"])
    assert len(versions.get("Versions", [])) == 2  # data untouched
    assert code == 0


def test_empty_bucket_removes_every_version_and_marker():
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="vbucket")
    fill_bucket("vbucket")
    assert empty_bucket(s3, "vbucket") == 3
    listing = s3.list_object_versions(Bucket="vbucket")
    assert not listing.get("Versions") and not listing.get("DeleteMarkers")


def test_delete_images_counts_each_image():
    boto3.client("ecr", region_name=REGION).create_repository(repositoryName="rr")
    push_image("rr", "a")
    ecr = boto3.client("ecr", region_name=REGION)
    assert delete_images(ecr, "rr") == 1
    assert ecr.list_images(repositoryName="rr")["imageIds"] == []


# --- leftovers -----------------------------------------------------------------------------------


def test_leftover_tagged_resource_is_listed_and_fails(tmp_path, capsys):
    make_env()
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="stray-tt")
    s3.put_bucket_tagging(Bucket="stray-tt", Tagging={"TagSet": [
        {"Key": "rlkit:environment", "Value": "tt"}]})
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 1
    assert "Still tagged rlkit:environment=tt (1), 180 s after the deletes:\n  arn:aws:s3:::stray-tt" in out
    assert "created outside the stacks" in out


def test_a_kms_key_scheduled_for_deletion_is_not_a_leftover(tmp_path, capsys):
    # Deleting a key schedules it and it keeps its tags, so the tagging API still lists it;
    # counting it as left would fail every clean teardown now that keys follow their data.
    make_env()
    kms = boto3.client("kms", region_name=REGION)
    key = kms.create_key(Tags=[{"TagKey": "rlkit:environment", "TagValue": "tt"}])["KeyMetadata"]
    kms.schedule_key_deletion(KeyId=key["KeyId"], PendingWindowInDays=30)
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert f"scheduled for deletion by KMS: {key['Arn']}" in out
    assert "Teardown complete." in out and code == 0


def test_a_kms_key_still_enabled_is_a_leftover(tmp_path, capsys):
    make_env()
    kms = boto3.client("kms", region_name=REGION)
    key = kms.create_key(Tags=[{"TagKey": "rlkit:environment", "TagValue": "tt"}])["KeyMetadata"]
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 1 and f"Still tagged rlkit:environment=tt (1), 180 s after the deletes:\n  {key['Arn']}" in out


def test_a_log_group_of_the_cluster_is_a_leftover_even_untagged(tmp_path, capsys):
    # Fluent Bit (auto_create_group) or the control plane recreates a deleted group, untagged
    # and with no retention: found by name, it fails the teardown.
    make_env()
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName="/aws/containerinsights/tt/application")
    logs.create_log_group(logGroupName="/aws/containerinsights/other/application")
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 1
    assert "Still tagged rlkit:environment=tt (1), 180 s after the deletes:\n  log group /aws/containerinsights/tt/application" in out
    assert "recreated" in out and "/other/" not in out


def test_kept_data_resources_are_not_counted_as_leftovers(tmp_path, capsys):
    ids = make_env()
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_bucket_tagging(Bucket=ids["Bucket"], Tagging={"TagSet": [
        {"Key": "rlkit:environment", "Value": "tt"}]})
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 0
    assert f"kept on purpose: arn:aws:s3:::{ids['Bucket']}" in out


# --- dry run, confirmation, failures -------------------------------------------------------------


def test_dry_run_changes_nothing_and_prints_each_action(tmp_path, capsys):
    ids = make_env()
    fill_bucket(ids["Bucket"])
    code, cfn = run(tmp_path, "--dry-run", ephemeral=True)
    out = capsys.readouterr().out
    assert code == 0 and cfn.deleted == []
    assert len(live_names()) == 4
    assert f"[dry-run] would delete 3 object version(s) and delete marker(s) in bucket " \
           f"{ids['Bucket']}" in out
    assert ("[dry-run] would run: aws cloudformation delete-stack --stack-name tt-gpu-p5 "
            "--region us-east-1 (and wait)") in out
    assert out.index("tt-gpu-p5 --region") < out.index("tt-cluster --region") \
        < out.index("tt-network --region") < out.index("[dry-run] would delete 3 object") \
        < out.index("tt-data --region")


def test_wrong_confirmation_deletes_nothing(tmp_path, capsys):
    make_env()
    code, cfn = run(tmp_path, answer="yes")
    assert code == 2 and cfn.deleted == []
    assert "Not confirmed ('yes' is not 'tt'); nothing deleted." in capsys.readouterr().err


def test_typed_name_confirms(tmp_path):
    make_env()
    code, cfn = run(tmp_path, answer="tt")
    assert code == 0 and cfn.deleted


def test_nothing_to_delete(tmp_path, capsys):
    code, cfn = run(tmp_path)
    assert code == 0 and cfn.deleted == []
    assert "No stacks of 'tt' to delete in us-east-1." in capsys.readouterr().out


def test_delete_failed_names_the_resource_and_the_fix():
    cfn = boto3.client("cloudformation", region_name=REGION)
    stub = Stubber(cfn)
    now = datetime(2026, 3, 1, tzinfo=timezone.utc)
    stub.add_response("delete_stack", {}, {"StackName": "tt-network"})
    for status in ("DELETE_IN_PROGRESS", "DELETE_FAILED"):
        stub.add_response("describe_stacks", {"Stacks": [{
            "StackName": "tt-network", "StackStatus": status, "CreationTime": now}]})
    stub.add_response("describe_stack_events", {"StackEvents": [{
        "StackId": "id", "EventId": "e", "StackName": "tt-network", "Timestamp": now,
        "LogicalResourceId": "VpcSubnet1", "ResourceType": "AWS::EC2::Subnet",
        "ResourceStatus": "DELETE_FAILED",
        "ResourceStatusReason": "The subnet has dependencies and cannot be deleted."}]})
    with stub, pytest.raises(TeardownError) as err:
        delete_stacks(cfn, ["tt-network"], echo=lambda s: None, poll_s=0)
    msg = str(err.value)
    assert msg.startswith("stack tt-network is DELETE_FAILED: VpcSubnet1 (AWS::EC2::Subnet): "
                          "The subnet has dependencies")
    assert "run teardown again" in msg


def _cfn_answering(stack: str, *answers):
    """A CloudFormation client stubbed for ``delete_stacks`` on ``stack``, answering in order:
    "delete" (DeleteStack accepted), ("refuse", status) (DeleteStack refused mid-operation), a
    status or (status, reason) (DescribeStacks), "gone" (DescribeStacks: no such stack)."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    stub = Stubber(cfn)
    for answer in answers:
        if answer == "delete":
            stub.add_response("delete_stack", {}, {"StackName": stack})
        elif answer == "gone":
            stub.add_client_error("describe_stacks", service_error_code="ValidationError",
                                  service_message=f"Stack with id {stack} does not exist")
        elif answer[0] == "refuse":
            stub.add_client_error("delete_stack", service_error_code="ValidationError",
                                  service_message=f"Stack [{stack}] cannot be deleted while in "
                                                  f"status {answer[1]}")
        else:
            status, reason = answer if isinstance(answer, tuple) else (answer, None)
            doc = {"StackName": stack, "StackStatus": status,
                   "CreationTime": datetime(2026, 3, 1, tzinfo=timezone.utc)}
            stub.add_response("describe_stacks", {"Stacks": [
                {**doc, "StackStatusReason": reason} if reason else doc]})
    return cfn, stub


@pytest.mark.parametrize("seen_deleting", [True, False])
def test_a_refused_delete_is_reported_with_its_reason_not_waited_out(seen_deleting):
    """CloudFormation answers a delete it refuses (an export in use) by putting the stack back in
    its previous status with the reason, never DELETE_FAILED (aws/aws-cdk#604, boto/botocore#2590);
    the wait used to run to its timeout and then say the delete carries on."""
    reason = ("Export tt-data:ExportsOutputRefDataBucketE6B0FAA83794BF10 cannot be deleted as it "
              "is in use by tt-storage")
    cfn, stub = _cfn_answering("tt-data", "delete", *(["DELETE_IN_PROGRESS"] if seen_deleting else []),
                               ("UPDATE_COMPLETE", reason))
    with stub, pytest.raises(TeardownError) as err:
        delete_stacks(cfn, ["tt-data"], echo=lambda s: None, poll_s=0,
                      clock=iter([0, 40, 40, 40, 40]).__next__)
    assert str(err.value) == (
        f"CloudFormation did not delete stack tt-data: it is UPDATE_COMPLETE again: {reason}. Fix: "
        "delete or update what it names first (a stack that imports this one's outputs), then run "
        "teardown again")


def test_the_old_status_right_after_the_delete_is_not_a_refusal():
    cfn, stub = _cfn_answering("tt-cluster", "delete", "UPDATE_COMPLETE", "DELETE_IN_PROGRESS", "gone")
    with stub:
        delete_stacks(cfn, ["tt-cluster"], echo=lambda s: None, poll_s=0,
                      clock=iter(range(0, 100, 5)).__next__)


def test_a_stack_in_the_middle_of_an_update_is_waited_for_then_deleted():
    """A `cdk deploy` stopped with Ctrl-C leaves CloudFormation updating; DeleteStack is refused
    until the update ends (ValidationError "cannot be deleted while in status ...")."""
    # The old status right after the request, a minute into the wait, is not a refused delete.
    cfn, stub = _cfn_answering("tt-gpu-p5", ("refuse", "UPDATE_IN_PROGRESS"), "UPDATE_IN_PROGRESS",
                               "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_COMPLETE", "delete",
                               "UPDATE_COMPLETE", "DELETE_IN_PROGRESS", "gone")
    lines: list[str] = []
    with stub:
        delete_stacks(cfn, ["tt-gpu-p5"], echo=lines.append, poll_s=0,
                      clock=iter(range(0, 1000, 20)).__next__)
    assert lines[:3] == [
        "  tt-gpu-p5 is UPDATE_IN_PROGRESS: waiting for it to finish before deleting it",
        "  tt-gpu-p5 is UPDATE_COMPLETE_CLEANUP_IN_PROGRESS: waiting for it to finish before deleting it",
        "  deleting tt-gpu-p5"]
    assert lines[-1].startswith("  tt-gpu-p5: deleted [")


def test_an_update_that_outlasts_the_timeout_is_named_with_the_fix():
    cfn, stub = _cfn_answering("tt-cluster", ("refuse", "UPDATE_ROLLBACK_IN_PROGRESS"),
                               "UPDATE_ROLLBACK_IN_PROGRESS", "UPDATE_ROLLBACK_IN_PROGRESS")
    with stub, pytest.raises(TeardownError) as err:
        delete_stacks(cfn, ["tt-cluster"], echo=lambda s: None, poll_s=0, timeout_s=60,
                      clock=iter([0, 30, 90]).__next__)
    assert str(err.value) == (
        "tt-cluster is still UPDATE_ROLLBACK_IN_PROGRESS; CloudFormation cannot delete a stack in "
        "the middle of an operation. Fix: wait for it to finish (or cancel an update: aws "
        "cloudformation cancel-update-stack --stack-name tt-cluster), then run teardown again")


def test_wait_shows_progress_until_gone():
    cfn, stub = _cfn_answering("tt-cluster", "delete", "DELETE_IN_PROGRESS", "gone")
    lines: list[str] = []
    with stub:
        delete_stacks(cfn, ["tt-cluster"], echo=lines.append, poll_s=0,
                      clock=iter(range(0, 100, 10)).__next__)
    assert lines == ["  deleting tt-cluster", "  tt-cluster: DELETE_IN_PROGRESS [10 s]",
                     "  tt-cluster: deleted [30 s]"]


# --- only this environment (issue 12) ------------------------------------------------------------


def make_neighbourhood():
    """Environments moe-rl, moe-rl-gpu (a name the config now refuses, deployed by an older kit)
    and moe-rl-2, plus a foreign stack that matches moe-rl's GPU-stack pattern."""
    bucket_only = {"Bucket": {"Type": "AWS::S3::Bucket"}}
    make_env("moe-rl", data=bucket_only)
    for stack in ("moe-rl-gpu-network", "moe-rl-gpu-cluster", "moe-rl-gpu-gpu-p5"):
        make_stack(stack, "moe-rl-gpu")
    make_stack("moe-rl-gpu-data", "moe-rl-gpu", bucket_only)
    make_env("moe-rl-2", data=bucket_only)
    make_stack("moe-rl-gpu-monitoring", None)  # somebody else's stack, no kit tag


def test_teardown_touches_only_its_own_stacks_among_neighbours(tmp_path, capsys):
    make_neighbourhood()
    code, cfn = run(tmp_path, "--yes", "--delete-data", name="moe-rl")
    out = capsys.readouterr().out
    assert code == 0, out
    assert sorted(cfn.deleted) == ["moe-rl-cluster", "moe-rl-data", "moe-rl-gpu-p5",
                                   "moe-rl-network"]
    assert live_names() == sorted([
        "moe-rl-2-cluster", "moe-rl-2-data", "moe-rl-2-gpu-p5", "moe-rl-2-network",
        "moe-rl-gpu-cluster", "moe-rl-gpu-data", "moe-rl-gpu-gpu-p5", "moe-rl-gpu-monitoring",
        "moe-rl-gpu-network"])
    assert ("Leaving moe-rl-gpu-monitoring alone: it has no rlkit:environment tag." in out)
    assert ("Leaving moe-rl-gpu-network alone: its rlkit:environment tag is 'moe-rl-gpu', not "
            "'moe-rl'." in out)


def test_removed_group_stack_is_deleted_only_with_the_environment_tag(tmp_path):
    make_env("moe-rl")
    make_stack("moe-rl-gpu-old", "moe-rl")     # a group since removed from the config: ours
    make_stack("moe-rl-gpu-other", "someone")  # same pattern, another owner's tag
    code, cfn = run(tmp_path, "--yes", name="moe-rl")
    assert code == 0
    assert cfn.deleted[:2] == ["moe-rl-gpu-old", "moe-rl-gpu-p5"]
    assert "moe-rl-gpu-other" in live_names()


def test_own_stack_name_without_the_tag_is_refused_and_reported(tmp_path, capsys):
    make_stack("tt-network", None)
    make_stack("tt-cluster", "tt")
    code, cfn = run(tmp_path, "--yes")
    err = capsys.readouterr().err
    assert cfn.deleted == ["tt-cluster"]
    assert code == 1
    assert ("warning: not deleting tt-network: it has no rlkit:environment tag; it was not "
            "deployed by this environment") in err


def test_environment_names_that_could_collide_are_refused():
    from infra.config import ConfigError, parse_config

    for bad in ("moe-rl-gpu", "moe-rl-gpu-2", "a-gpu-b"):
        with pytest.raises(ConfigError) as err:
            parse_config({"name": bad})
        assert "reserved" in str(err.value) and "name = " in str(err.value)
    parse_config({"name": "gpu-lab"})  # a leading "gpu" cannot collide


def test_wrong_account_refuses_and_deletes_nothing(tmp_path, capsys):
    make_env()
    code, cfn = run(tmp_path, "--yes", account="999999999999")  # moto's caller is 123456789012
    assert code == 2 and cfn.deleted == []
    assert len(live_names()) == 4
    assert ("error: these credentials are for account 123456789012, but the config's account is "
            "999999999999; nothing deleted.") in capsys.readouterr().err


def test_matching_account_proceeds(tmp_path):
    make_env()
    code, cfn = run(tmp_path, "--yes", account="123456789012")
    assert code == 0 and "tt-cluster" in cfn.deleted


def test_region_flag_differing_from_config_warns(tmp_path, capsys):
    make_env()
    run(tmp_path, "--dry-run", "--region", "us-west-2")
    assert ("warning: --region us-west-2 differs from the config's region us-east-1"
            in capsys.readouterr().err)


class FailingCluster(Recording):
    """CloudFormation that reports DELETE_FAILED for the cluster stack (e.g. a stuck ENI)."""

    def describe_stacks(self, **kw):
        if kw.get("StackName") == "tt-cluster":
            return {"Stacks": [{"StackName": "tt-cluster", "StackStatus": "DELETE_FAILED"}]}
        return self._client.describe_stacks(**kw)

    def delete_stack(self, **kw):
        self.deleted.append(kw["StackName"])
        if kw["StackName"] != "tt-cluster":
            return self._client.delete_stack(**kw)
        return {}

    def describe_stack_events(self, **kw):
        return {"StackEvents": [{"LogicalResourceId": "Cluster", "ResourceType": "AWS::EKS::Cluster",
                                 "ResourceStatus": "DELETE_FAILED",
                                 "ResourceStatusReason": "cluster has dependent ENIs"}]}


def test_failed_cluster_delete_leaves_the_data_untouched(tmp_path, capsys):
    ids = make_env()
    fill_bucket(ids["Bucket"])
    push_image("tt-trainer", "a")
    cfn = FailingCluster(boto3.client("cloudformation", region_name=REGION))
    code, _ = run(tmp_path, "--yes", ephemeral=True, cfn=cfn)
    assert code == 1
    assert "stack tt-cluster is DELETE_FAILED: Cluster (AWS::EKS::Cluster): cluster has " \
           "dependent ENIs" in capsys.readouterr().err
    assert "tt-data" not in cfn.deleted and "tt-data" in live_names()
    versions = boto3.client("s3", region_name=REGION).list_object_versions(Bucket=ids["Bucket"])
    assert len(versions.get("Versions", [])) == 2 and len(versions.get("DeleteMarkers", [])) == 1
    ecr = boto3.client("ecr", region_name=REGION)
    assert len(ecr.list_images(repositoryName="tt-trainer")["imageIds"]) == 1


def test_mistyped_profile_is_a_clean_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    parser = argparse.ArgumentParser(prog="rlkit")
    teardown_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["teardown", "--config", str(write_config(tmp_path)),
                              "--profile", "prdo", "--yes"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "The config profile (prdo) could not be found" in err
    assert "check the spelling of --profile" in err and "Traceback" not in err


def test_every_synthesized_stack_carries_the_environment_tag_teardown_checks(synth):
    # The contract teardown relies on: `cdk deploy` puts each stack's tags (the cloud assembly's
    # artifact tags) on the CloudFormation stack, and every stack of the environment has
    # rlkit:environment=<name> among them.
    s = synth("default")
    stacks = {name: a for name, a in s.manifest["artifacts"].items()
              if a.get("type") == "aws:cloudformation:stack"}
    assert set(names_of_default := stacks) >= {"moe-rl-network", "moe-rl-data", "moe-rl-cluster",
                                               "moe-rl-gpu-p5"}, names_of_default
    for name, artifact in stacks.items():
        assert artifact["properties"]["tags"]["rlkit:environment"] == "moe-rl", name


# --- what teardown does not own ------------------------------------------------------------------

ODCR_CONFIG = """name: tt
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
gpu_node_groups:
  p5:
    instance_type: p5.48xlarge
    availability_zone: us-east-1a
    min_size: 2
    desired_size: 2
    max_size: 2
    capacity: {type: odcr, reservation_id: cr-0fedcba9876543210}
    placement_group_name: tt-odcr-cluster
"""


@pytest.mark.parametrize("flags", [("--yes",), ("--dry-run",)])
def test_an_odcr_in_the_config_is_not_cancelled_but_named_with_its_cost(tmp_path, capsys, flags):
    """The reservation is not the kit's (created and paid for outside it): teardown never cancels
    it, and used to say nothing, so it billed on after "Teardown complete."."""
    make_env()
    code, _ = run(tmp_path, *flags, config_text=ODCR_CONFIG)
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("Not cancelling capacity reservation cr-0fedcba9876543210 "
            "(gpu_node_groups.p5.capacity.reservation_id): it is not the kit's. An On-Demand "
            "Capacity Reservation bills for its instances, used or not, until it ends or is "
            "cancelled: aws ec2 cancel-capacity-reservation --capacity-reservation-id "
            "cr-0fedcba9876543210 --region us-east-1") in out


def test_by_name_an_odcr_the_deployed_gpu_stack_targets_is_named(tmp_path, capsys):
    """Without a config (CI's recovery command) the reservation is read from the GPU stack's
    launch template before the stack goes; a Capacity Block's is not an ODCR."""
    for stack in ("tt-network", "tt-cluster", "tt-data"):
        make_stack(stack, "tt")

    def lt(reservation, market=None):
        data = {"CapacityReservationSpecification": {"CapacityReservationTarget": {
            "CapacityReservationId": reservation}}}
        if market:
            data["InstanceMarketOptions"] = {"MarketType": market}
        return {"Lt": {"Type": "AWS::EC2::LaunchTemplate",
                       "Properties": {"LaunchTemplateData": data}}}
    make_stack("tt-gpu-b200", "tt", lt("cr-0fedcba9876543210"))
    make_stack("tt-gpu-gb200", "tt", lt("cr-0123456789abcdef0", "capacity-block"))
    code, _ = run(tmp_path, "--yes", "--name", "tt", "--region", REGION,
                  "--account", "123456789012")
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("Not cancelling capacity reservation cr-0fedcba9876543210 "
            "(gpu_node_groups.b200.capacity.reservation_id): it is not the kit's.") in out
    assert "cr-0123456789abcdef0" not in out


@pytest.mark.parametrize("example, group, expected", [
    ("p6-b200-odcr", "b200", ["cr-0fedcba9876543210"]),
    ("p5en-capacity-block", "p5en", [])])  # a Capacity Block is not an ODCR
def test_the_reservation_is_read_from_the_launch_template_the_kit_synthesizes(
        synth, example, group, expected):
    from ops.teardown import odcrs_of

    template = synth(example).template("gpu", group)

    class Cfn:
        def get_template(self, StackName):  # noqa: N803
            return {"TemplateBody": template}

    assert odcrs_of(Cfn(), "any") == expected
    assert "cr-0" in json.dumps(template)  # both target their reservation by ID


def test_the_help_names_every_stack_the_teardown_deletes_and_what_it_refuses():
    """Before: the help named only the network, cluster, data and GPU stacks and an order without
    the storage, storage-access and observability stacks; said --name needs only --region (it
    needs --account too); and gave no exit code for credentials of another account (2)."""
    parser = argparse.ArgumentParser(prog="rlkit")
    teardown_cmd.register(parser.add_subparsers(dest="command"))
    text = " ".join(parser._subparsers._group_actions[0].choices["teardown"].format_help().split())
    names_part = text.split("exact stack names (", 1)[1].split(")", 1)[0]
    order = text.split("Order", 1)[1].split("The data stack (", 1)[0]
    suffixes = [stack.removeprefix("<name>") for stack in names.stack_names("<name>").values()]
    assert [s for s in suffixes if s not in names_part] == []
    # the order paragraph names each one ("storage-access", "observability", "storage" ...)
    assert [s for s in suffixes if s.lstrip("-") not in order] == []
    assert "--name ENV tear down the environment of this name without a config (needs --region " \
           "and --account)" in text
    assert ("Refuses, with exit 2 and nothing deleted, when the caller's account (STS) differs "
            "from the config's account") in text
    assert "2 for a bad config, --name without --region or --account, credentials for another " \
           "account" in text

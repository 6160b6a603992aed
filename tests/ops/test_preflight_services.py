"""Preflight: FSx for Lustre where the file system goes, and the CodeBuild quota the image build
needs (ops/preflight_services.py). Fakes answer the AWS calls; moto serves the zone lookup."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from infra import versions
from infra.config import parse_config
from infra.problems import FAIL, PASS, WARN
from ops import preflight, preflight_services
from tests.support.cdk import resources


def config(**over):
    return parse_config({"name": "pf", **over})


# --- FSx for Lustre ------------------------------------------------------------------------------


def test_fsx_in_the_region_is_checked_offline():
    [check] = preflight_services.offline_service_checks(config())
    assert (check.name, check.status) == ("FSx for Lustre in the region", PASS)
    # In `rlkit check` / the offline part of preflight too.
    assert check in preflight.offline_checks(config(), installed=lambda p: True)


def test_a_region_without_fsx_fails_with_the_fix(monkeypatch):
    monkeypatch.setattr(preflight_services, "regions", lambda service: frozenset({"us-west-2"}))
    check = preflight_services.check_fsx_region(config())
    assert check.status == FAIL
    assert "lists no FSx endpoint in us-east-1" in check.detail
    assert check.fix.startswith("choose a region with FSx for Lustre")


def test_no_file_system_no_fsx_checks():
    cfg = config(storage={"shared_filesystem": {"type": "none"}},
                 training={"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"})
    assert preflight_services.offline_service_checks(cfg) == []


class FakeEc2:
    def __init__(self, zones=None, error=None):
        self.zones, self.error, self.asked = zones or [], error, None

    def describe_availability_zones(self, **kwargs):
        self.asked = kwargs
        if self.error:
            raise self.error
        return {"AvailabilityZones": self.zones}


def test_the_file_systems_zone_passes_with_its_zone_id():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        check = preflight_services.check_fsx_zone(ec2, config())
    assert check.status == PASS, check
    assert check.subject == "gpu_node_groups.p5.availability_zone = 'us-east-1a'"
    assert check.detail.startswith("us-east-1a is zone ID use1-az")


@pytest.mark.parametrize("zone, status, detail", [
    ({"ZoneName": "us-east-1a", "ZoneId": "use1-lax1-az1", "ZoneType": "local-zone",
      "State": "available"}, FAIL, "is a local-zone: FSx for Lustre file systems live in "
                                   "Availability Zones only"),
    ({"ZoneName": "us-east-1a", "ZoneId": "use1-az6", "ZoneType": "availability-zone",
      "State": "impaired"}, FAIL, "us-east-1a (use1-az6) is impaired"),
])
def test_a_zone_that_cannot_hold_the_file_system_fails(zone, status, detail):
    ec2 = FakeEc2([zone])
    check = preflight_services.check_fsx_zone(ec2, config())
    assert check.status == status and detail in check.detail
    assert ec2.asked == {"ZoneNames": ["us-east-1a"], "AllAvailabilityZones": True}


def test_an_unknown_zone_fails_and_an_unreadable_one_warns():
    assert preflight_services.check_fsx_zone(FakeEc2([]), config()).detail == (
        "us-east-1a is not a zone of us-east-1 for this account")
    denied = ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}},
                         "DescribeAvailabilityZones")
    check = preflight_services.check_fsx_zone(FakeEc2(error=denied), config())
    assert check.status == WARN and "ec2:DescribeAvailabilityZones" in check.fix


# --- CodeBuild 2XLARGE ---------------------------------------------------------------------------


class FakeQuotas:
    def __init__(self, quotas):
        self.quotas, self.asked = quotas, []

    def get_paginator(self, name):
        assert name == "list_service_quotas"
        fake = self

        class Pages:
            def paginate(self, **kwargs):
                fake.asked.append(kwargs)
                return [{"Quotas": fake.quotas[:2]}, {"Quotas": fake.quotas[2:]}]
        return Pages()


LINUX_2XL = "Concurrently running builds for Linux/2XLarge environment"
OTHERS = [{"QuotaName": "Concurrently running builds for Linux/Large environment",
           "QuotaCode": "L-AAAA0001", "Value": 15.0},
          {"QuotaName": "Concurrently running builds for Linux GPU/2XLarge environment",
           "QuotaCode": "L-AAAA0002", "Value": 0.0}]


def test_a_zero_2xlarge_quota_fails_with_the_increase_command():
    quotas = FakeQuotas(OTHERS + [{"QuotaName": LINUX_2XL, "QuotaCode": "L-AAAA0003",
                                   "Value": 0.0}])
    check = preflight_services.check_image_build_quota(quotas, "us-east-1")
    assert quotas.asked == [{"ServiceCode": "codebuild"}]
    assert (check.status, check.subject) == (FAIL, "CodeBuild BUILD_GENERAL1_2XLARGE (us-east-1)")
    assert "Cannot have more than 0 builds in queue for the account" in check.detail
    assert check.fix == ("request 1 or more: aws service-quotas request-service-quota-increase "
                         "--service-code codebuild --quota-code L-AAAA0003 --desired-value 1 "
                         "--region us-east-1")


def test_a_positive_quota_passes_and_a_missing_one_warns():
    ok = FakeQuotas(OTHERS + [{"QuotaName": LINUX_2XL, "QuotaCode": "L-AAAA0003", "Value": 1.0}])
    assert preflight_services.check_image_build_quota(ok, "us-east-1").status == PASS
    missing = preflight_services.check_image_build_quota(FakeQuotas(OTHERS), "us-east-1")
    assert missing.status == WARN and "Service Quotas console" in missing.fix


def test_the_quota_checked_is_the_build_projects_compute_type(synth):
    [project] = resources(synth("default").template("data"), "AWS::CodeBuild::Project").values()
    assert project["Properties"]["Environment"]["ComputeType"] == \
        versions.IMAGE_BUILD_COMPUTE_TYPE


# --- the deployed file system stays --------------------------------------------------------------

FS_ID = "fs-0123456789abcdef0"
SUBNET = "subnet-0123456789abcdef0"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def deployed(zone="us-east-1a", key_manager="AWS", stack_error=None):
    """AwsClients whose CloudFormation, FSx, EC2 and KMS answer for a deployed storage stack
    (botocore's Stubber: the requests and answers are checked against the services' models)."""
    from ops.aws import AwsClients
    from tests.support.preflight import stubbed

    cfn, cfn_stub = stubbed("cloudformation")
    fsx, fsx_stub = stubbed("fsx")
    ec2, ec2_stub = stubbed("ec2")
    kms, kms_stub = stubbed("kms")
    if stack_error:
        cfn_stub.add_client_error("describe_stacks", "ValidationError", stack_error,
                                  expected_params={"StackName": "pf-storage"})
    else:
        cfn_stub.add_response("describe_stacks", {"Stacks": [{
            "StackName": "pf-storage", "CreationTime": "2026-11-01T00:00:00Z",
            "StackStatus": "UPDATE_COMPLETE",
            "Outputs": [{"OutputKey": "SharedFileSystemId", "OutputValue": FS_ID}]}]},
            {"StackName": "pf-storage"})
        fsx_stub.add_response("describe_file_systems", {"FileSystems": [{
            "FileSystemId": FS_ID, "FileSystemType": "LUSTRE", "SubnetIds": [SUBNET],
            "KmsKeyId": KEY_ARN}]}, {"FileSystemIds": [FS_ID]})
        ec2_stub.add_response("describe_subnets", {"Subnets": [{
            "SubnetId": SUBNET, "AvailabilityZone": zone}]}, {"SubnetIds": [SUBNET]})
        kms_stub.add_response("describe_key", {"KeyMetadata": {
            "KeyId": KEY_ARN.rsplit("/", 1)[1], "KeyManager": key_manager}}, {"KeyId": KEY_ARN})
    for stub in (cfn_stub, fsx_stub, ec2_stub, kms_stub):
        stub.activate()
    return AwsClients(cloudformation=cfn, fsx=fsx, ec2=ec2, kms=kms)


def test_a_storage_stack_not_deployed_yet_passes():
    check = preflight_services.check_fsx_kept(
        deployed(stack_error="Stack with id pf-storage does not exist"), config())
    assert (check.status, check.detail) == (
        PASS, "pf-storage is not deployed: the first deploy creates the file system in us-east-1a")


def test_the_same_zone_and_key_keep_the_file_system():
    check = preflight_services.check_fsx_kept(deployed(), config())
    assert (check.status, check.detail) == (
        PASS, f"{FS_ID} stays: same AZ (us-east-1a) and the AWS-managed key")


def test_moving_the_training_groups_zone_would_replace_the_file_system():
    """Before: the training group moved to us-east-1b and the next deploy made a new, empty file
    system there; the old one, with the saves, stayed billed outside any stack."""
    check = preflight_services.check_fsx_kept(deployed(zone="us-east-1b"), config())
    assert check.status == FAIL
    assert check.detail == (
        f"a deploy would replace {FS_ID}: this config changes its AZ from us-east-1b to us-east-1a, "
        "which a file system cannot change in place; CloudFormation would create a new, empty one, "
        f"and {FS_ID} would be retained outside any stack, still billed, with the saves on it")
    assert check.fix.startswith("keep gpu_node_groups.p5.availability_zone: us-east-1b; to move "
                                "it on purpose, let the run's last save reach S3, delete pf-storage")


def test_switching_kms_would_replace_it_and_an_ephemeral_one_is_deleted():
    cfg = config(storage={"kms": True}, ephemeral=True,
                 cost_guard={"ttl_hours": 6, "max_gpu_nodes": 2})
    check = preflight_services.check_fsx_kept(deployed(), cfg)
    assert check.status == FAIL
    assert ("changes its encryption from the AWS-managed key to the kit's customer-managed key"
            in check.detail)
    assert "would be deleted with everything on it" in check.detail
    assert check.fix.startswith("keep storage.kms: false;")
    assert preflight_services.check_fsx_kept(deployed(key_manager="CUSTOMER"), cfg).status == PASS


def test_an_unreadable_file_system_warns_with_the_permissions():
    from ops.aws import AwsClients
    from tests.support.preflight import stubbed

    clients = deployed()
    fsx, stub = stubbed("fsx")
    stub.add_client_error("describe_file_systems", "AccessDeniedException", "no")
    stub.activate()
    clients = AwsClients(cloudformation=clients.cloudformation, fsx=fsx)
    check = preflight_services.check_fsx_kept(clients, config())
    assert check.status == WARN and check.detail.startswith(f"cannot tell whether a deploy would replace {FS_ID}")
    assert "fsx:DescribeFileSystems, ec2:DescribeSubnets and kms:DescribeKey" in check.fix


def test_what_the_check_compares_is_what_cloudformation_cannot_update(synth):
    """The real CloudFormation resource schema (the one cfn-lint ships) lists the file system's
    SubnetIds and KmsKeyId as create-only, and the synthesized storage stack sets exactly those
    from the AZ and storage.kms: the two things the check compares."""
    import json
    from importlib import resources as importlib_resources

    schemas = importlib_resources.files("cfnlint.data.schemas")
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    schema = json.loads((schemas / "resources" / f"{index['AWS::FSx::FileSystem']}.json").read_text())
    assert {"/properties/SubnetIds", "/properties/KmsKeyId"} <= set(schema["createOnlyProperties"])
    for example, kms in (("default", False), ("p5-2node", True)):
        [fs] = resources(synth(example).template("storage"), "AWS::FSx::FileSystem").values()
        assert len(fs["Properties"]["SubnetIds"]) == 1
        assert ("KmsKeyId" in fs["Properties"]) == kms == synth(example).config.storage.kms

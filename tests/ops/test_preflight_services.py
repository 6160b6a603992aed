"""Preflight: FSx for Lustre where the file system goes, and the CodeBuild quota the image build
needs (ops/preflight_services.py). Fakes answer the AWS calls; moto serves the zone lookup."""

from __future__ import annotations

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from moto import mock_aws

from infra import versions
from infra.config import parse_config
from infra.problems import FAIL, PASS, WARN
from ops import preflight, preflight_services
from tests.support import REPO_ROOT
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


def ultraserver_config():
    # The file system's zone is configured (the Local Zone group's parent AZ), not the group's.
    return parse_config(yaml.safe_load((REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml")
                                       .read_text()))


@pytest.mark.parametrize("zones, detail, fix", [
    ([{"ZoneName": "us-east-1a", "ZoneId": "use1-az4", "ZoneType": "availability-zone",
       "State": "impaired"}], "us-east-1a (use1-az4) is impaired",
     "set storage.shared_filesystem.availability_zone to an available zone of us-east-1"),
    ([{"ZoneName": "us-east-1a", "ZoneId": "use1-dfw2-az1", "ZoneType": "local-zone",
       "State": "available"}],
     "us-east-1a (use1-dfw2-az1) is a local-zone: FSx for Lustre file systems live in "
     "Availability Zones only",
     "set storage.shared_filesystem.availability_zone to an Availability Zone of us-east-1"),
    ([], "us-east-1a is not a zone of us-east-1 for this account",
     "set storage.shared_filesystem.availability_zone to one of `aws ec2 "
     "describe-availability-zones --region us-east-1`"),
])
def test_a_configured_file_system_zone_is_named_as_the_field_to_change(zones, detail, fix):
    check = preflight_services.check_fsx_zone(FakeEc2(zones), ultraserver_config())
    assert check.status == FAIL
    assert check.subject == "storage.shared_filesystem.availability_zone = 'us-east-1a'"
    assert (check.detail, check.fix) == (detail, fix)


def test_without_a_configured_zone_the_training_groups_field_is_named():
    check = preflight_services.check_fsx_zone(FakeEc2([{
        "ZoneName": "us-east-1a", "ZoneId": "use1-az6", "ZoneType": "availability-zone",
        "State": "impaired"}]), config())
    assert check.subject == "gpu_node_groups.p5.availability_zone = 'us-east-1a'"
    assert check.fix == ("set gpu_node_groups.p5.availability_zone to an available zone of "
                         "us-east-1 (the file system goes in the training group's zone)")


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

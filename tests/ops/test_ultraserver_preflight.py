"""Preflight for UltraServer Capacity Blocks: the block's UltraServer type, its Local Zone and the
zone-group opt-in. botocore's Stubber checks every request and response against the EC2 model
(botocore 1.44.8 has DescribeCapacityBlocks and UltraserverType; moto models neither)."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from infra.config import parse_config
from ops.aws import AwsClients
from ops.preflight import check_ultraserver_block
from ops.preflight_reads import PreflightReads
from tests.support import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml"
RID, BLOCK, ZONE = "cr-0abcdef0123456789", "cb-0123456789abcdef0", "us-east-1-dfw-2a"


def reads(ec2):
    return PreflightReads(AwsClients(ec2=ec2))


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def run(*, block_type="u-p6e-gb200x72", block_id=BLOCK, zone_type="local-zone",
        opt_in="opted-in", **config_changes):
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(config_changes)
    cfg = parse_config(data)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        reservation = {"CapacityReservationId": RID, "InstanceType": "p6e-gb200.36xlarge",
                       "AvailabilityZone": ZONE, "State": "active",
                       "StartDate": datetime(2026, 12, 1, tzinfo=timezone.utc)}
        if block_id:
            reservation["CapacityBlockId"] = block_id
        stub.add_response("describe_capacity_reservations",
                          {"CapacityReservations": [reservation]},
                          {"CapacityReservationIds": [RID]})
        if block_id:
            stub.add_response("describe_capacity_blocks", {"CapacityBlocks": [
                {"CapacityBlockId": block_id, "UltraserverType": block_type,
                 "AvailabilityZone": ZONE}]}, {"CapacityBlockIds": [block_id]})
            stub.add_response("describe_availability_zones", {"AvailabilityZones": [
                {"ZoneName": ZONE, "ZoneType": zone_type, "OptInStatus": opt_in,
                 "GroupName": "us-east-1-dfw-2", "ParentZoneName": "us-east-1a"}]},
                {"ZoneNames": [ZONE], "AllAvailabilityZones": True})
        else:
            stub.add_response("describe_availability_zones", {"AvailabilityZones": [
                {"ZoneName": ZONE, "ZoneType": zone_type, "OptInStatus": opt_in,
                 "GroupName": "us-east-1-dfw-2", "ParentZoneName": "us-east-1a"}]},
                {"ZoneNames": [ZONE], "AllAvailabilityZones": True})
        checks = check_ultraserver_block(reads(ec2), cfg, "gb200", cfg.gpu_node_groups["gb200"])
    return [(c.name, c.status, c.detail, c.fix) for c in checks]


def test_a_matching_block_in_an_opted_in_local_zone_passes():
    assert run() == [
        ("ultraserver type", "pass", f"Capacity Block {BLOCK}: u-p6e-gb200x72", ""),
        ("ultraserver zone", "pass", f"Local Zone {ZONE} (zone group us-east-1-dfw-2)", ""),
        ("zone group opt-in", "pass", "us-east-1-dfw-2: opted-in", "")]


def test_another_ultraserver_type_fails_naming_the_block_type():
    (name, status, detail, fix), *_ = run(block_type="u-p6e-gb200x36")
    assert (name, status) == ("ultraserver type", "fail")
    assert detail == (f"Capacity Block {BLOCK} is UltraServer type u-p6e-gb200x36, the config "
                      "says u-p6e-gb200x72")
    assert fix == "set gpu_node_groups.gb200.capacity.ultraserver_type: u-p6e-gb200x36"


def test_a_reservation_of_no_capacity_block_fails():
    (name, status, detail, _), *_ = run(block_id=None)
    assert (name, status) == ("ultraserver type", "fail")
    assert "belongs to no Capacity Block" in detail


def test_zone_group_not_opted_in_fails_with_the_command():
    opt = [c for c in run(opt_in="not-opted-in") if c[0] == "zone group opt-in"][0]
    assert opt[1] == "fail"
    assert opt[3] == ("aws ec2 modify-availability-zone-group --region us-east-1 --group-name "
                      "us-east-1-dfw-2 --opt-in-status opted-in")


def test_a_local_zone_the_config_does_not_list_fails():
    data = yaml.safe_load(EXAMPLE.read_text())
    zone = [c for c in run(local_zones=["us-east-1-dfw-9a"],
                           gpu_node_groups={"gb200": {
                               **data["gpu_node_groups"]["gb200"],
                               "availability_zone": "us-east-1-dfw-9a"}})
            if c[0] == "ultraserver zone"][0]
    assert zone[1] == "fail" and zone[3].startswith(f"add {ZONE} at the end of local_zones")


def test_non_ultraserver_groups_get_no_such_check():
    cfg = parse_config({})
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2):  # any call would fail: none is made
        assert check_ultraserver_block(reads(ec2), cfg, "p5", cfg.gpu_node_groups["p5"]) == []


def _after_error(code, message):
    cfg = parse_config(yaml.safe_load(EXAMPLE.read_text()))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", code, message,
                              expected_params={"CapacityReservationIds": [RID]})
        checks = check_ultraserver_block(reads(ec2), cfg, "gb200", cfg.gpu_node_groups["gb200"])
        stub.assert_no_pending_responses()
    return [(c.name, c.status, c.detail, c.fix) for c in checks]


@pytest.mark.parametrize("code", ["InvalidCapacityReservationId.NotFound",
                                  "InvalidCapacityReservationId.Malformed"])
def test_a_reservation_id_ec2_does_not_know_is_left_to_the_reservation_checks(code):
    # check_reservation reports it as "not found" with the ID's fix; blaming IAM here too would
    # send the user after a permission they already have.
    assert _after_error(code, f"The capacity reservation ID '{RID}' is wrong") == []


def test_a_refused_describe_capacity_reservations_names_the_permission():
    assert _after_error("UnauthorizedOperation", "You are not authorized") == [(
        "ultraserver block", "fail",
        "DescribeCapacityReservations failed: UnauthorizedOperation: You are not authorized",
        "allow ec2:DescribeCapacityReservations for your credentials")]

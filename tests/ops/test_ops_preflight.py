"""`rlkit preflight`: each check passes and fails on purpose.

moto serves what it implements (STS, DescribeInstanceTypeOfferings, CloudFormation); botocore's
Stubber answers DescribeCapacityReservations and GetServiceQuota, which moto does not model.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import boto3
import pytest
from infra.config import parse_config
from ops.aws import AwsClients
from ops.preflight_reads import PreflightReads
from ops.preflight import (
    FAIL,
    PASS,
    WARN,
    check_existing_stacks,
    check_identity,
    check_kubernetes_version,
    check_offering,
    check_placement,
    check_shared_reservations,
    check_quota,
    check_reservation,
    run_preflight,
)
from tests.support.preflight import _factory, _quota, aws, fake_credentials, parse, stubbed  # noqa: F401 (fixtures)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
RID = "cr-0123456789abcdef0"


def config(**over):
    data = {"name": "pf", "region": "us-east-1", "availability_zones": ["us-east-1a", "us-east-1b"]}
    data.update(over)
    return parse_config(data)


def cb_config(desired=2, placement_group=None, ctype="capacity-block", az="us-east-2b", **extra):
    group = {"instance_type": "p5en.48xlarge", "availability_zone": az, "min_size": 0,
             "desired_size": desired, "max_size": desired,
             "capacity": {"type": ctype, "reservation_id": RID}, **extra}
    if placement_group is not None:
        group["placement_group"] = placement_group
    return parse_config({
        "name": "cb", "region": "us-east-2", "availability_zones": ["us-east-2a", "us-east-2b"],
        "gpu_node_groups": {"p5en": group},
        "training": {"node_group": "p5en", "nodes": desired, "parallel": {"ep": 8}}})


def reservation(**over):
    r = {"CapacityReservationId": RID, "InstanceType": "p5en.48xlarge",
         "AvailabilityZone": "us-east-2b", "State": "active", "TotalInstanceCount": 2,
         "AvailableInstanceCount": 2, "ReservationType": "capacity-block",
         "StartDate": NOW - timedelta(hours=1), "EndDate": NOW + timedelta(days=2)}
    r.update(over)
    return r


def run_reservation(cfg, response=None, error=None, own: int | None = None):
    """check_reservation's checks by name; with ``own``, the environment is given and EC2 lists
    that many of the group's own instances in the reservation."""
    ec2, stub = stubbed("ec2", "us-east-2")
    if error:
        stub.add_client_error("describe_capacity_reservations", service_error_code=error,
                              service_message=f"The capacity reservation ID '{RID}' does not exist")
    else:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": response},
                          {"CapacityReservationIds": [RID]})
    if own is not None:
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [
            {"InstanceId": f"i-0123456789abcdef{i}"} for i in range(own)]}]}, {"Filters": [
                {"Name": "capacity-reservation-id", "Values": [RID]},
                {"Name": "tag:rlkit:environment", "Values": [cfg.name]},
                {"Name": "tag:rlkit:node-group", "Values": ["p5en"]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]}]})
    with stub:
        checks = check_reservation(PreflightReads(AwsClients(ec2=ec2)), "p5en",
                                   cfg.gpu_node_groups["p5en"], "us-east-2", NOW,
                                   environment=cfg.name if own is not None else None)
    stub.assert_no_pending_responses()
    return {c.name: c for c in checks}


# --- credentials ---------------------------------------------------------------------------------


def test_identity_passes_with_credentials(aws):
    check = check_identity(boto3.client("sts", region_name="us-east-1"), config(), "us-east-1")
    assert check.status == PASS and "account 123456789012" in check.detail


def test_identity_fails_for_another_account(aws):
    check = check_identity(boto3.client("sts", region_name="us-east-1"),
                           config(account="999999999999"), "us-east-1")
    assert check.status == FAIL
    assert "credentials are for account 123456789012" in check.detail
    assert "switch to credentials for account 999999999999" in check.fix


def test_identity_fails_without_credentials(monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    # A fresh session: boto3's default session keeps credentials an earlier test's env gave it.
    sts = boto3.session.Session().client("sts", region_name="us-east-1")
    check = check_identity(sts, config(), "us-east-1")
    assert check.status == FAIL
    assert check.detail.startswith("no AWS credentials found")
    assert "configure AWS credentials" in check.fix


# --- instance type offering ----------------------------------------------------------------------


def test_offering_passes_where_moto_lists_p5(aws):
    cfg = config()
    check = check_offering(PreflightReads(AwsClients("us-east-1")), "p5",
                           cfg.gpu_node_groups["p5"], "us-east-1")
    assert check.status == PASS and check.detail == "p5.48xlarge is offered in us-east-1a"


def test_offering_fails_and_names_the_zones_that_offer_it(aws):
    cfg = config(gpu_node_groups={"b200": {"instance_type": "p6-b200.48xlarge",
                                           "availability_zone": "us-east-1a"}},
                 training={"node_group": "b200"})
    check = check_offering(PreflightReads(AwsClients("us-east-1")), "b200",
                           cfg.gpu_node_groups["b200"], "us-east-1")
    assert check.status == FAIL
    assert check.detail == "p6-b200.48xlarge is not offered in us-east-1a; offered in: us-east-1c"
    assert check.fix.startswith("set gpu_node_groups.b200.availability_zone to one of us-east-1c")


def test_offering_only_warns_for_reserved_capacity(aws):
    cfg = cb_config(az="us-east-2b")
    ec2 = boto3.client("ec2", region_name="us-east-2")
    group = cfg.gpu_node_groups["p5en"].model_copy(update={"availability_zone": "us-east-2z"})
    check = check_offering(PreflightReads(AwsClients(ec2=ec2)), "p5en", group, "us-east-2")
    assert check.status == WARN and "reservation is what counts" in check.detail


# --- quota ---------------------------------------------------------------------------------------


def test_quota_passes_when_it_covers_max_size():
    quotas, stub = _quota(384.0)
    with stub:
        check = check_quota(quotas, config(), "us-east-1")
    assert check.status == PASS and "quota 384 vCPUs >= 384 vCPUs" in check.detail


def test_quota_fails_below_desired_and_says_how_to_raise_it():
    quotas, stub = _quota(192.0)
    with stub:
        check = check_quota(quotas, config(), "us-east-1")
    assert check.status == FAIL
    assert check.detail.startswith("quota 192 vCPUs < 384 vCPUs the desired nodes need")
    assert ("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
            "L-417A185B --desired-value 384 --region us-east-1") in check.fix


def test_quota_warns_when_only_desired_fits():
    cfg = config(gpu_node_groups={"p5": {"instance_type": "p5.48xlarge",
                                         "availability_zone": "us-east-1a", "desired_size": 2,
                                         "max_size": 4}})
    quotas, stub = _quota(384.0)
    with stub:
        check = check_quota(quotas, cfg, "us-east-1")
    assert check.status == WARN and "not max_size (768 vCPUs" in check.detail


def test_quota_is_not_needed_for_reservations():
    quotas, stub = stubbed("service-quotas")
    with stub:  # no call expected
        check = check_quota(quotas, cb_config(), "us-east-2")
    assert check.status == PASS and "reservations do not count" in check.detail


# --- reservations --------------------------------------------------------------------------------


def test_reservation_all_pass_for_a_matching_active_block():
    checks = run_reservation(cb_config(), [reservation()])
    assert {c.status for c in checks.values()} == {PASS}
    assert set(checks) == {"reservation exists", "reservation instance type", "reservation AZ",
                           "reservation state", "reservation size"}


def test_reservation_not_found_fails_with_the_lookup_command():
    checks = run_reservation(cb_config(), error="InvalidCapacityReservationId.NotFound")
    c = checks["reservation exists"]
    assert c.status == FAIL and c.detail == f"capacity block {RID} not found in us-east-2"
    assert "aws ec2 describe-capacity-reservations --region us-east-2" in c.fix


def test_reservation_in_another_az_fails():
    c = run_reservation(cb_config(), [reservation(AvailabilityZone="us-east-2a")])["reservation AZ"]
    assert c.status == FAIL and c.detail == f"{RID} is in us-east-2a, the group is in us-east-2b"
    assert c.fix.startswith("set gpu_node_groups.p5en.availability_zone: us-east-2a")


def test_reservation_of_another_instance_type_fails():
    c = run_reservation(cb_config(), [reservation(InstanceType="p5.48xlarge")])[
        "reservation instance type"]
    assert c.status == FAIL and "reserves p5.48xlarge, the group asks for p5en.48xlarge" in c.detail


def test_reservation_too_small_fails():
    c = run_reservation(cb_config(desired=4), [reservation()])["reservation size"]
    assert c.status == FAIL and c.detail == f"{RID} holds 2 instance(s), the group wants 4"
    assert "lower gpu_node_groups.p5en.desired_size" in c.fix


def test_scheduled_block_warns_with_its_start_and_uses_the_requested_quantity_tag():
    start = NOW + timedelta(hours=5)
    checks = run_reservation(cb_config(), [reservation(
        State="scheduled", StartDate=start, TotalInstanceCount=0, AvailableInstanceCount=0,
        Tags=[{"Key": "aws:ec2capacityreservation:incrementalRequestedQuantity", "Value": "2"}])])
    state = checks["reservation state"]
    assert state.status == WARN
    assert state.detail.startswith("scheduled; starts 2026-03-01 17:00 UTC (in 5.0 h)")
    assert checks["reservation size"].status == PASS


def test_expired_block_fails():
    c = run_reservation(cb_config(), [reservation(State="expired")])["reservation state"]
    assert c.status == FAIL and "cannot deliver instances any more" in c.fix


def test_odcr_configured_as_capacity_block_fails():
    c = run_reservation(cb_config(), [reservation(ReservationType="default")])["reservation kind"]
    assert c.status == FAIL and c.fix == "set gpu_node_groups.p5en.capacity.type: odcr"


def test_active_reservation_with_too_few_free_instances_warns():
    c = run_reservation(cb_config(), [reservation(AvailableInstanceCount=1)])["reservation size"]
    assert (c.status, c.detail) == (WARN, f"{RID} holds 2: 1 other instance(s) use it, 1 free; the "
                                          "group wants 2")
    assert c.fix == ("stop the other instances using the reservation (aws ec2 describe-instances "
                     f"--filters Name=capacity-reservation-id,Values={RID}), or lower "
                     "gpu_node_groups.p5en.desired_size")


def test_the_groups_own_running_nodes_are_not_others_in_its_reservation():
    """Before: a redeploy while the group's two nodes ran in its block warned "only 0 are free
    (others run already)" and said to stop the instances: the group's own training nodes.
    AvailableInstanceCount is what is left after every running instance, the group's included."""
    c = run_reservation(cb_config(), [reservation(AvailableInstanceCount=0)], own=2)
    assert c["reservation size"].status == PASS
    mixed = run_reservation(cb_config(), [reservation(TotalInstanceCount=3,
                                                      AvailableInstanceCount=0)], own=1)
    assert mixed["reservation size"].detail == (f"{RID} holds 3: 2 other instance(s) use it "
                                                "besides this group's 1, 0 free; the group wants 2")


def test_a_block_that_ends_before_eks_would_keep_its_nodes_fails():
    """Before: an active block ending in 20 minutes passed ("ends ... (in 0.3 h)"), and one whose
    end had passed but still read active passed too. EKS scales a block's group to 0 40 minutes
    before the end; EC2 may take up to an hour to mark an ended reservation."""
    soon = run_reservation(cb_config(), [reservation(EndDate=NOW + timedelta(minutes=20))])
    assert (soon["reservation state"].status, soon["reservation state"].detail) == (
        FAIL, "active, but it ends 2026-03-01 12:20 UTC (in 0.3 h): EKS scales a Capacity Block's "
              "node group to 0 40 minutes before its end (EC2 terminates the instances 30 minutes "
              "before), so a deploy now gets no nodes")
    assert soon["reservation state"].fix == (f"buy a later capacity block and put its ID into "
                                             "gpu_node_groups.p5en.capacity.reservation_id")
    ended = run_reservation(cb_config(), [reservation(EndDate=NOW - timedelta(minutes=5))])
    assert ended["reservation state"].status == FAIL
    assert ended["reservation state"].detail == ("active, but its end date passed: 2026-03-01 11:55 "
                                                 "UTC (0.1 h ago)")
    # an ODCR has no EKS scale-down before its end: 20 minutes left is still a pass
    odcr = run_reservation(cb_config(ctype="odcr"), [reservation(
        ReservationType="default", EndDate=NOW + timedelta(minutes=20))])
    assert odcr["reservation state"].status == PASS
    assert run_reservation(cb_config(), [reservation(EndDate=NOW + timedelta(minutes=41))])[
        "reservation state"].status == PASS


def test_a_reservation_for_another_platform_or_tenancy_fails():
    """EC2 launches into a reservation only with matching "instance type, platform, Availability
    Zone, and tenancy" (EC2 user guide, capacity-reservations-launch); the kit's nodes are Linux
    on default tenancy."""
    c = run_reservation(cb_config(ctype="odcr"), [reservation(
        ReservationType="default", InstancePlatform="Red Hat Enterprise Linux",
        Tenancy="dedicated")])["reservation attributes"]
    assert (c.status, c.detail) == (
        FAIL, f"{RID} reserves platform 'Red Hat Enterprise Linux' (the kit launches 'Linux/UNIX') "
              "and tenancy 'dedicated' (the kit launches 'default'): EC2 launches an instance into "
              "a reservation only when platform and tenancy match")
    fine = run_reservation(cb_config(), [reservation(InstancePlatform="Linux/UNIX", Tenancy="default")])
    assert "reservation attributes" not in fine


def test_an_empty_or_ended_reservation_suggests_no_group_of_zero():
    """Before: a reservation holding 0 instances said to lower desired_size and max_size to 0,
    which config refuses (max_size >= 1); an expired one got that besides its state failure."""
    empty = run_reservation(cb_config(ctype="odcr"), [reservation(
        ReservationType="default", TotalInstanceCount=0, AvailableInstanceCount=0)])["reservation size"]
    assert empty.fix == ("reserve capacity for 2 instance(s) and put its ID into "
                         "gpu_node_groups.p5en.capacity.reservation_id")
    expired = run_reservation(cb_config(), [reservation(State="expired", TotalInstanceCount=0)])
    assert "reservation size" not in expired and expired["reservation state"].status == FAIL


# --- placement group, kubernetes version ---------------------------------------------------------


def test_placement_group_with_reservation_warns_with_the_issue():
    cfg = cb_config(placement_group=True, ctype="odcr")
    c = check_placement("p5en", cfg.gpu_node_groups["p5en"])
    assert c.status == WARN and "eksctl-io/eksctl issue 7949" in c.detail
    assert c.fix == ("remove gpu_node_groups.p5en.placement_group, or set "
                     "gpu_node_groups.p5en.placement_group_name to the placement group the "
                     "reservation was created in")


@pytest.mark.parametrize("placement", [{"placement_group": True},
                                       {"placement_group_name": "cb-cluster"}])
def test_placement_group_for_a_capacity_block_warns_and_asks_to_remove_it(placement):
    c = check_placement("p5en", cb_config(**placement).gpu_node_groups["p5en"])
    assert c.status == WARN and "PurchaseCapacityBlock takes none" in c.detail
    assert c.fix == ("remove gpu_node_groups.p5en.placement_group and "
                     "gpu_node_groups.p5en.placement_group_name")


def test_groups_sharing_a_block_fit_in_it_together():
    cfg = cb_config(desired=2)
    two = {"a": cfg.gpu_node_groups["p5en"], "b": cfg.gpu_node_groups["p5en"]}
    for total, status in ((3, FAIL), (4, PASS)):
        ec2, stub = stubbed("ec2", "us-east-2")
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
            reservation(TotalInstanceCount=total)]}, {"CapacityReservationIds": [RID]})
        with stub:
            (c,) = check_shared_reservations(PreflightReads(AwsClients(ec2=ec2)), two)
        assert c.status == status and c.subject == "gpu_node_groups.a, gpu_node_groups.b"
    assert c.detail == f"{RID} holds 4; groups a, b scale to 4"


def test_placement_group_default_for_capacity_block_passes():
    c = check_placement("p5en", cb_config().gpu_node_groups["p5en"])
    assert c.status == PASS and c.detail == "new cluster placement group off"


def test_kubernetes_version_passes_with_layer_installed():
    c = check_kubernetes_version(config(kubernetes_version="1.35"), installed=lambda p: True,
                                 today=date(2026, 11, 30))
    assert c.status == PASS and c.detail == ("1.35 with aws-cdk.lambda-layer-kubectl-v35; "
                                             "standard support until 2027-03-27")


def test_kubernetes_version_warns_within_60_days_of_end_of_standard_support():
    c = check_kubernetes_version(config(kubernetes_version="1.34"), installed=lambda p: True,
                                 today=date(2026, 11, 30))
    assert c.status == WARN
    assert c.detail == ("Kubernetes 1.34 leaves EKS standard support on 2026-12-02 (in 2 days); "
                        "after that the cluster is billed at the extended-support rate")
    assert c.fix.startswith('set kubernetes_version: "1.35"')
    assert check_kubernetes_version(config(kubernetes_version="1.34"), installed=lambda p: True,
                                    today=date(2026, 10, 2)).status == PASS  # 61 days before
    past = check_kubernetes_version(config(kubernetes_version="1.33"), installed=lambda p: True,
                                    today=date(2026, 11, 30))
    assert past.status == WARN and "left EKS standard support on 2026-07-29" in past.detail


def test_no_admin_role_warns_loudly():
    from ops.preflight import check_admin_access
    c = check_admin_access(config())
    assert c.status == WARN and "NO IAM principal you use will have Kubernetes access" in c.detail
    assert c.fix.startswith("list the IAM role ARN you (or your CI) deploy and operate with")
    ok = check_admin_access(config(admin_role_arns=["arn:aws:iam::123456789012:role/Admin"]))
    assert ok.status == PASS


def test_kubernetes_version_fails_without_layer_package():
    c = check_kubernetes_version(config(kubernetes_version="1.33"), installed=lambda p: False)
    assert c.status == FAIL and c.fix == "pip install aws-cdk.lambda-layer-kubectl-v33 (it is " \
        "listed in requirements.txt)"


def test_kubernetes_version_unknown_fails():
    cfg = config().model_copy(update={"kubernetes_version": "1.20"})  # bypasses validation
    c = check_kubernetes_version(cfg, installed=lambda p: True)
    assert c.status == FAIL and "not a version the kit supports" in c.detail


# --- existing stacks -----------------------------------------------------------------------------

_TEMPLATE = json.dumps({"Resources": {"T": {"Type": "AWS::SNS::Topic"}}})


def test_no_existing_stacks_passes(aws):
    cfn = boto3.client("cloudformation", region_name="us-east-1")
    cfn.create_stack(StackName="other-network", TemplateBody=_TEMPLATE)
    c = check_existing_stacks(cfn, config())
    assert c.status == PASS and c.detail == "no CloudFormation stacks named pf-*"


def test_existing_stacks_warn_and_are_listed(aws):
    cfn = boto3.client("cloudformation", region_name="us-east-1")
    for name in ("pf-network", "pf-team2-network"):
        cfn.create_stack(StackName=name, TemplateBody=_TEMPLATE)
    c = check_existing_stacks(cfn, config())
    assert c.status == WARN
    assert c.detail == ("already deployed: pf-network (CREATE_COMPLETE), pf-team2-network "
                        "(CREATE_COMPLETE); pf-team2-network share the prefix but are not stacks "
                        "of this config")
    assert "choose a different `name`" in c.fix


def _existing(*stacks):
    cfn, stub = stubbed("cloudformation")
    stub.add_response("list_stacks", {"StackSummaries": [
        {"StackName": name, "StackStatus": status, "CreationTime": NOW} for name, status in stacks]})
    with stub:
        return check_existing_stacks(cfn, config())


def test_stack_in_rollback_complete_fails():
    c = _existing(("pf-cluster", "ROLLBACK_COMPLETE"))
    assert c.status == FAIL
    assert c.detail == ("stack(s) of this config that CloudFormation cannot update: pf-cluster "
                        "(ROLLBACK_COMPLETE); all: pf-cluster (ROLLBACK_COMPLETE)")
    assert c.fix == ("delete pf-cluster (aws cloudformation delete-stack --stack-name pf-cluster); "
                     "then deploy")


def test_update_rollback_failed_is_continued_not_deleted():
    # Deleting the cluster or storage stack would destroy the environment; ContinueUpdateRollback
    # brings it back to UPDATE_ROLLBACK_COMPLETE (CloudFormation API reference).
    c = _existing(("pf-cluster", "UPDATE_ROLLBACK_FAILED"), ("pf-network", "UPDATE_COMPLETE"))
    assert c.status == FAIL
    assert c.detail == ("stack(s) of this config that CloudFormation cannot update: pf-cluster "
                        "(UPDATE_ROLLBACK_FAILED); all: pf-cluster (UPDATE_ROLLBACK_FAILED), "
                        "pf-network (UPDATE_COMPLETE)")
    assert c.fix == ("continue pf-cluster's rollback, which keeps its resources and returns it to "
                     "UPDATE_ROLLBACK_COMPLETE (aws cloudformation continue-update-rollback "
                     "--stack-name pf-cluster; if it fails again, fix the resource named in its "
                     "stack events and rerun it); then deploy")
    assert "delete" not in c.fix


def test_a_stuck_stack_of_another_environment_is_not_this_configs_to_fix():
    # `pf-prod-*` is environment pf-prod's: a deploy of pf never touches it, and deleting it
    # would destroy someone else's environment.
    c = _existing(("pf-network", "CREATE_COMPLETE"), ("pf-prod-cluster", "UPDATE_ROLLBACK_FAILED"),
                  ("pf-prod-network", "ROLLBACK_COMPLETE"))
    assert c.status == WARN
    assert c.detail == ("already deployed: pf-network (CREATE_COMPLETE), pf-prod-cluster "
                        "(UPDATE_ROLLBACK_FAILED), pf-prod-network (ROLLBACK_COMPLETE); "
                        "pf-prod-cluster, pf-prod-network share the prefix but are not stacks of "
                        "this config")
    assert "pf-prod" not in c.fix


def test_only_this_configs_stuck_stacks_get_a_fix_each():
    c = _existing(("pf-gpu-p5", "ROLLBACK_COMPLETE"), ("pf-prod-network", "DELETE_FAILED"),
                  ("pf-storage", "UPDATE_ROLLBACK_FAILED"))
    assert c.status == FAIL
    assert c.detail == ("stack(s) of this config that CloudFormation cannot update: pf-gpu-p5 "
                        "(ROLLBACK_COMPLETE), pf-storage (UPDATE_ROLLBACK_FAILED); all: pf-gpu-p5 "
                        "(ROLLBACK_COMPLETE), pf-prod-network (DELETE_FAILED), pf-storage "
                        "(UPDATE_ROLLBACK_FAILED); pf-prod-network share the prefix but are not "
                        "stacks of this config")
    assert c.fix == ("delete pf-gpu-p5 (aws cloudformation delete-stack --stack-name pf-gpu-p5); "
                     "continue pf-storage's rollback, which keeps its resources and returns it to "
                     "UPDATE_ROLLBACK_COMPLETE (aws cloudformation continue-update-rollback "
                     "--stack-name pf-storage; if it fails again, fix the resource named in its "
                     "stack events and rerun it); then deploy")


# --- the command ---------------------------------------------------------------------------------


def test_command_json_and_exit_code(aws, tmp_path, capsys):
    quotas, stub = _quota(96.0)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\n")
    args = parse(["preflight", "--config", str(cfg), "--json"])
    args.clients_factory = _factory(quotas)
    with stub:
        code = args.func(args)
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["ok"] is False
    failed = [c for c in out["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["on-demand P vCPU quota"]


def test_command_table_lists_each_check(aws, tmp_path, capsys):
    quotas, stub = _quota(400.0)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\n")
    args = parse(["preflight", "--config", str(cfg), "--width", "250"])
    args.clients_factory = _factory(quotas)
    with stub:
        code = args.func(args)
    out = capsys.readouterr().out
    assert code == 0
    for name in ("credentials", "instance type offered", "on-demand P vCPU quota",
                 "kubernetes version", "placement group", "existing stacks"):
        assert name in out
    assert "OK: nothing blocks `cdk deploy`" in out


def test_command_bad_config_exits_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: Bad_Name\n")
    args = parse(["preflight", "--config", str(cfg)])
    assert args.func(args) == 2
    assert "name = 'Bad_Name'" in capsys.readouterr().err


def test_run_preflight_stops_at_credentials():
    sts, stub = stubbed("sts")
    stub.add_client_error("get_caller_identity", service_error_code="ExpiredToken",
                          service_message="The security token included in the request is expired")
    with stub:
        checks = run_preflight(config(), AwsClients(sts=sts), installed=lambda p: True)
    assert checks[0].status == FAIL
    assert "ExpiredToken" in checks[0].detail
    assert [c.name for c in checks] == ["credentials", "kubernetes version", "gpu driver",
                                        "cluster access",
                                        "placement group", "instance facts", "gpu metrics",
                                        "FSx for Lustre in the region"]


def test_unverified_instance_facts_are_a_warning(monkeypatch):
    from dataclasses import replace as dc_replace

    from infra import catalog
    from ops.preflight import check_instance_facts

    cfg = config()
    name, group = next(iter(cfg.gpu_node_groups.items()))
    verified = check_instance_facts(name, group)
    assert verified.status == PASS and "verified catalog entry" in verified.detail
    entry = catalog.INSTANCE_TYPES[group.instance_type]
    monkeypatch.setitem(catalog.INSTANCE_TYPES, group.instance_type,
                        dc_replace(entry, facts_verified=False, note="layout inferred"))
    c = check_instance_facts(name, group)
    assert c.status == WARN and c.subject == f"gpu_node_groups.{name}"
    assert c.detail == f"the catalog's facts for {group.instance_type} are not verified: layout inferred"
    assert "rlkit gate" in c.fix


def test_gpu_driver_of_the_ami_runs_the_trainer_images_cuda(monkeypatch):
    from ops import preflight
    ok = preflight.check_gpu_driver(config())
    assert ok.status == PASS and ok.detail.startswith(
        "AL2023 NVIDIA AMI driver branch R580 runs the trainer image's CUDA 13 (needs R580+)")
    monkeypatch.setitem(preflight.AL2023_NVIDIA_DRIVER_BRANCH, "1.35", 570)
    bad = preflight.check_gpu_driver(config())
    assert bad.status == FAIL and bad.detail == (
        "the AL2023 NVIDIA AMI for Kubernetes 1.35 installs driver branch 570; the trainer image "
        "(CUDA 13) needs R580 or newer")


def test_trainer_image_driver_floor_matches_the_dockerfile():
    import re

    from infra.versions import TRAINER_IMAGE_CUDA_MAJOR, TRAINER_IMAGE_MIN_DRIVER_BRANCH
    from tests.support import REPO_ROOT
    dockerfile = (REPO_ROOT / "images/trainer/Dockerfile").read_text()
    assert re.search(r"^ARG CUDA_MAJOR=(\d+)$", dockerfile, re.M).group(1) == \
        str(TRAINER_IMAGE_CUDA_MAJOR)
    assert re.search(r"^ARG MIN_NVIDIA_DRIVER=(\d+)\.", dockerfile, re.M).group(1) == \
        str(TRAINER_IMAGE_MIN_DRIVER_BRANCH)

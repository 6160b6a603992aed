"""A Capacity Block's window: `rlkit status` shows it, `rlkit launch` refuses a run that cannot save
before it ends and renders the end into the job.

Upstream failure this prevents: EKS scales a Capacity Block node group to 0 about 40 minutes
before the block ends [EKS user guide, "capacity-blocks-mng"]; a run launched with less time left
than its start (image pull, Ray, loading the newest save) plus one rollout plus one save and
upload loses all its work, and nothing told the operator.
DescribeCapacityReservations is stubbed with botocore's Stubber (moto has no Capacity Blocks).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from ops import launch_cmd
from ops.aws import AwsClients
from tests.support.fakes import FakeKubectl, outputs_file

RID = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CB_CONFIG = f"""
name: gt
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
gpu_node_groups:
  p5:
    instance_type: p5.48xlarge
    availability_zone: us-east-1a
    desired_size: 2
    max_size: 2
    capacity: {{type: capacity-block, reservation_id: {RID}}}
training: {{node_group: p5, nodes: 2, rollout_minutes: 10, save_upload_minutes: 35}}
"""


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    monkeypatch.setattr(launch_cmd, "utcnow", lambda: NOW)
    return FakeKubectl(tmp_path, monkeypatch)


def ec2_with_window(end: datetime, start: datetime | None = None, calls: int = 1):
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    stub = Stubber(ec2)
    for _ in range(calls):
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [{
            "CapacityReservationId": RID, "State": "active", "ReservationType": "capacity-block",
            "StartDate": start or end - timedelta(days=1), "EndDate": end}]},
            {"CapacityReservationIds": [RID]})
    stub.activate()
    return ec2, stub


def run(tmp_path, ec2, command, *flags, config: str = CB_CONFIG):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(config)
    d = tmp_path / ".rlkit" / "gt"
    d.mkdir(parents=True, exist_ok=True)
    (d / "gate.json").write_text(json.dumps({
        "version": 1, "config": "gt", "finished_at": "2026-03-01T12:00:00+00:00", "ok": True,
        "instance_type": "p5.48xlarge", "nodes": 2, "findings": [], "ep": None}))
    parser = argparse.ArgumentParser(prog="rlkit")
    launch_cmd.register(parser.add_subparsers(dest="command"))
    argv = [command, "--config", str(cfg), "--state-dir", str(tmp_path / ".rlkit")]
    if command == "launch":
        argv += ["--outputs", str(outputs_file(tmp_path)), "--out", str(tmp_path / "out")]
    args = parser.parse_args(argv + list(flags))
    args.clients_factory = lambda region, profile=None: AwsClients(ec2=ec2)
    if command == "status":
        args.poll, args.no_health = 0, True
    return args.func(args)


def head_env(tmp_path) -> dict[str, str]:
    rayjob = yaml.safe_load((tmp_path / "out/rl-job/04-rayjob.yaml").read_text())
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in head["env"]}


# The default config's run start, unset training.startup_minutes: 15 min (nodes, image pull, Ray)
# plus 28 min reading the 399 GiB save and the 57 GiB reference weights of Qwen3-30B-A3B at the
# 1200 GiB file system's 293 MB/s baseline; with 10 + 35 min of rollout and save: 88 min.
NEED_MIN = 88


def test_launch_refuses_a_run_that_cannot_save_before_the_block_ends(tmp_path, kubectl, capsys):
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=40 + NEED_MIN - 1))
    assert run(tmp_path, ec2, "launch") == 1
    err = capsys.readouterr().err
    assert err == (
        f"Not launching: capacity block {RID} (gpu_node_groups.p5) ends 2026-12-01 14:07 UTC: "
        "2 h 07 min left minus the 40 min before EKS drains its nodes = 1 h 27 min, but one "
        "complete save needs the run's start (training.startup_minutes unset: 15 min for the "
        "nodes, the image pull and Ray, plus 28 min reading the newest save and the reference "
        "weights (455 GiB) at the file system's 293 MB/s baseline: 43 min) plus one rollout "
        "(training.rollout_minutes = 10) plus one save and its upload "
        "(training.save_upload_minutes = 35: 35 min) = 1 h 28 min (the launcher asks for a save "
        "after the first rollout at the latest). Launch on a block with more time left, or set "
        "training.startup_minutes, training.rollout_minutes or training.save_upload_minutes to "
        "what earlier runs measured if that was less (the launcher logs what it measures).\n")
    assert kubectl.calls == []


def test_the_runs_start_counts_before_its_first_save(tmp_path, kubectl, capsys):
    """Before: the budget was one rollout plus one save and upload (45 min here), so a block with
    1 h 40 min left (1 h after the 40-minute margin) passed, and the 20 minutes of pulling the
    image and loading the save ate into it: the block ended before the first save reached S3."""
    config = CB_CONFIG.replace("save_upload_minutes: 35}", "save_upload_minutes: 35, "
                               "startup_minutes: 20}")
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=100))
    assert run(tmp_path, ec2, "launch", config=config) == 1
    err = capsys.readouterr().err
    assert ("= 1 h 00 min, but one complete save needs the run's start (training.startup_minutes "
            "= 20: 20 min) plus one rollout (training.rollout_minutes = 10) plus one save and its "
            "upload (training.save_upload_minutes = 35: 35 min) = 1 h 05 min") in err
    assert kubectl.calls == []
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=105))
    assert run(tmp_path, ec2, "launch", config=config) == 0


def test_unset_the_save_and_its_upload_are_the_kits_estimate(tmp_path, kubectl, capsys):
    """Before: unset meant a fixed 35 minutes, so a block with 2 h 21 min left (1 h 41 min after
    the margin) passed for 43 + 10 + 35 = 88 minutes, though the default file system alone bounds
    one save's write plus its upload's read to 49 minutes: 102 in all. Launch refuses it now, and a
    launch that goes ahead renders the 49 minutes for the launcher (RLTRAINER_SAVE_UPLOAD_S)."""
    config = CB_CONFIG.replace(", save_upload_minutes: 35}", "}")
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=40 + 102 - 1))
    assert run(tmp_path, ec2, "launch", config=config) == 1
    err = capsys.readouterr().err
    assert ("plus one save and its upload (training.save_upload_minutes unset: one qwen3-30b-a3b "
            "save (398 GiB) written to the shared file system and read back for its upload, each "
            "at the file system's 293 MB/s baseline (the head node's 100 Gbps share of the network "
            "to S3 is faster): 49 min) = 1 h 42 min") in err
    assert kubectl.calls == []
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=40 + 102))
    assert run(tmp_path, ec2, "launch", config=config) == 0
    assert head_env(tmp_path)["RLTRAINER_SAVE_UPLOAD_S"] == "2940"


@pytest.mark.parametrize("fs, how", [
    ("{type: none}", "the restore is not counted (no shared file system)"),
    ("{capacity_gib: 2400, throughput_mb_s_per_tib: 1000}",
     "plus 4 min reading the newest save and the reference weights (455 GiB) at the file "
     "system's 2344 MB/s baseline"),
])
def test_the_start_scales_with_the_file_systems_throughput(fs, how):
    from infra.config import parse_config
    from infra.config.derived import startup_estimate

    cfg = parse_config({"storage": {"shared_filesystem": yaml.safe_load(fs)},
                        "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    assert how in startup_estimate(cfg).how


@pytest.mark.parametrize("value", [0, -5])
def test_the_start_estimate_must_be_positive(value):
    from infra.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"startup_minutes": value}})
    assert (f"training.startup_minutes = {float(value)}: must be more than 0 minutes. Fix: set an "
            "estimate from an earlier run (the launcher logs what it measures)") in str(err.value)


def test_force_does_not_override_the_save_window_and_the_help_says_so(tmp_path, kubectl, capsys):
    """--force overrides the gate's refusals only. Before, its help said "launch even though the
    last gate failed, or none ran": nothing of the image and node checks it also overrides, nor
    of this refusal, which it does not."""
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=84))
    assert run(tmp_path, ec2, "launch", "--force") == 1
    assert capsys.readouterr().err.startswith(f"Not launching: capacity block {RID}")
    assert kubectl.calls == []
    parser = argparse.ArgumentParser(prog="rlkit")
    launch_cmd.register(parser.add_subparsers(dest="command"))
    text = " ".join(parser._subparsers._group_actions[0].choices["launch"].format_help().split())
    assert ("--force launch despite the gate's refusals, each then printed as a WARNING: the last "
            "gate failed, did not finish or none ran; the image differs from the one the gate "
            "measured; the training group has a node the gate did not measure, or fewer measured "
            "nodes than the job needs. It does not override the Capacity Block refusal (a run "
            "that cannot save before the block ends)") in text


def test_a_dry_run_previews_and_exits_1_when_the_real_launch_would_refuse(tmp_path, kubectl,
                                                                          capsys):
    ec2, _ = ec2_with_window(NOW + timedelta(minutes=84))
    assert run(tmp_path, ec2, "launch", "--dry-run") == 1
    out = capsys.readouterr().out
    assert "[dry-run] the real launch would REFUSE: capacity block" in out
    assert "[dry-run] kubectl --context arn:aws:eks:us-east-1:123456789012:cluster/gt-cluster " \
        "apply -f" in out
    assert kubectl.calls == []


def test_launch_renders_the_blocks_end_into_the_job(tmp_path, kubectl, capsys):
    ec2, stub = ec2_with_window(NOW + timedelta(minutes=40 + NEED_MIN))
    assert run(tmp_path, ec2, "launch") == 0
    stub.assert_no_pending_responses()
    out = capsys.readouterr().out
    assert (f"capacity block {RID} (gpu_node_groups.p5): active, 2026-11-30 14:08 UTC to "
            "2026-12-01 14:08 UTC; 2 h 08 min left; EKS drains the nodes at 2026-12-01 13:28 UTC "
            "(1 h 28 min from now)") in out
    env = head_env(tmp_path)
    assert env["RLTRAINER_RESERVATION_ID"] == RID
    assert env["RLTRAINER_RESERVATION_END"] == "2026-12-01T14:08:00Z"
    assert env["RLTRAINER_ROLLOUT_S"] == "600"
    assert env["RLTRAINER_SAVE_UPLOAD_S"] == "2100"


def test_status_shows_the_window(tmp_path, kubectl, capsys):
    ec2, _ = ec2_with_window(NOW + timedelta(hours=5, minutes=3))
    kubectl.point_at("gt")  # status checks the cluster the config names
    kubectl.rule(["get", "rayjob"], stdout=json.dumps({"metadata": {"name": "x"}, "status": {
        "jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}}))
    assert run(tmp_path, ec2, "status") == 0
    err = capsys.readouterr().err
    assert err.startswith(
        f"capacity block {RID} (gpu_node_groups.p5): active, 2026-11-30 17:03 UTC to 2026-12-01 "
        "17:03 UTC; 5 h 03 min left; EKS drains the nodes at 2026-12-01 16:23 UTC (4 h 23 min "
        "from now)\n")


def test_status_before_the_block_starts_says_when(tmp_path, kubectl, capsys):
    ec2, _ = ec2_with_window(NOW + timedelta(days=1), start=NOW + timedelta(hours=2))
    kubectl.point_at("gt")
    assert run(tmp_path, ec2, "status") == 1  # no RayJob yet
    assert "; starts in 2 h 00 min" in capsys.readouterr().err


def ec2_refusing_the_window():
    """EC2 that refuses DescribeCapacityReservations (a role without it)."""
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    stub = Stubber(ec2)
    stub.add_client_error("describe_capacity_reservations", "UnauthorizedOperation", "not allowed")
    stub.activate()
    return ec2


def test_an_unreadable_window_is_a_warning_and_the_job_gets_no_end(tmp_path, kubectl, capsys):
    ec2 = ec2_refusing_the_window()
    assert run(tmp_path, ec2, "launch") == 0
    assert (f"WARNING: could not read the window of capacity block {RID} (DescribeCapacityReservations "
            "failed: UnauthorizedOperation: not allowed)") in capsys.readouterr().err
    env = head_env(tmp_path)
    assert "RLTRAINER_RESERVATION_END" not in env and env["RLTRAINER_RESERVATION_ID"] == RID


def rayjob_spec(tmp_path) -> dict:
    return yaml.safe_load((tmp_path / "out/rl-job/04-rayjob.yaml").read_text())["spec"]


def test_a_launch_before_the_block_starts_gives_the_start_deadline_the_wait_too(
        tmp_path, kubectl, capsys):
    """The pods of a run launched before its block starts wait for the block's nodes: a start
    deadline counted from the launch alone (KubeRay counts from Initializing) would fail it."""
    ec2, _ = ec2_with_window(NOW + timedelta(days=3), start=NOW + timedelta(hours=30))
    assert run(tmp_path, ec2, "launch") == 0
    assert rayjob_spec(tmp_path)["preRunningDeadlineSeconds"] == 60 * 60 + 30 * 3600


def test_a_launch_on_a_running_block_gets_the_start_deadline_alone(tmp_path, kubectl, capsys):
    ec2, _ = ec2_with_window(NOW + timedelta(hours=5))
    assert run(tmp_path, ec2, "launch") == 0
    assert rayjob_spec(tmp_path)["preRunningDeadlineSeconds"] == 60 * 60


def test_without_the_blocks_window_the_job_gets_no_start_deadline(tmp_path, kubectl, capsys):
    ec2 = ec2_refusing_the_window()
    assert run(tmp_path, ec2, "launch") == 0
    assert "preRunningDeadlineSeconds" not in rayjob_spec(tmp_path)


def test_the_fields_description_states_the_default_configs_read_time():
    """The description's "about 28 minutes more for the default config" is the derivation's."""
    from infra.config import parse_config
    from infra.config.derived import startup_estimate
    from infra.config.training_model import STARTUP_FIXED_MINUTES, TrainingConfig

    read = startup_estimate(parse_config({})).minutes - STARTUP_FIXED_MINUTES
    assert f"about {read:g} minutes more for the default config" in \
        TrainingConfig.model_fields["startup_minutes"].description

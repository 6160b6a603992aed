"""`rlkit teardown` with the shared file system's stacks (moto, like test_ops_teardown)."""

from __future__ import annotations

import boto3
import pytest

from tests.support.teardown import (  # noqa: F401 (aws: autouse fixture)
    Recording, aws, live_names, make_env, make_stack)
from tests.support import REPO_ROOT
from tests.support.teardown import run as teardown_run


def make_env_with_storage(name="tt"):
    ids = make_env(name)
    make_stack(f"{name}-storage", name)
    make_stack(f"{name}-storage-access", name)
    return ids


def run(tmp_path, config_text: str, *flags):
    return teardown_run(tmp_path, "--yes", *flags, config_text=config_text)


def test_kept_file_system_keeps_its_network(tmp_path, capsys):
    make_env_with_storage()
    code, cfn = run(tmp_path, "name: tt\n")
    out = capsys.readouterr().out
    assert code == 0, out
    # The access rules go with the GPU stacks (they reference the cluster's security group).
    assert cfn.deleted == ["tt-gpu-p5", "tt-storage-access", "tt-cluster"]
    assert live_names() == ["tt-data", "tt-network", "tt-storage"]
    assert ("Keeping tt-storage: the shared file system is retained with the data; with "
            "storage.retain: false (and the storage stack redeployed) --delete-data deletes it "
            "too.") in out
    assert "Keeping tt-network: the kept shared file system lives in this VPC." in out


def test_retained_file_system_keeps_the_data_it_links_to_even_with_delete_data(tmp_path, capsys):
    """The storage stack imports the data stack's bucket and key: CloudFormation refuses to delete
    an export in use, so the data stack stays (and its bucket is not emptied) with the file system."""
    make_env_with_storage()
    code, cfn = run(tmp_path, "name: tt\n", "--delete-data")
    out = capsys.readouterr().out
    assert code == 0, out
    assert live_names() == ["tt-data", "tt-network", "tt-storage"]
    assert cfn.deleted == ["tt-gpu-p5", "tt-storage-access", "tt-cluster"]
    assert ("Keeping tt-data: the kept tt-storage links its file system to this stack's bucket (it "
            "imports the bucket and its key), so the data stays with it; with storage.retain: false "
            "(and the storage stack redeployed) --delete-data deletes both.") in out
    assert "object version(s)" not in out  # the bucket was not emptied


def test_destroyable_file_system_goes_with_the_cluster_before_the_network(tmp_path, capsys):
    make_env_with_storage()
    code, cfn = run(tmp_path, "name: tt\nstorage: {retain: false}\n", "--delete-data")
    out = capsys.readouterr().out
    assert code == 0, out
    assert cfn.deleted[:2] == ["tt-gpu-p5", "tt-storage-access"]
    assert set(cfn.deleted[2:4]) == {"tt-cluster", "tt-storage"}  # one stage, in parallel
    assert cfn.deleted[4:] == ["tt-network", "tt-data"]
    assert live_names() == []
    # docs/operations.md's teardown order says the same (it said: the cluster, then the storage)
    doc = " ".join((REPO_ROOT / "docs" / "operations.md").read_text().split())
    bullet = doc.split("**Data last, and the network stays while the file system does.**")[1]
    assert bullet.startswith(" `rlkit teardown` deletes the GPU, storage-access and observability "
                             "stacks; then the cluster stack and, in the same stage (when the file "
                             "system goes), the storage stack; then the network; the data stack "
                             "last.")


def test_ephemeral_deletes_the_storage_stacks(tmp_path, capsys):
    make_env_with_storage()
    code, cfn = run(tmp_path, "name: tt\nephemeral: true\n"
                              "cost_guard: {max_gpu_nodes: 2, ttl_hours: 6}\n")
    assert code == 0, capsys.readouterr().out
    assert cfn.deleted.index("tt-storage") < cfn.deleted.index("tt-network")
    assert live_names() == []


def test_observability_stack_goes_before_the_cluster(tmp_path, capsys):
    """The CloudWatch add-on's own stack depends on the cluster stack: deleted with the GPU
    stacks, before the cluster (whose system nodes go before the log groups)."""
    make_env("tt")
    make_stack("tt-observability", "tt")
    code, cfn = run(tmp_path, "name: tt\n")
    assert code == 0, capsys.readouterr().out
    assert cfn.deleted.index("tt-observability") < cfn.deleted.index("tt-cluster")
    assert "tt-observability" not in live_names()


# --- by name (no usable config): the deployed template says whether the file system stays --------

def fs_stack(policy: str) -> dict:
    return {"Fs": {"Type": "AWS::FSx::FileSystem", "DeletionPolicy": policy,
                   "Properties": {"FileSystemType": "LUSTRE"}}, "T": {"Type": "AWS::SNS::Topic"}}


BY_NAME = ("--name", "tt", "--region", "us-east-1", "--account", "123456789012")


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")  # moto creates no file system
def test_by_name_delete_data_deletes_a_file_system_the_deployed_stack_does_not_retain(
        tmp_path, capsys):
    """CI's recovery command (`--name ... --delete-data`) on an ephemeral environment kept its
    file system, NAT gateway and data and still said "Teardown complete.": by name, the file
    system was assumed retained although the deployed stack says DeletionPolicy Delete."""
    make_env()
    make_stack("tt-storage", "tt", fs_stack("Delete"))
    make_stack("tt-storage-access", "tt")
    code, cfn = teardown_run(tmp_path, "--yes", "--delete-data", *BY_NAME)
    out = capsys.readouterr().out
    assert code == 0, out
    assert set(cfn.deleted[2:4]) == {"tt-cluster", "tt-storage"}
    assert cfn.deleted[4:] == ["tt-network", "tt-data"] and live_names() == []


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")
def test_by_name_keeps_a_file_system_the_deployed_stack_retains(tmp_path, capsys):
    make_env()
    make_stack("tt-storage", "tt", fs_stack("Retain"))
    code, cfn = teardown_run(tmp_path, "--yes", "--delete-data", *BY_NAME)
    out = capsys.readouterr().out
    assert code == 0, out
    assert live_names() == ["tt-data", "tt-network", "tt-storage"]
    assert ("Keeping tt-storage: the shared file system is retained with the data (its deployed "
            "DeletionPolicy is Retain)") in out


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")
def test_by_name_without_delete_data_keeps_a_deletable_file_system_and_says_how(tmp_path, capsys):
    make_env()
    make_stack("tt-storage", "tt", fs_stack("Delete"))
    code, cfn = teardown_run(tmp_path, "--yes", *BY_NAME)
    out = capsys.readouterr().out
    assert code == 0, out
    assert live_names() == ["tt-data", "tt-network", "tt-storage"]
    assert ("Keeping tt-storage: the shared file system stays with the data; its deployed file "
            "system is not retained (no DeletionPolicy Retain), so --delete-data deletes it "
            "too.") in out


class NetworkWithNat(Recording):
    """The network stack's template as the kit deploys it: NAT gateways (moto cannot create one
    from a template without the subnets and addresses behind it, so GetTemplate answers here)."""

    def __init__(self, client, nat_gateways: int):
        super().__init__(client)
        self.nat_gateways = nat_gateways

    def get_template(self, **kw):
        if kw["StackName"] != "tt-network":
            return self._client.get_template(**kw)
        return {"TemplateBody": {"Resources": {
            f"VpcPublicSubnet{i}NATGateway": {"Type": "AWS::EC2::NatGateway"}
            for i in range(1, self.nat_gateways + 1)}}}


def test_a_network_kept_for_the_file_system_says_its_nat_gateways_bill(tmp_path, capsys):
    """Kept for a retained file system, the network's NAT gateway billed by the hour, and the
    teardown said only that the file system lives in the VPC."""
    make_env_with_storage()
    cfn = NetworkWithNat(boto3.client("cloudformation", region_name="us-east-1"), 2)
    code, _ = teardown_run(tmp_path, "--yes", config_text="name: tt\n", cfn=cfn)
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("Keeping tt-network: the kept shared file system lives in this VPC. Its 2 NAT "
            "gateway(s) bill by the hour (and per GB they process) for as long as it stays. Once "
            "the file system is no longer wanted: set storage.retain: false and deploy it (npx "
            f"aws-cdk@2.1148.1 deploy --exclusively tt-storage -c config={tmp_path / 'c.yaml'}); then teardown "
            "--delete-data deletes the file system, then the network, and the data; to keep the "
            "data, after that deploy delete only the storage stack (aws cloudformation delete-stack "
            "--stack-name tt-storage) and run teardown again, which then deletes the network.") in out
    # the kept file system's own bill, from the config
    assert ("Keeping tt-storage: the shared file system is retained with the data; with "
            "storage.retain: false (and the storage stack redeployed) --delete-data deletes it too. "
            "It bills while it stays: FSx for Lustre PERSISTENT_2, 1200 GiB at 250 MB/s/TiB") in out


def test_a_file_system_that_is_not_retained_needs_only_delete_data(tmp_path, capsys):
    """Before: with storage.retain already false the advice still said to set it (and a `cdk
    deploy` without the config, which builds the default environment)."""
    make_env_with_storage()
    cfn = NetworkWithNat(boto3.client("cloudformation", region_name="us-east-1"), 1)
    code, _ = teardown_run(tmp_path, "--yes", config_text="name: tt\nstorage: {retain: false}\n",
                           cfn=cfn)
    out = capsys.readouterr().out
    assert ("Once the file system is no longer wanted: teardown --delete-data deletes the file "
            "system, then the network, and the data; to keep the data, delete only the storage "
            "stack (aws cloudformation delete-stack --stack-name tt-storage) and run teardown "
            "again") in out
    assert "set storage.retain" not in out


def test_a_kept_network_without_nat_gateways_says_nothing_of_them(tmp_path, capsys):
    make_env_with_storage()
    cfn = NetworkWithNat(boto3.client("cloudformation", region_name="us-east-1"), 0)
    code, _ = teardown_run(tmp_path, "--yes", config_text="name: tt\n", cfn=cfn)
    out = capsys.readouterr().out
    assert "Keeping tt-network: the kept shared file system lives in this VPC.\n" in out
    assert "NAT" not in out


def test_a_config_without_retention_keeps_the_file_system_until_delete_data(tmp_path, capsys):
    make_env_with_storage()
    code, _ = run(tmp_path, "name: tt\nstorage: {retain: false}\n")
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("Keeping tt-storage: the shared file system stays with the data; storage.retain is "
            "false, so --delete-data deletes it too.") in out


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")  # moto creates no file system
def test_by_name_the_kept_networks_deploy_command_names_no_config_file(tmp_path, capsys):
    """--name tears down without a config: the deploy it suggests names `<your config file>`,
    never the --config file (or RLKIT_CONFIG) that --name overrides."""
    make_env()
    make_stack("tt-storage", "tt", fs_stack("Retain"))
    cfn = NetworkWithNat(boto3.client("cloudformation", region_name="us-east-1"), 1)
    code, _ = teardown_run(tmp_path, "--yes", *BY_NAME, config_text="name: other\n", cfn=cfn)
    out = capsys.readouterr().out
    assert ("set storage.retain: false and deploy it (npx aws-cdk@2.1148.1 deploy --exclusively "
            "tt-storage -c config=<your config file>); then teardown") in out, out
    assert str(tmp_path) not in out


def test_a_storage_stack_deleted_around_a_kept_file_system_left_it_on_purpose(synth):
    """A storage stack deleted with the file system retained (`cdk destroy`, the console): the
    file system, its security group and its two links to the bucket are what the stack's policy
    kept, and teardown's leftover check calls each of them so (from the deleted stack's template
    and the resources' aws:cloudformation:* tags). Before: the links kept the default Delete and
    were gone, so the kept file system no longer followed the bucket."""
    import json
    from datetime import datetime, timezone

    from botocore.stub import Stubber

    from ops.teardown_leftovers import retained_by_its_stack

    template = synth("default").template("storage")
    cfn = boto3.client("cloudformation", region_name="us-east-1")
    stub = Stubber(cfn)
    sid = "arn:aws:cloudformation:us-east-1:123456789012:stack/moe-rl-storage/1"
    when = datetime(2026, 11, 2, tzinfo=timezone.utc)
    stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": "moe-rl-storage", "StackId": sid, "CreationTime": when,
        "StackStatus": "DELETE_COMPLETE"}]}, {"StackName": sid})
    stub.add_response("get_template", {"TemplateBody": json.dumps(template)}, {"StackName": sid})
    stub.add_response("list_stack_resources", {"StackResourceSummaries": [
        {"LogicalResourceId": lid, "PhysicalResourceId": f"id-{lid}", "ResourceType": r["Type"],
         "LastUpdatedTimestamp": when,
         "ResourceStatus": ("DELETE_SKIPPED" if r.get("DeletionPolicy") == "Retain"
                            else "DELETE_COMPLETE")}
        for lid, r in template["Resources"].items()]}, {"StackName": sid})
    # What carries tags, so the tagging API lists it once the stack is gone.
    kept = {lid: r["Type"] for lid, r in template["Resources"].items() if r["Type"] in (
        "AWS::FSx::FileSystem", "AWS::EC2::SecurityGroup", "AWS::FSx::DataRepositoryAssociation")}
    assert sorted(kept.values()).count("AWS::FSx::DataRepositoryAssociation") == 2
    read: dict = {}
    with stub:
        verdicts = {lid: retained_by_its_stack(cfn, "moe-rl", {
            "aws:cloudformation:stack-name": "moe-rl-storage", "aws:cloudformation:stack-id": sid,
            "aws:cloudformation:logical-id": lid}, read) for lid in kept}
    assert all(verdicts.values()), verdicts

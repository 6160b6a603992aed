"""Preflight: what the next deploy of a config would replace (ops/preflight_replace.py): the
shared file system (AZ, KMS key) and a GPU group's placement group (tags). botocore's Stubber
answers the AWS calls, so requests and answers are checked against the services' models; the
create-only properties come from the CloudFormation resource schemas cfn-lint ships."""

from __future__ import annotations

import ipaddress
import json
from importlib import resources as importlib_resources

import pytest

from infra.config import parse_config
from infra.config.derived import PRIVATE_SUBNET_BITS, chart_values, resource_tags
from infra.problems import FAIL, PASS, WARN
from ops import preflight_nodegroups, preflight_replace
from ops.preflight_reads import PreflightReads
from tests.support.cdk import resources
from tests.support.preflight import reads, stubbed


def config(**over):
    return parse_config({"name": "pf", **over})


def resource_schema(resource_type: str) -> dict:
    """A CloudFormation resource type's schema, as cfn-lint ships it (us-east-1)."""
    schemas = importlib_resources.files("cfnlint.data.schemas")
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    return json.loads((schemas / "resources" / f"{index[resource_type]}.json").read_text())


def create_only(resource_type: str) -> set[str]:
    return set(resource_schema(resource_type)["createOnlyProperties"])


# --- the deployed file system stays --------------------------------------------------------------

def stack_answer(stub, operation: str, stack: str, response: dict, error: str | None) -> None:
    """CloudFormation's answer about ``stack``: ``response``, or the ValidationError ``error``."""
    if error:
        stub.add_client_error(operation, "ValidationError", error, expected_params={"StackName": stack})
    else:
        stub.add_response(operation, response, {"StackName": stack})


FS_ID = "fs-0123456789abcdef0"
SUBNET = "subnet-0123456789abcdef0"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def deployed(zone="us-east-1a", key_manager="AWS", stack_error=None):
    """Reads whose CloudFormation, FSx, EC2 and KMS answer for a deployed storage stack
    (botocore's Stubber: the requests and answers are checked against the services' models)."""
    cfn, cfn_stub = stubbed("cloudformation")
    fsx, fsx_stub = stubbed("fsx")
    ec2, ec2_stub = stubbed("ec2")
    kms, kms_stub = stubbed("kms")
    stack_answer(cfn_stub, "describe_stacks", "pf-storage", {"Stacks": [{
        "StackName": "pf-storage", "CreationTime": "2026-11-01T00:00:00Z",
        "StackStatus": "UPDATE_COMPLETE",
        "Outputs": [{"OutputKey": "SharedFileSystemId", "OutputValue": FS_ID}]}]}, stack_error)
    if not stack_error:
        fsx_stub.add_response("describe_file_systems", {"FileSystems": [{
            "FileSystemId": FS_ID, "FileSystemType": "LUSTRE", "SubnetIds": [SUBNET],
            "KmsKeyId": KEY_ARN}]}, {"FileSystemIds": [FS_ID]})
        ec2_stub.add_response("describe_subnets", {"Subnets": [{
            "SubnetId": SUBNET, "AvailabilityZone": zone}]}, {"SubnetIds": [SUBNET]})
        kms_stub.add_response("describe_key", {"KeyMetadata": {
            "KeyId": KEY_ARN.rsplit("/", 1)[1], "KeyManager": key_manager}}, {"KeyId": KEY_ARN})
    for stub in (cfn_stub, fsx_stub, ec2_stub, kms_stub):
        stub.activate()
    return reads(cloudformation=cfn, fsx=fsx, ec2=ec2, kms=kms)


def test_a_storage_stack_not_deployed_yet_passes():
    check = preflight_replace.check_fsx_kept(
        deployed(stack_error="Stack with id pf-storage does not exist"), config())
    assert (check.status, check.detail) == (
        PASS, "pf-storage is not deployed: the first deploy creates the file system in us-east-1a")


def test_the_same_zone_and_key_keep_the_file_system():
    check = preflight_replace.check_fsx_kept(deployed(), config())
    assert (check.status, check.detail) == (
        PASS, f"{FS_ID} stays: same AZ (us-east-1a) and the AWS-managed key")


def test_moving_the_training_groups_zone_would_replace_the_file_system():
    """Before: the training group moved to us-east-1b and the next deploy made a new, empty file
    system there; the old one, with the saves, stayed billed outside any stack."""
    check = preflight_replace.check_fsx_kept(deployed(zone="us-east-1b"), config())
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
    check = preflight_replace.check_fsx_kept(deployed(), cfg)
    assert check.status == FAIL
    assert ("changes its encryption from the AWS-managed key to the kit's customer-managed key"
            in check.detail)
    assert "would be deleted with everything on it" in check.detail
    assert check.fix.startswith("keep storage.kms: false;")
    assert preflight_replace.check_fsx_kept(deployed(key_manager="CUSTOMER"), cfg).status == PASS


def test_turning_kms_off_fails_on_the_key_export_the_storage_stack_imports():
    """Before: the check said CloudFormation would create a new file system; the data stack
    deploys first, and removing its key fails while the storage stack imports the key's ARN."""
    check = preflight_replace.check_fsx_kept(deployed(key_manager="CUSTOMER"), config())
    assert check.status == FAIL
    assert check.detail == (
        f"this config turns storage.kms off, but {FS_ID} is encrypted with pf-data's key, whose "
        "ARN pf-storage imports: pf-data deploys first and cannot remove that export while "
        "pf-storage uses it, so the deploy fails")
    assert check.fix.startswith("keep storage.kms: true; to drop the key on purpose, let the run's "
                                "last save reach S3, delete pf-storage")


def test_an_unreadable_file_system_warns_with_the_permissions():
    clients = deployed()
    fsx, stub = stubbed("fsx")
    stub.add_client_error("describe_file_systems", "AccessDeniedException", "no")
    stub.activate()
    clients = reads(cloudformation=clients.clients.cloudformation, fsx=fsx)
    check = preflight_replace.check_fsx_kept(clients, config())
    assert check.status == WARN and check.detail.startswith(f"cannot tell whether a deploy would replace {FS_ID}")
    assert "fsx:DescribeFileSystems, ec2:DescribeSubnets and kms:DescribeKey" in check.fix


def test_what_the_check_compares_is_what_cloudformation_cannot_update(synth):
    """The real CloudFormation resource schema (the one cfn-lint ships) lists the file system's
    SubnetIds and KmsKeyId as create-only, and the synthesized storage stack sets exactly those
    from the AZ and storage.kms: the two things the check compares."""
    assert {"/properties/SubnetIds", "/properties/KmsKeyId"} <= create_only("AWS::FSx::FileSystem")
    for example, kms in (("default", False), ("p5-2node", True)):
        [fs] = resources(synth(example).template("storage"), "AWS::FSx::FileSystem").values()
        assert len(fs["Properties"]["SubnetIds"]) == 1
        assert ("KmsKeyId" in fs["Properties"]) == kms == synth(example).config.storage.kms
    [fs] = resources(synth("p5-2node").template("storage"), "AWS::FSx::FileSystem").values()
    imported = fs["Properties"]["KmsKeyId"]["Fn::ImportValue"]
    assert imported.startswith(f"{synth('p5-2node').config.name}-data:") and "DataKey" in imported


# --- a GPU group's placement group ---------------------------------------------------------------

PG = "pf-gpu-p5-EfaNodeGroupPlacementGroup1A2B3C4D-0123ABCD"


def gpu_stack(tags: dict[str, str] | None, stack_error: str | None = None):
    """Reads answering for the deployed GPU stack pf-gpu-p5 and its placement group's tags."""
    cfn, cfn_stub = stubbed("cloudformation")
    ec2, ec2_stub = stubbed("ec2")
    stack_answer(cfn_stub, "describe_stack_resources", "pf-gpu-p5", {"StackResources": [
        {"LogicalResourceId": "EfaNodeGroupPlacementGroup1A2B3C4D", "PhysicalResourceId": PG,
         "ResourceType": "AWS::EC2::PlacementGroup", "Timestamp": "2026-11-01T00:00:00Z",
         "ResourceStatus": "CREATE_COMPLETE"}]}, stack_error)
    if not stack_error:
        ec2_stub.add_response("describe_placement_groups", {"PlacementGroups": [{
            "GroupName": PG, "Strategy": "cluster", "State": "available",
            "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]
            + [{"Key": "aws:cloudformation:stack-name", "Value": "pf-gpu-p5"}]}]},
            {"GroupNames": [PG]})
    for stub in (cfn_stub, ec2_stub):
        stub.activate()
    return reads(cloudformation=cfn, ec2=ec2)


def pg_check(clients, cfg):
    return preflight_replace.check_placement_group_kept(clients, cfg, "p5", cfg.gpu_node_groups["p5"])


def test_a_placement_group_with_the_configs_tags_is_kept_and_a_new_stack_passes():
    cfg = config(tags={"team": "rl"})
    assert pg_check(gpu_stack(resource_tags(cfg)), cfg).detail == f"placement group {PG} keeps its tags"
    check = pg_check(gpu_stack(None, stack_error="Stack with id pf-gpu-p5 does not exist"), cfg)
    assert (check.status, check.detail) == (
        PASS, "pf-gpu-p5 is not deployed: the first deploy creates the placement group")


def test_a_tag_change_would_replace_the_placement_group_and_roll_the_nodes():
    """Before: adding a cost-centre tag (or changing cost_guard.ttl_hours) and deploying replaced
    the placement group, and EKS then replaced every GPU node of the group under the job."""
    before = config(tags={"team": "rl"})
    after = config(tags={"team": "rl", "cost-centre": "42"})
    check = pg_check(gpu_stack(resource_tags(before)), after)
    assert check.status == WARN
    assert check.detail == (
        f"a deploy would replace placement group {PG} (its tags cannot change in place: "
        "cost-centre: (none) -> 42), and EKS then replaces every node of the group in a rolling "
        "update")
    assert check.fix.startswith("deploy when no job runs on the group (rlkit status)")


def test_an_unreadable_placement_group_warns_naming_the_permission():
    """Before: ``except (AWS_ERRORS, ValueError)`` nested a tuple, which Python refuses when an
    exception is matched against it: a refused DescribePlacementGroups ended preflight with a
    TypeError traceback instead of this warning."""
    cfg = config()
    cfn, cfn_stub = stubbed("cloudformation")
    ec2, ec2_stub = stubbed("ec2")
    stack_answer(cfn_stub, "describe_stack_resources", "pf-gpu-p5", {"StackResources": [
        {"LogicalResourceId": "EfaNodeGroupPlacementGroup1A2B3C4D", "PhysicalResourceId": PG,
         "ResourceType": "AWS::EC2::PlacementGroup", "Timestamp": "2026-11-01T00:00:00Z",
         "ResourceStatus": "CREATE_COMPLETE"}]}, None)
    ec2_stub.add_client_error("describe_placement_groups", "UnauthorizedOperation", "not allowed",
                              expected_params={"GroupNames": [PG]})
    for stub in (cfn_stub, ec2_stub):
        stub.activate()
    check = pg_check(reads(cloudformation=cfn, ec2=ec2), cfg)
    assert (check.status, check.fix) == (
        WARN, "allow ec2:DescribePlacementGroups, then run preflight again")
    assert check.detail == (
        f"cannot tell whether a deploy would replace placement group {PG}: DescribePlacementGroups "
        "failed: UnauthorizedOperation: not allowed")


def test_a_group_in_an_existing_placement_group_is_not_checked():
    cfg = config(gpu_node_groups={"p5": {"instance_type": "p5.48xlarge", "availability_zone":
                                         "us-east-1a", "placement_group_name": "odcr-pg"}})
    assert pg_check(reads(), cfg) is None


def test_the_placement_groups_tags_are_create_only_and_carry_the_configs(synth):
    """The real resource schema lists the placement group's Tags as create-only, and the
    synthesized GPU stack puts the config's tags on it: a tag change is a replacement."""
    assert "/properties/Tags" in create_only("AWS::EC2::PlacementGroup")
    s = synth("default")
    [pg] = resources(s.template("gpu", "p5"), "AWS::EC2::PlacementGroup").values()
    assert {t["Key"]: t["Value"] for t in pg["Properties"]["Tags"]} == resource_tags(s.config)


# --- the cluster's admin access entries ----------------------------------------------------------

ADMIN_A = "arn:aws:iam::123456789012:role/PlatformAdmin"
ADMIN_B = "arn:aws:iam::123456789012:role/OnCall"


def cluster_stack(admins: list[str] | None, error: str | None = None) -> PreflightReads:
    """Reads whose GetTemplate returns a cluster stack with one entry per admin, under the
    logical IDs CDK gives them (EksAdmin<i> and a hash)."""
    cfn, stub = stubbed("cloudformation")
    entries = {f"EksAdmin{i}{1234567 + i:08X}": {"Type": "AWS::EKS::AccessEntry", "Properties": {
        "ClusterName": {"Ref": "EksClusterB2BDED5B"}, "PrincipalArn": arn}}
        for i, arn in enumerate(admins or [])}
    stack_answer(stub, "get_template", "pf-cluster",
                 {"TemplateBody": json.dumps({"Resources": entries})}, error)
    stub.activate()
    return reads(cloudformation=cfn)


def test_adding_an_admin_at_the_end_passes_and_a_new_cluster_too():
    cfg = config(admin_role_arns=[ADMIN_A, ADMIN_B])
    assert preflight_replace.check_admin_entries(cluster_stack([ADMIN_A]), cfg).status == PASS
    check = preflight_replace.check_admin_entries(
        cluster_stack(None, error="Stack with id pf-cluster does not exist"), cfg)
    assert (check.status, check.detail) == (
        PASS, "pf-cluster is not deployed: the first deploy creates the entries")


def test_removing_the_first_admin_would_roll_the_cluster_stack_back():
    """Before: admin B moved from position 1 to 0; CloudFormation created B's entry again before
    deleting the old one, EKS refused it, and the cluster stack rolled back."""
    check = preflight_replace.check_admin_entries(cluster_stack([ADMIN_A, ADMIN_B]),
                                                  config(admin_role_arns=[ADMIN_B]))
    assert check.status == FAIL
    assert check.detail.startswith(
        f"a deploy would create a second access entry for {ADMIN_B} (deployed at 1, now at 0)")
    assert check.fix.startswith(f"keep the deployed order ({ADMIN_A}, {ADMIN_B}) and add new roles "
                                "at the end; to remove or reorder, deploy once with the list cut")


def test_admin_entries_are_keyed_by_position_under_the_ids_the_check_reads(synth):
    """The real schema: an entry's principal is create-only and, with the cluster, its identifier
    (a second entry for it cannot exist); the synthesized cluster stack names the entry of
    admin_role_arns[0] as the check expects."""
    assert "/properties/PrincipalArn" in create_only("AWS::EKS::AccessEntry")
    assert "/properties/PrincipalArn" in resource_schema("AWS::EKS::AccessEntry")["primaryIdentifier"]
    s = synth("p5-2node")
    found = {preflight_replace._ADMIN_ENTRY_ID.search(k).group(1): r["Properties"]["PrincipalArn"]
             for k, r in resources(s.template("cluster"), "AWS::EKS::AccessEntry").items()
             if preflight_replace._ADMIN_ENTRY_ID.search(k)}
    assert found == {str(i): arn for i, arn in enumerate(s.config.admin_role_arns)} != {}


# --- the order of availability_zones -------------------------------------------------------------


def lz_export(n: int) -> str:
    return f"pf-network:ExportsOutputRefNetworkLocalZone{n}Subnet{0xABC000 + n:08X}0A1B2C3D"


def network_stack(zones: list[str], local_zones: tuple[str, ...] = (),
                  imports: dict[int, list[str]] | None = None) -> PreflightReads:
    """Reads whose GetTemplate returns a network stack with one public and one private
    subnet per zone and one exported subnet per Local Zone, numbered as CDK numbers them; then
    ListImports answers for the Local Zones numbered in ``imports`` (an empty list: CloudFormation's
    "not imported by any stack")."""
    cfn, stub = stubbed("cloudformation")
    subnets = {f"NetworkVpc{kind}Subnet{n}Subnet{1234567 + n:08X}": {
        "Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": zone}}
        for kind in ("public", "private") for n, zone in enumerate(zones, start=1)}
    local = {f"NetworkLocalZone{n}Subnet{0xABC000 + n:08X}": {
        "Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": zone}}
        for n, zone in enumerate(local_zones, start=1)}
    outputs = {f"ExportsOutputRef{lid}0A1B2C3D": {"Value": {"Ref": lid},
                                                   "Export": {"Name": lz_export(n)}}
               for n, lid in enumerate(local, start=1)}
    stack_answer(stub, "get_template", "pf-network", {"TemplateBody": json.dumps(
        {"Resources": subnets | local, "Outputs": outputs})}, None)
    for n, users in (imports or {}).items():
        if users:
            stub.add_response("list_imports", {"Imports": users}, {"ExportName": lz_export(n)})
        else:
            stub.add_client_error("list_imports", "ValidationError", f"Export '{lz_export(n)}' is "
                                  "not imported by any stack.", expected_params={"ExportName": lz_export(n)})
    stub.activate()
    return reads(cloudformation=cfn)


ZONES = ["us-east-1a", "us-east-1b"]


def test_the_same_zones_pass_and_a_zone_added_at_the_end_warns():
    same = preflight_replace.check_zone_order(network_stack(ZONES), config(availability_zones=ZONES))
    assert (same.status, same.detail) == (PASS, "the subnets stay in ['us-east-1a', 'us-east-1b']")
    added = preflight_replace.check_zone_order(
        network_stack(ZONES), config(availability_zones=[*ZONES, "us-east-1c"]))
    assert added.status == WARN and added.detail.startswith(
        "us-east-1c added at the end: new subnets only, but the system node group's subnets change")


def test_a_zone_inserted_before_others_would_move_the_numbered_subnets():
    """Before: listing us-east-1c first renumbered the subnets, so subnet 1 had to move from
    us-east-1a to us-east-1c (a replacement) while the other stacks imported it."""
    check = preflight_replace.check_zone_order(
        network_stack(ZONES), config(availability_zones=["us-east-1c", *ZONES]))
    assert check.status == FAIL
    assert check.fix == ("keep availability_zones starting with ['us-east-1a', 'us-east-1b'], and "
                         "add zones at the end")


def test_the_subnets_are_numbered_by_zone_position_and_their_zone_is_create_only(synth):
    """The real schemas: a subnet's zone and a node group's subnets are create-only; the
    synthesized network stack numbers its private subnets in the config's zone order, under the
    IDs the check parses."""
    assert "/properties/AvailabilityZone" in create_only("AWS::EC2::Subnet")
    assert "/properties/Subnets" in create_only("AWS::EKS::Nodegroup")
    s = synth("p5-2node")
    numbered = {int(m.group(1)): r["Properties"]["AvailabilityZone"]
                for k, r in resources(s.template("network"), "AWS::EC2::Subnet").items()
                if (m := preflight_replace._PRIVATE_SUBNET_ID.search(k))}
    assert [numbered[n] for n in sorted(numbered)] == s.config.availability_zones


DFW, MIA = "us-east-1-dfw-2a", "us-east-1-mia-1a"


@pytest.mark.parametrize("deployed, wanted", [
    ((DFW,), [MIA]),        # replaced: LocalZone1 would move to MIA under DFW's CIDR block
    ((DFW, MIA), [MIA]),    # the first removed: LocalZone1 moves, LocalZone2 goes
])
def test_a_local_zone_moved_fails(deployed, wanted):
    """Before: only the private subnets were compared, so swapping the Local Zone of a deployed
    UltraServer environment (as the reservation check's fix suggested) passed, and the network
    stack update failed."""
    check = preflight_replace.check_zone_order(
        network_stack(ZONES, deployed), config(availability_zones=ZONES, local_zones=wanted))
    assert (check.status, check.subject) == (FAIL, "local_zones (pf-network)")
    assert check.detail.startswith(
        f"the deployed Local Zone subnets are numbered for {list(deployed)}, this config lists "
        f"{wanted}: a deploy would move a subnet to another zone under the same CIDR block")
    assert check.fix.startswith(f"keep local_zones starting with {list(deployed)} and add zones "
                                "at the end; to drop or replace a Local Zone, drop the zones from "
                                "the end of the list")


@pytest.mark.parametrize("deployed, wanted, dropped", [((DFW,), [], 1), ((DFW, MIA), [DFW], 2)])
def test_a_local_zone_dropped_from_the_end_fails_only_while_a_stack_imports_its_subnet(
        deployed, wanted, dropped):
    """The fix of a moved zone is to drop zones from the end once their GPU stacks are gone: a
    drop fails only while a stack still imports the subnet (ListImports), else it passes."""
    cfg = config(availability_zones=ZONES, local_zones=wanted)
    check = preflight_replace.check_zone_order(
        network_stack(ZONES, deployed, {dropped: ["pf-gpu-gb200"]}), cfg)
    assert (check.status, check.subject) == (FAIL, "local_zones (pf-network)")
    assert check.detail == (
        f"this config drops {deployed[-1]} from local_zones, but pf-gpu-gb200 still imports its "
        "subnet (\"Export ... cannot be deleted as it is in use\"), so the network stack update fails")
    assert check.fix.startswith("destroy pf-gpu-gb200 first (cdk destroy pf-gpu-gb200 -c config=")
    gone = preflight_replace.check_zone_order(network_stack(ZONES, deployed, {dropped: []}), cfg)
    assert (gone.status, gone.detail) == (PASS, f"the subnets stay in {ZONES + wanted}; the subnets "
                                          f"of {deployed[-1]} go (no stack imports them)")


def test_a_local_zone_added_at_the_end_passes():
    check = preflight_replace.check_zone_order(
        network_stack(ZONES, (DFW,)), config(availability_zones=ZONES, local_zones=[DFW, MIA]))
    assert (check.status, check.detail) == (
        PASS, f"the subnets stay in ['us-east-1a', 'us-east-1b', '{DFW}']")


def test_local_zone_subnets_are_numbered_by_position_with_a_cidr_by_position(synth):
    """The synthesized UltraServer network stack names each Local Zone's subnet as the check
    parses, in local_zones order, and its CIDR follows its position (so a zone moved to another
    position keeps the old block: the refusal the check predicts)."""
    s = synth("p6e-gb200-ultraserver")
    found = {int(m.group(1)): r["Properties"]
             for k, r in resources(s.template("network"), "AWS::EC2::Subnet").items()
             if (m := preflight_replace._LOCAL_ZONE_SUBNET_ID.search(k))}
    assert [found[n]["AvailabilityZone"] for n in sorted(found)] == s.config.local_zones != []
    cidr = ipaddress.ip_network(s.config.vpc.cidr)
    assert found[1]["CidrBlock"] == str(list(cidr.subnets(prefixlen_diff=PRIVATE_SUBNET_BITS))[-1])
    # the GPU stack imports the subnet through an export of the shape the drop check reads
    network = s.template("network")
    [lid] = [k for k in resources(network, "AWS::EC2::Subnet")
             if preflight_replace._LOCAL_ZONE_SUBNET_ID.search(k)]
    assert [o["Export"]["Name"] for o in network["Outputs"].values()
            if o.get("Value") == {"Ref": lid}] != []


# --- a GPU group's taints ------------------------------------------------------------------------

GPU_TAINT = {"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}
FSX_TAINT = {"Key": "fsx.csi.aws.com/agent-not-ready", "Effect": "NO_EXECUTE"}


def gpu_template(taints: list[dict]) -> PreflightReads:
    cfn, stub = stubbed("cloudformation")
    stack_answer(stub, "get_template", "pf-gpu-p5", {"TemplateBody": json.dumps({"Resources": {
        "EfaNodeGroupNodegroup3B02DA54": {"Type": "AWS::EKS::Nodegroup",
                                          "Properties": {"Taints": taints}}}})}, None)
    stub.activate()
    return reads(cloudformation=cfn)


def test_a_deploy_that_adds_the_fsx_startup_taint_to_running_nodes_warns():
    """Before: a group deployed without the FSx startup taint (an older kit, or no file system
    yet) got it on its running nodes at the next deploy: NoExecute evicted the job, and the
    taint stayed, since the FSx CSI node plugin removes it only when it starts."""
    check = preflight_replace.check_node_taints(gpu_template([GPU_TAINT]), config(), "p5")
    assert check.status == WARN
    assert check.detail == (
        "the deploy adds fsx.csi.aws.com/agent-not-ready:NoExecute to the group's running nodes "
        "(EKS applies a node group's taints to the nodes it has): NoExecute evicts every pod "
        "without a toleration, the job included")
    assert check.fix == ("deploy when no job runs on the group, then restart the agent that "
                         "removes the taint: kubectl -n kube-system rollout restart "
                         "daemonset/fsx-csi-node")
    same = preflight_replace.check_node_taints(gpu_template([GPU_TAINT, FSX_TAINT]), config(), "p5")
    assert (same.status, same.detail) == (PASS, "the deploy adds no taint to the group's nodes")


def test_the_taints_the_check_expects_are_the_ones_the_stack_deploys(synth):
    """What the check compares with the deployed group (gpu_group_taints) is what the synthesized
    GPU stack sets: one definition for both."""
    from infra.config.derived import gpu_group_taints

    s = synth("default")
    [ng] = resources(s.template("gpu", "p5"), "AWS::EKS::Nodegroup").values()
    assert [(t["Key"], preflight_replace._EFFECTS[t["Effect"]]) for t in ng["Properties"]["Taints"]] \
        == [(t.key, t.effect) for t in gpu_group_taints(s.config, "p5")]


# --- the node AMI release -------------------------------------------------------------------------

RELEASE = "1.35.6-20260714"


def nodegroup_stack(running: str | None, stack_error: str | None = None,
                    eks_error: str | None = None) -> PreflightReads:
    """Reads answering for pf-gpu-p5 (its node group's physical ID is cluster/node group) and
    for EKS's description of that group, which runs release ``running``."""
    cfn, cfn_stub = stubbed("cloudformation")
    eks, eks_stub = stubbed("eks")
    stack_answer(cfn_stub, "describe_stack_resources", "pf-gpu-p5", {"StackResources": [
        {"LogicalResourceId": "EfaNodeGroupNodegroup3B02DA54", "PhysicalResourceId": "pf/ng-p5",
         "ResourceType": "AWS::EKS::Nodegroup", "Timestamp": "2026-11-01T00:00:00Z",
         "ResourceStatus": "CREATE_COMPLETE"}]}, stack_error)
    params = {"clusterName": "pf", "nodegroupName": "ng-p5"}
    if eks_error:
        eks_stub.add_client_error("describe_nodegroup", "AccessDeniedException", eks_error,
                                  expected_params=params)
    elif not stack_error:
        eks_stub.add_response("describe_nodegroup", {"nodegroup": {
            "nodegroupName": "ng-p5", "clusterName": "pf", "releaseVersion": running}}, params)
    for stub in (cfn_stub, eks_stub):
        stub.activate()
    return reads(cloudformation=cfn, eks=eks)


def ami_check(clients, release=RELEASE):
    return preflight_replace.check_ami_release(clients, config(node_ami_release_version=release),
                                               "pf-gpu-p5", "GPU group p5's nodes",
                                               "under a running job")


def test_without_a_release_in_the_config_nothing_is_read():
    assert preflight_replace.check_ami_release(reads(), config(), "pf-gpu-p5", "x", "y") is None


def test_the_group_staying_on_its_release_or_not_deployed_passes():
    assert (ami_check(nodegroup_stack(RELEASE)).status, ami_check(nodegroup_stack(RELEASE)).detail) \
        == (PASS, f"GPU group p5's nodes stay on AMI release {RELEASE}")
    new = ami_check(nodegroup_stack(None, stack_error="Stack with id pf-gpu-p5 does not exist"))
    assert (new.status, new.detail) == (PASS, "pf-gpu-p5 is not deployed: the first deploy creates "
                                              "the node group")


def test_a_release_older_than_the_running_one_fails_before_the_deploy_does():
    """EKS cannot move a node group back to an earlier AMI release (UpdateNodegroupVersion): a group
    EKS created on a newer release than the one named would fail the GPU stack's update."""
    check = ami_check(nodegroup_stack("1.35.9-20261020"))
    assert (check.status, check.detail, check.fix) == (
        FAIL,
        "node group ng-p5 runs AMI release 1.35.9-20261020, newer than 1.35.6-20260714: EKS cannot "
        "move a node group back to an earlier release, so the deploy would fail and roll back",
        "set node_ami_release_version to 1.35.9-20261020 or a later release of Kubernetes 1.35")
    # a newer Kubernetes minor is newer, whatever its date
    assert ami_check(nodegroup_stack("1.36.1-20260601")).status == FAIL


def test_moving_to_a_newer_release_warns_that_every_node_is_replaced_in_a_deploy_of_its_own():
    check = ami_check(nodegroup_stack("1.34.9-20260714"))
    assert (check.status, check.detail, check.fix) == (
        WARN,
        "the deploy moves GPU group p5's nodes from AMI release 1.34.9-20260714 to 1.35.6-20260714: "
        "EKS replaces every node of the group in a rolling update, under a running job; and "
        "CloudFormation refuses a release change combined with any other change of the group",
        "deploy it when no job runs (rlkit status), with no other change to the node groups in the "
        "same deploy (sizes, taints, labels, capacity)")


def test_an_unreadable_node_group_warns_naming_the_permission():
    check = ami_check(nodegroup_stack(RELEASE, eks_error="not allowed"))
    assert check.status == WARN
    assert check.fix == "allow eks:DescribeNodegroup, then run preflight again"


def test_every_node_group_is_checked_when_a_release_is_named():
    """The system group (cluster stack) and each GPU group: each stack not deployed here, and
    asked about once (before: the cluster stack four times, the GPU stack four)."""
    cfn, stub = stubbed("cloudformation")
    cfg = config(node_ami_release_version=RELEASE)
    # the first read of each stack says it does not exist; every other check of it (admin
    # entries, chart versions, AMI release, system nodes; placement group, taints, AMI release,
    # node roll) reads that answer again, without a call
    for operation, stack in (("get_template", "pf-cluster"), ("get_template", "pf-network"),
                             ("describe_stacks", "pf-storage"),
                             ("describe_stack_resources", "pf-gpu-p5")):
        stack_answer(stub, operation, stack, {}, f"Stack with id {stack} does not exist")
    stub.activate()
    checks = preflight_replace.replacement_checks(reads(cloudformation=cfn), cfg)
    stub.assert_no_pending_responses()
    assert [c.subject for c in checks if c.name == preflight_replace.AMI_RELEASE] == [
        "node_ami_release_version (pf-cluster)", "node_ami_release_version (pf-gpu-p5)"]
    # every stack answered "not deployed": a warning would be a call nobody stubbed
    assert {c.status for c in checks} == {PASS}
    assert [(c.name, c.subject) for c in checks if c.name in (
        preflight_nodegroups.NODEGROUP_KEPT, preflight_nodegroups.NODE_ROLL)] == [
        (preflight_nodegroups.NODEGROUP_KEPT, "system_nodes (pf-cluster)"),
        (preflight_nodegroups.NODE_ROLL, "gpu_node_groups.p5 (pf-gpu-p5)")]


# --- CRDs a Helm release gains on a later deploy -------------------------------------------------


def ultraserver_config():
    from infra.config import load_config
    from tests.support import REPO_ROOT

    return load_config(REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml")


def cluster_with_device_plugin(cfg, nfd_enabled: bool) -> PreflightReads:
    """Reads whose GetTemplate returns the cluster stack with the device plugin's release,
    its values as CDK writes them (a JSON string)."""
    cfn, stub = stubbed("cloudformation")
    stack = f"{cfg.name}-cluster"
    values = json.dumps({"nfd": {"enabled": nfd_enabled}, "gfd": {"enabled": nfd_enabled}})
    stack_answer(stub, "get_template", stack, {"TemplateBody": json.dumps({"Resources": {
        "AddonsnvidiadevicepluginFAF552E3": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {
            "Release": "nvidia-device-plugin", "Values": values}}}})}, None)
    stub.activate()
    return reads(cloudformation=cfn)


def test_adding_an_ultraserver_group_to_a_deployed_cluster_needs_the_nfd_crds_first():
    """Before: the deploy turned on the device plugin release's NFD subchart with `helm upgrade`,
    which installs no CRDs, so NFD ran without its CRDs and no GPU clique label ever appeared."""
    cfg = ultraserver_config()
    check = preflight_replace.check_nfd_crds(cluster_with_device_plugin(cfg, False), cfg)
    assert check.status == FAIL
    assert "Helm installs a chart's CRDs only with a release's first install" in check.detail
    assert check.fix == (
        "before deploying, apply the CRDs: helm pull nvidia-device-plugin --repo "
        "https://nvidia.github.io/k8s-device-plugin --version 0.20.0 --untar --untardir "
        "/tmp/nfd-crds && kubectl apply --server-side -f "
        "/tmp/nfd-crds/nvidia-device-plugin/charts/node-feature-discovery/crds/")
    assert preflight_replace.check_nfd_crds(cluster_with_device_plugin(cfg, True), cfg).status == PASS
    assert preflight_replace.check_nfd_crds(reads(), config()) is None  # no UltraServer


@pytest.mark.external
def test_the_nfd_crds_are_where_the_fix_says_and_the_release_values_are_what_the_check_reads(synth):
    """The pinned chart (its locked archive) keeps NFD's CRDs in the subchart's crds/ folder the
    fix applies; the synthesized cluster stacks write nfd.enabled into the release's values, off
    without UltraServers and on with them."""
    import tarfile

    import yaml

    from infra.addons import nvidia_device_plugin
    from tests.support import artifacts

    addon = nvidia_device_plugin.ADDON
    archive = artifacts.require(f"{addon.chart}-{addon.pinned.version}")
    with tarfile.open(archive) as tar:
        docs = [d for m in tar.getmembers()
                if m.name.startswith(f"{addon.chart}/charts/node-feature-discovery/crds/")
                and m.isfile()
                for d in yaml.safe_load_all(tar.extractfile(m).read()) if d]
    assert {d["kind"] for d in docs} == {"CustomResourceDefinition"} and len(docs) == 3
    for example, enabled in (("default", False), ("p6e-gb200-ultraserver", True)):
        s = synth(example)
        [release] = [r for r in resources(s.template("cluster"), "Custom::AWSCDK-EKS-HelmChart").values()
                     if r["Properties"]["Release"] == addon.release]
        assert json.loads(release["Properties"]["Values"])["nfd"]["enabled"] is enabled


# --- CRDs a chart version change would leave behind ----------------------------------------------


def cluster_with_releases(cfg, versions: dict[str, str]) -> PreflightReads:
    """Reads whose GetTemplate returns the cluster stack with every enabled add-on's release
    at the config's chart version, except those ``versions`` moves (add-on key -> version)."""
    from infra.addons import ADDONS

    cfn, stub = stubbed("cloudformation")
    charts = {f"Addons{a.key.replace('_', '')}0123ABCD": {
        "Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {
            "Release": a.release, "Chart": a.chart, "Repository": a.repository,
            "Version": versions.get(a.key, cfg.addons.chart_version(a.key)), "Values": "{}"}}
        for a in ADDONS if cfg.addon_enabled(a.key)}
    stack_answer(stub, "get_template", f"{cfg.name}-cluster",
                 {"TemplateBody": json.dumps({"Resources": charts})}, None)
    stub.activate()
    return reads(cloudformation=cfn)


def in_folder(folder):
    """A ``locate`` that finds ``<chart>-<version>.tgz`` in ``folder`` (the locked charts)."""
    return lambda name: folder / name if (folder / name).is_file() else None


def version_checks(cfg, versions, locate) -> dict[str, object]:
    checks = preflight_replace.check_chart_version_crds(cluster_with_releases(cfg, versions), cfg,
                                                        locate)
    return {c.subject.split(".")[1]: c for c in checks}


def never(name):
    raise AssertionError(f"{name} read, though no release changes version")


def test_moving_kuberay_to_another_chart_version_needs_its_crds_applied_first(chart_dir):
    """Before: preflight said nothing, `helm upgrade` kept the cluster on the old RayJob CRD, and
    the API server dropped the fields the kit's RayJob set that the old CRD lacked. The deployed
    version's archive is not at hand, so each CRD of the new one counts as changed."""
    checks = version_checks(config(), {"kuberay_operator": "1.6.0"}, in_folder(chart_dir))
    check = checks["kuberay_operator"]
    assert check.status == FAIL
    assert check.subject == "addons.kuberay_operator.version (pf-cluster)"
    assert check.detail.startswith(
        "this config moves the kuberay-operator release from chart 1.6.0 to 1.7.0, whose CRDs "
        "rayclusters.ray.io, raycronjobs.ray.io, rayjobs.ray.io, rayservices.ray.io differ from "
        "1.6.0's (the 1.6.0 archive is not in the locked copies, so each counts as changed); "
        "CDK's Helm handler runs `helm upgrade`, which never applies a chart's CRDs")
    assert check.fix == (
        "before deploying, apply the 1.7.0 CRDs: helm pull kuberay-operator --repo "
        "https://ray-project.github.io/kuberay-helm/ --version 1.7.0 --untar --untardir "
        "/tmp/kuberay-operator-1.7.0-crds && kubectl apply --server-side --force-conflicts "
        "-f /tmp/kuberay-operator-1.7.0-crds/kuberay-operator/crds/")
    assert {k: c.status for k, c in checks.items() if k != "kuberay_operator"} == {
        "efa_device_plugin": PASS, "nvidia_device_plugin": PASS}  # dcgm_exporter is off


def test_releases_at_the_configs_chart_versions_pass_without_reading_a_chart():
    checks = version_checks(config(), {}, never)
    assert {c.detail for c in checks.values()} == {
        "the aws-efa-k8s-device-plugin release stays at chart v0.5.30",
        "the nvidia-device-plugin release stays at chart 0.20.0",
        "the kuberay-operator release stays at chart 1.7.0"}  # dcgm_exporter is off
    assert all(c.status == PASS for c in checks.values())


def test_a_new_cluster_or_release_passes_and_a_missing_or_broken_archive_warns(tmp_path):
    cfn, stub = stubbed("cloudformation")
    stack_answer(stub, "get_template", "pf-cluster", {}, "Stack with id pf-cluster does not exist")
    stub.activate()
    [check] = preflight_replace.check_chart_version_crds(reads(cloudformation=cfn), config(),
                                                         never)
    assert (check.status, check.detail) == (
        PASS, "pf-cluster is not deployed: the first deploy creates the releases with their CRDs")
    cfg = config()
    cfn, stub = stubbed("cloudformation")
    stack_answer(stub, "get_template", "pf-cluster", {"TemplateBody": "{\"Resources\": {}}"}, None)
    stub.activate()
    checks = preflight_replace.check_chart_version_crds(reads(cloudformation=cfn), cfg, never)
    assert checks[0].detail == ("pf-cluster has no aws-efa-k8s-device-plugin release yet: its "
                                "first install applies the CRDs of chart v0.5.30")
    check = version_checks(cfg, {"kuberay_operator": "1.6.0"}, lambda name: None)["kuberay_operator"]
    assert check.status == WARN and "kuberay-operator-1.7.0.tgz is not in the locked copies" in check.detail
    assert check.fix.startswith("run `python scripts/fetch_artifacts.py`")
    (tmp_path / "broken.tgz").write_bytes(b"not a chart")
    check = version_checks(cfg, {"kuberay_operator": "1.6.0"},
                           lambda name: tmp_path / "broken.tgz")["kuberay_operator"]
    assert check.status == WARN
    assert check.detail.startswith("cannot read the CRDs of chart archive kuberay-operator-1.7.0.tgz: ")


@pytest.mark.parametrize("example, key, deployed_version, status, detail", [
    # no crds/ folder in either version of the EFA plugin's chart
    ("default", "efa_device_plugin", "v0.5.7", PASS,
     "chart v0.5.30 installs no CRDs with the kit's values: the move from v0.5.7 leaves none behind"),
    # NFD's CRDs ride in a subchart the kit turns on only for UltraServers: off, Helm skips them
    ("default", "nvidia_device_plugin", "0.17.1", PASS,
     "chart 0.20.0 installs no CRDs with the kit's values: the move from 0.17.1 leaves none behind"),
    # on: the subchart's CRDs changed from NFD 0.15.3 (two) to 0.19.0 (three), both archives read
    ("p6e-gb200-ultraserver", "nvidia_device_plugin", "0.17.1", FAIL,
     "this config moves the nvidia-device-plugin release from chart 0.17.1 to 0.20.0, whose CRDs "
     "nodefeaturegroups.nfd.k8s-sigs.io, nodefeaturerules.nfd.k8s-sigs.io, "
     "nodefeatures.nfd.k8s-sigs.io differ from 0.17.1's; CDK's Helm handler"),
])
def test_what_a_chart_version_change_leaves_behind_is_read_from_the_real_archives(
        chart_dir, example, key, deployed_version, status, detail):
    cfg = ultraserver_config() if example == "p6e-gb200-ultraserver" else config()
    check = version_checks(cfg, {key: deployed_version}, in_folder(chart_dir))[key]
    assert check.status == status and check.detail.startswith(detail)
    if status == FAIL:
        assert check.fix.endswith(
            "--untardir /tmp/nvidia-device-plugin-0.20.0-crds && kubectl apply --server-side "
            "--force-conflicts -f /tmp/nvidia-device-plugin-0.20.0-crds/nvidia-device-plugin/"
            "charts/node-feature-discovery/crds/")


def test_the_same_crds_in_both_versions_pass(chart_dir):
    """The DRA driver's archive stands for both versions: the CRDs compare equal."""
    cfg = ultraserver_config()
    same = chart_dir / "dra-driver-nvidia-gpu-0.4.1.tgz"
    check = version_checks(cfg, {"dra_driver": "0.4.0"},
                           lambda name: same if name.startswith("dra-driver") else None)["dra_driver"]
    assert (check.status, check.detail) == (
        PASS, "charts 0.4.0 and 0.4.1 define the same CRDs: the move from 0.4.0 changes none")


@pytest.mark.parametrize("example, key, version", [
    ("default", "nvidia_device_plugin", "0.20.0"),  # NFD subchart off: none of its CRDs
    ("p6e-gb200-ultraserver", "nvidia_device_plugin", "0.20.0"),  # on: its three
    ("p6e-gb200-ultraserver", "nvidia_device_plugin", "0.17.1"),  # on, NFD 0.15.3: two
    ("p6e-gb200-ultraserver", "dra_driver", "0.4.1"),
])
def test_the_crds_read_from_an_archive_are_the_ones_the_real_helm_installs(
        chart_dir, tmp_path_factory, example, key, version):
    """Contract: which crds/ folders count (subchart conditions over the chart's default values)
    is what Helm itself decides: `helm template --include-crds` (the Helm of the kit's kubectl
    layer) with the kit's values emits the same CRDs."""
    import subprocess

    import yaml

    from infra.addons import addon as registered
    from ops import chart_crds, helm

    cfg = ultraserver_config() if example == "p6e-gb200-ultraserver" else config()
    addon = registered(key)
    values = chart_values(addon.key, cfg)
    archive = chart_dir / f"{addon.chart}-{version}.tgz"
    binary = helm.helm_binary(cfg.kubernetes_version, tmp_path_factory.mktemp("helm"))
    values_file = tmp_path_factory.mktemp("values") / "values.json"
    values_file.write_text(json.dumps(values))
    out = subprocess.run([str(binary), "template", addon.release, str(archive), "--include-crds",
                          "--namespace", addon.namespace, "--kube-version",
                          f"{cfg.kubernetes_version}.0", "--values", str(values_file)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    by_helm = sorted(d["metadata"]["name"] for d in yaml.load_all(out, Loader=yaml.CSafeLoader)
                     if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition")
    assert sorted(chart_crds.chart_crds(archive, values).crds) == by_helm

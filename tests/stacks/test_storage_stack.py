"""The shared file system on the CDK side: storage stack, storage-access stack, FSx CSI add-on.

Fine-grained CloudFormation assertions for every example config (cfn-lint runs on these
templates in test_cfn_lint.py, which lints every stack the app synthesizes).
"""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES, only, resources
from infra import names
from infra.constructs.shared_filesystem import (
    FSX_CSI_CONTROLLER_SERVICE_ACCOUNT,
    FSX_S3_ACCESS_ROLE_PREFIX,
)
from infra.names import OutputKeys

LUSTRE_PORTS = {(988, 988), (1018, 1023)}  # FSx for Lustre User Guide; see the construct


def _ingress(template: dict) -> list[dict]:
    return [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]


def _stack_dependencies(s, stack: str) -> set[str]:
    deps = s.manifest["artifacts"][stack].get("dependencies", [])
    return {d for d in deps if not d.endswith(".assets")}


@pytest.mark.parametrize("example", EXAMPLES)
def test_file_system_is_persistent_2_in_the_training_groups_subnet(synth, example):
    s = synth(example)
    cfg = s.config
    fs_cfg = cfg.storage.shared_filesystem
    fs = only(s.template("storage"), "AWS::FSx::FileSystem")
    props = fs["Properties"]
    assert props["FileSystemType"] == "LUSTRE"
    assert props["StorageType"] == "SSD"
    assert props["StorageCapacity"] == fs_cfg.capacity_gib
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": fs_cfg.throughput_mb_s_per_tib}
    # The same single subnet (hence AZ) as the training GPU group's nodes; for a group in a
    # Local Zone, the configured regional AZ's private subnet (the kit puts none in the zone).
    nodegroup = only(s.template("gpu", cfg.training.node_group), "AWS::EKS::Nodegroup")
    assert len(props["SubnetIds"]) == 1
    if fs_cfg.availability_zone is None:
        assert props["SubnetIds"] == nodegroup["Properties"]["Subnets"]
    else:
        index = cfg.availability_zones.index(fs_cfg.availability_zone) + 1
        assert f"VpcprivateSubnet{index}Subnet" in props["SubnetIds"][0]["Fn::ImportValue"]
        assert "LocalZone" in nodegroup["Properties"]["Subnets"][0]["Fn::ImportValue"]
    expected = "Delete" if cfg.ephemeral or not cfg.storage.retain else "Retain"
    assert fs["DeletionPolicy"] == fs["UpdateReplacePolicy"] == expected
    sg = only(s.template("storage"), "AWS::EC2::SecurityGroup")
    assert sg["DeletionPolicy"] == expected  # a kept file system keeps its security group


@pytest.mark.parametrize("example", EXAMPLES)
def test_file_system_encryption_follows_the_bucket(synth, example):
    s = synth(example)
    props = only(s.template("storage"), "AWS::FSx::FileSystem")["Properties"]
    data = s.template("data")
    keys = resources(data, "AWS::KMS::Key")
    if s.config.storage.kms:
        # The bucket's own key, exported by the data stack.
        (key_id,) = keys
        assert "Fn::ImportValue" in props["KmsKeyId"]
        assert key_id in props["KmsKeyId"]["Fn::ImportValue"]
        policy = json.dumps(keys[key_id]["Properties"]["KeyPolicy"])
        assert FSX_S3_ACCESS_ROLE_PREFIX in policy  # FSx may read/write the linked prefixes
    else:
        assert "KmsKeyId" not in props  # PERSISTENT_2 is encrypted with FSx's AWS-managed key
        assert not keys


@pytest.mark.parametrize("example", EXAMPLES)
def test_data_repository_associations_link_datasets_and_models_only(synth, example):
    s = synth(example)
    t = s.template("storage")
    fs_id = next(iter(resources(t, "AWS::FSx::FileSystem")))
    links = {r["Properties"]["FileSystemPath"]: r["Properties"]
             for r in resources(t, "AWS::FSx::DataRepositoryAssociation").values()}
    assert set(links) == {"/datasets", "/models"}  # no checkpoints/: see docs/operations.md
    for path, props in links.items():
        assert props["FileSystemId"] == {"Ref": fs_id}
        repo = props["DataRepositoryPath"]["Fn::Join"][1]
        assert repo[0] == "s3://" and repo[-1] == f"{path}/"
        assert "ExportsOutputRefDataBucket" in json.dumps(repo[1])  # the data bucket
        assert props["BatchImportMetaDataOnCreate"] is True
        # Import only: an export would publish torn checkpoint-style writes out of order.
        assert props["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}


@pytest.mark.parametrize("example", EXAMPLES)
def test_lustre_ports_between_file_servers_and_the_nodes(synth, example):
    s = synth(example)
    storage = s.template("storage")
    (sg_id,) = resources(storage, "AWS::EC2::SecurityGroup")
    fs = only(storage, "AWS::FSx::FileSystem")["Properties"]
    assert fs["SecurityGroupIds"] == [{"Fn::GetAtt": [sg_id, "GroupId"]}]
    own = {(r["FromPort"], r["ToPort"]) for r in _ingress(storage)
           if r["SourceSecurityGroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}
           and r["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]} and r["IpProtocol"] == "tcp"}
    assert own == LUSTRE_PORTS
    assert {(r["FromPort"], r["ToPort"]) for r in _ingress(storage)} == LUSTRE_PORTS

    access = s.template("storage_access")
    rules = _ingress(access)
    assert all(r["IpProtocol"] == "tcp" for r in rules)
    fs_sg = json.dumps({"Fn::GetAtt": [sg_id, "GroupId"]})

    def is_fs_sg(ref: dict) -> bool:  # the storage stack's security group, imported
        return "Fn::ImportValue" in ref and sg_id in ref["Fn::ImportValue"]

    def is_cluster_sg(ref: dict) -> bool:  # the EKS cluster security group every node carries
        return "Fn::ImportValue" in ref and "ClusterSecurityGroupId" in ref["Fn::ImportValue"]

    into_fs = {(r["FromPort"], r["ToPort"]) for r in rules
               if is_fs_sg(r["GroupId"]) and is_cluster_sg(r["SourceSecurityGroupId"])}
    into_nodes = {(r["FromPort"], r["ToPort"]) for r in rules
                  if is_cluster_sg(r["GroupId"]) and is_fs_sg(r["SourceSecurityGroupId"])}
    assert into_fs == into_nodes == LUSTRE_PORTS
    assert len(rules) == 2 * len(LUSTRE_PORTS)
    assert fs_sg  # the file system's own group is the one the rules open


def test_gpu_nodes_carry_the_cluster_security_group_the_access_rules_open(synth):
    """The access stack opens Lustre to the cluster security group: GPU nodes must carry it."""
    s = synth("default")
    lt = only(s.template("gpu", "p5"), "AWS::EC2::LaunchTemplate")["Properties"]
    for nic in lt["LaunchTemplateData"]["NetworkInterfaces"]:
        assert any("ClusterSecurityGroupId" in json.dumps(g) for g in nic["Groups"])


@pytest.mark.parametrize("example", EXAMPLES)
def test_storage_deploys_in_parallel_with_the_cluster(synth, example):
    s = synth(example)
    stacks = names.stack_names(s.config.name)
    expected = {stacks["data"]} | ({stacks["network"]} if s.config.vpc.existing is None else set())
    assert _stack_dependencies(s, stacks["storage"]) == expected
    assert _stack_dependencies(s, stacks["storage_access"]) == {stacks["storage"],
                                                                 stacks["cluster"]}
    assert stacks["storage"] not in _stack_dependencies(s, stacks["cluster"])


@pytest.mark.parametrize("example", EXAMPLES)
def test_storage_outputs_for_the_manifests(synth, example):
    s = synth(example)
    outputs = s.template("storage")["Outputs"]
    fs_id = next(iter(resources(s.template("storage"), "AWS::FSx::FileSystem")))
    assert outputs[OutputKeys.SHARED_FS_ID]["Value"] == {"Ref": fs_id}
    assert outputs[OutputKeys.SHARED_FS_DNS_NAME]["Value"] == {"Fn::GetAtt": [fs_id, "DNSName"]}
    assert outputs[OutputKeys.SHARED_FS_MOUNT_NAME]["Value"] == {
        "Fn::GetAtt": [fs_id, "LustreMountName"]}


@pytest.mark.parametrize("example", EXAMPLES)
def test_fsx_csi_driver_addon_with_pod_identity(synth, example):
    s = synth(example)
    t = s.template("cluster")
    (addon,) = [r for r in resources(t, "AWS::EKS::Addon").values()
                if r["Properties"]["AddonName"] == "aws-fsx-csi-driver"]
    (assoc,) = addon["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == FSX_CSI_CONTROLLER_SERVICE_ACCOUNT
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    role = t["Resources"][role_id]["Properties"]
    trust = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    # Static provisioning only: the controller makes no FSx call, so its role holds nothing.
    assert "ManagedPolicyArns" not in role and "Policies" not in role
    assert not [r for r in resources(t, "AWS::IAM::Policy").values()
                if {"Ref": role_id} in r["Properties"]["Roles"]]
    # The controller's role arrives through Pod Identity: the agent add-on comes first.
    agent = next(k for k, r in resources(t, "AWS::EKS::Addon").items()
                 if r["Properties"]["AddonName"] == "eks-pod-identity-agent")
    assert agent in addon["DependsOn"]


def test_no_shared_file_system_means_no_storage_stacks_and_no_driver(synth_config):
    from infra.config import parse_config

    cfg = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                        "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    s = synth_config(cfg)
    stacks = s.stacks
    assert stacks.storage is None and stacks.storage_access is None
    cluster = s.templates[stacks.cluster.stack_name]
    assert "aws-fsx-csi-driver" not in {
        r["Properties"]["AddonName"] for r in resources(cluster, "AWS::EKS::Addon").values()}

"""Fine-grained CloudFormation assertions on the synthesized stacks."""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES, REPO_ROOT, only, resources
from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import parse_config
from infra.versions import DEFAULT_SYSTEM_ROOT_VOLUME_GIB


def launch_template(synth, example, group):
    s = synth(example)
    return only(s.template("gpu", group), "AWS::EC2::LaunchTemplate")["Properties"][
        "LaunchTemplateData"]


@pytest.mark.parametrize("example,group,count", [
    ("default", "p5", 32), ("p5en-capacity-block", "p5en", 16), ("p6-b200-odcr", "b200", 8)])
def test_efa_interfaces_per_instance_type(synth, example, group, count):
    lt = launch_template(synth, example, group)
    nics = lt["NetworkInterfaces"]
    assert len(nics) == count
    assert (nics[0]["NetworkCardIndex"], nics[0]["DeviceIndex"], nics[0]["InterfaceType"]) == (
        0, 0, "efa")
    for card, nic in enumerate(nics[1:], start=1):
        assert (nic["NetworkCardIndex"], nic["DeviceIndex"], nic["InterfaceType"]) == (
            card, 1, "efa-only")
    assert all(len(nic["Groups"]) == 2 for nic in nics)


def test_instance_type_is_in_launch_template_not_nodegroup(synth):
    s = synth("default")
    lt = launch_template(synth, "default", "p5")
    ng = only(s.template("gpu", "p5"), "AWS::EKS::Nodegroup")["Properties"]
    assert lt["InstanceType"] == "p5.48xlarge"
    assert "InstanceTypes" not in ng
    assert ng["AmiType"] == "AL2023_x86_64_NVIDIA"


def test_aws_eks_v2_rejects_p5_in_instance_types():
    """Pins why the instance type lives in the launch template (see EfaNodeGroup).

    If a future aws-cdk-lib accepts this, the workaround can go.
    """
    from aws_cdk import Stack
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_eks_v2 as eks

    from stacks.kit import make_app
    stack = Stack(make_app(), "Probe")
    cluster = eks.Cluster(stack, "C", version=eks.KubernetesVersion.V1_34, default_capacity=0,
                          default_capacity_type=eks.DefaultCapacityType.NODEGROUP)
    with pytest.raises(Exception, match="AMI does not match the instance types architecture"):
        eks.Nodegroup(stack, "N", cluster=cluster, ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
                      instance_types=[ec2.InstanceType("p5.48xlarge")])


def test_efa_security_group_allows_all_traffic_to_and_from_itself(synth):
    t = synth("default").template("gpu", "p5")
    (sg_id, sg), = resources(t, "AWS::EC2::SecurityGroup").items()
    ingress = only(t, "AWS::EC2::SecurityGroupIngress")["Properties"]
    egress = only(t, "AWS::EC2::SecurityGroupEgress")["Properties"]
    ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    assert ingress["IpProtocol"] == "-1" and ingress["SourceSecurityGroupId"] == ref
    assert ingress["GroupId"] == ref
    assert egress["IpProtocol"] == "-1" and egress["DestinationSecurityGroupId"] == ref
    assert egress["GroupId"] == ref
    # No other egress: the only way out of the EFA group is to itself (and the cluster SG).
    assert "SecurityGroupEgress" not in sg["Properties"] or all(
        e.get("CidrIp") == "255.255.255.255/32" for e in sg["Properties"]["SecurityGroupEgress"])


def _private_subnet_refs_by_az(s, az):
    """Logical IDs (in the network template) of private subnets in ``az``."""
    net = s.template("network")
    return {lid for lid, r in resources(net, "AWS::EC2::Subnet").items()
            if r["Properties"]["AvailabilityZone"] == az
            and not r["Properties"].get("MapPublicIpOnLaunch", False)
            and "private" in lid}


@pytest.mark.parametrize("example,group", [("default", "p5"), ("p5en-capacity-block", "p5en"),
                                           ("p6-b200-odcr", "b200")])
def test_exactly_one_subnet_in_the_groups_az(synth, example, group):
    s = synth(example)
    ng = only(s.template("gpu", group), "AWS::EKS::Nodegroup")["Properties"]
    (subnet,) = ng["Subnets"]
    import_name = subnet["Fn::ImportValue"]
    wanted = _private_subnet_refs_by_az(s, s.config.gpu_node_groups[group].availability_zone)
    assert len(wanted) == 1
    assert next(iter(wanted)) in import_name


def test_existing_vpc_subnet_is_the_configured_one(synth):
    s = synth("existing-vpc")
    ng = only(s.template("gpu", "p5"), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["Subnets"] == ["subnet-0a1b2c3d4e5f60001"]
    assert s.config.vpc.existing is not None
    assert names.stack_names(s.config.name)["network"] not in s.templates


@pytest.mark.parametrize("example,group,present", [
    ("default", "p5", True), ("p5en-capacity-block", "p5en", False), ("p6-b200-odcr", "b200", False)])
def test_placement_group_as_configured(synth, example, group, present):
    """A new cluster placement group for on-demand groups only (eksctl PR 8220, terraform-aws-eks
    PR 3730: a forced one can conflict with a reservation)."""
    t = synth(example).template("gpu", group)
    pgs = resources(t, "AWS::EC2::PlacementGroup")
    lt = launch_template(synth, example, group)
    assert bool(pgs) is present
    if present:
        (pg_id, pg), = pgs.items()
        assert pg["Properties"]["Strategy"] == "cluster"
        assert lt["Placement"] == {"GroupName": {"Ref": pg_id}}
    elif synth(example).config.gpu_node_groups[group].placement_group_name is None:
        assert "Placement" not in lt


def test_existing_placement_group_is_selected_by_name(synth):
    s = synth("p6-b200-odcr")
    name = s.config.gpu_node_groups["b200"].placement_group_name
    assert name
    assert launch_template(synth, "p6-b200-odcr", "b200")["Placement"] == {"GroupName": name}
    assert not resources(s.template("gpu", "b200"), "AWS::EC2::PlacementGroup")


@pytest.mark.parametrize("example,group,reserved", [
    ("default", "p5", False), ("p5en-capacity-block", "p5en", True), ("p6-b200-odcr", "b200", True)])
def test_update_strategy_needs_no_surge_for_reserved_capacity(synth, example, group, reserved):
    ng = only(synth(example).template("gpu", group), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["ForceUpdateEnabled"] is False  # never evict running jobs unless asked
    assert ng["NodeRepairConfig"] == {"Enabled": True}
    if reserved:
        assert ng["UpdateConfig"] == {"MaxUnavailablePercentage": 100, "UpdateStrategy": "MINIMAL"}
    else:
        assert ng["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "MINIMAL"}


def test_an_on_demand_update_surges_no_extra_gpu_node(synth):
    """Upstream failure: EKS's default update strategy launches the replacement nodes first, so an
    update of an on-demand p5 group asks for p5s beyond the group's size, in its cluster placement
    group (InsufficientInstanceCapacity when it has no room) and against the P-instance vCPU quota
    that preflight sized for desired_size. MINIMAL, one node at a time, needs none."""
    s = synth("default")
    group = s.config.gpu_node_groups["p5"]
    assert group.capacity.type == "on-demand" and group.uses_placement_group
    ng = only(s.template("gpu", "p5"), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["UpdateConfig"]["UpdateStrategy"] == "MINIMAL"
    assert ng["UpdateConfig"]["MaxUnavailable"] == 1
    assert "MaxUnavailablePercentage" not in ng["UpdateConfig"]


def test_gpu_nodes_reserve_the_huge_pages_the_pods_request(synth):
    lt = launch_template(synth, "default", "p5")
    user_data = lt["UserData"]["Fn::Base64"]
    pages = names.HUGEPAGES_2MI_MIB // 2
    assert f"sysctl -w vm.nr_hugepages={pages}" in user_data
    assert "Content-Type: text/x-shellscript" in user_data
    assert "strategy: RAID0" in user_data


def test_gpu_nodes_carry_the_nvidia_gpu_present_label(synth):
    ng = only(synth("default").template("gpu", "p5"), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["Labels"][names.NVIDIA_GPU_PRESENT_LABEL] == "true"


def test_capacity_block_wiring(synth):
    s = synth("p5en-capacity-block")
    lt = launch_template(synth, "p5en-capacity-block", "p5en")
    ng = only(s.template("gpu", "p5en"), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["CapacityType"] == "CAPACITY_BLOCK"
    assert lt["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert lt["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}


def test_odcr_wiring(synth):
    s = synth("p6-b200-odcr")
    lt = launch_template(synth, "p6-b200-odcr", "b200")
    ng = only(s.template("gpu", "b200"), "AWS::EKS::Nodegroup")["Properties"]
    assert ng["CapacityType"] == "ON_DEMAND"
    assert "InstanceMarketOptions" not in lt
    assert lt["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0fedcba9876543210"}


def test_on_demand_has_no_reservation(synth):
    lt = launch_template(synth, "default", "p5")
    assert "CapacityReservationSpecification" not in lt
    assert "InstanceMarketOptions" not in lt


def test_imdsv2_encrypted_root_and_raid0_user_data(synth):
    lt = launch_template(synth, "p6-b200-odcr", "b200")
    assert lt["MetadataOptions"]["HttpTokens"] == "required"
    (bdm,) = lt["BlockDeviceMappings"]
    assert bdm["Ebs"] == {"VolumeSize": 300, "VolumeType": "gp3", "Encrypted": True,
                          "DeleteOnTermination": True}
    user_data = lt["UserData"]["Fn::Base64"]
    assert "application/node.eks.aws" in user_data
    assert "strategy: RAID0" in user_data


def test_gpu_taint_and_labels(synth):
    s = synth("p5-2node")
    ng = only(s.template("gpu", "p5"), "AWS::EKS::Nodegroup")["Properties"]
    # The FSx CSI startup taint last (tests/ops/test_fsx_startup_taint.py).
    assert ng["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": names.GPU_TAINT.key,
                             "Value": names.GPU_TAINT.value},
                            {"Effect": "NO_EXECUTE", "Key": names.FSX_AGENT_NOT_READY_TAINT.key}]
    assert ng["Labels"] == {
        "team.example.com/owner": "rl-research",
        names.NODE_ROLE_LABEL: names.NODE_ROLE_GPU,
        names.EFA_LABEL: "true",
        names.NODE_GROUP_LABEL: "p5",
        names.NVIDIA_GPU_PRESENT_LABEL: "true",
    }
    assert (ng["ScalingConfig"]["MinSize"], ng["ScalingConfig"]["DesiredSize"],
            ng["ScalingConfig"]["MaxSize"]) == (0, 2, 4)


def test_system_nodegroup_is_not_gpu(synth):
    t = synth("default").template("cluster")
    ng = only(t, "AWS::EKS::Nodegroup")["Properties"]
    assert ng["AmiType"] == "AL2023_x86_64_STANDARD"
    assert ng["InstanceTypes"] == ["m7i.xlarge"]
    assert ng["Labels"] == {names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM}
    assert "Taints" not in ng


def test_cluster_settings(synth):
    s = synth("p5-2node")
    t = s.template("cluster")
    c = only(t, "AWS::EKS::Cluster")["Properties"]
    assert c["Version"] == "1.35"
    assert c["AccessConfig"] == {"AuthenticationMode": "API",
                                 "BootstrapClusterCreatorAdminPermissions": False}
    assert {x["Type"] for x in c["Logging"]["ClusterLogging"]["EnabledTypes"]} == {
        "api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert c["EncryptionConfig"][0]["Resources"] == ["secrets"]
    vpc_cfg = c["ResourcesVpcConfig"]
    assert vpc_cfg["EndpointPrivateAccess"] is True
    assert vpc_cfg["EndpointPublicAccess"] is True
    assert vpc_cfg["PublicAccessCidrs"] == ["203.0.113.0/24"]
    addons = {r["Properties"]["AddonName"] for r in resources(t, "AWS::EKS::Addon").values()}
    assert {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent",
            "eks-node-monitoring-agent"} <= addons
    (entry,) = [e for e in resources(t, "AWS::EKS::AccessEntry").values()
                if e["Properties"]["PrincipalArn"] == "arn:aws:iam::123456789012:role/PlatformAdmin"]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(
        entry["Properties"]["AccessPolicies"][0]["PolicyArn"])


@pytest.mark.parametrize("example", ["default", "p5-2node"])
def test_kubernetes_access_is_admin_role_arns_and_the_kubectl_handler_only(synth, example):
    """What docs/operations.md ("Security: the defaults") says: an access entry for each of
    admin_role_arns, and one more, cluster admin, for the role of CDK's kubectl handler Lambda
    (it applies the charts and manifests at every deploy); no other principal."""
    s = synth(example)
    t = s.template("cluster")
    entries = [e["Properties"] for e in resources(t, "AWS::EKS::AccessEntry").values()]
    literal = sorted(e["PrincipalArn"] for e in entries if isinstance(e["PrincipalArn"], str))
    assert literal == sorted(s.config.admin_role_arns)
    others = [e for e in entries if not isinstance(e["PrincipalArn"], str)]
    assert len(others) == 1
    (role,) = [v for v in json.dumps(others[0]["PrincipalArn"]).split('"') if "Role" in v]
    assert "KubectlProviderHandlerServiceRole" in role
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(others[0]["AccessPolicies"])


def test_private_endpoint(synth):
    c = only(synth("existing-vpc").template("cluster"), "AWS::EKS::Cluster")["Properties"]
    assert c["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert c["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True


def test_vpc_azs_subnets_nat_and_s3_endpoint(synth):
    s = synth("p5-2node")
    t = s.template("network")
    vpc = only(t, "AWS::EC2::VPC")["Properties"]
    assert vpc["CidrBlock"] == "10.20.0.0/16"
    subnets = resources(t, "AWS::EC2::Subnet").values()
    assert sorted({x["Properties"]["AvailabilityZone"] for x in subnets}) == s.config.availability_zones
    masks = sorted(x["Properties"]["CidrBlock"].split("/")[1] for x in subnets)
    assert masks == ["19"] * 3 + ["24"] * 3
    assert len(resources(t, "AWS::EC2::NatGateway")) == 2
    endpoint = only(t, "AWS::EC2::VPCEndpoint")["Properties"]
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert "s3" in json.dumps(endpoint["ServiceName"])


def test_data_bucket_hardening(synth):
    t = synth("default").template("data")
    buckets = resources(t, "AWS::S3::Bucket")
    (data_id, data), = [(k, v) for k, v in buckets.items() if "DataBucket" in k]
    p = data["Properties"]
    assert p["VersioningConfiguration"] == {"Status": "Enabled"}
    assert p["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True}
    assert p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    rules = {r["Id"]: r for r in p["LifecycleConfiguration"]["Rules"]}
    assert rules["abort-incomplete-multipart"]["AbortIncompleteMultipartUpload"] == {
        "DaysAfterInitiation": 7}
    assert rules["expire-noncurrent-versions"]["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": 30}
    # every distinct build context is a new key under image-builds/: they expire, nothing else
    assert rules["expire-image-build-contexts"] == {
        "Id": "expire-image-build-contexts", "Prefix": "image-builds/", "ExpirationInDays": 14,
        "Status": "Enabled"}
    assert data["DeletionPolicy"] == "Retain"
    policy = [r for r in resources(t, "AWS::S3::BucketPolicy").values()
              if r["Properties"]["Bucket"] == {"Ref": data_id}][0]
    (deny,) = [st for st in policy["Properties"]["PolicyDocument"]["Statement"]
               if st["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Action"] == "s3:*"


def test_kms_bucket_option(synth):
    t = synth("p5-2node").template("data")
    (data,) = [v for k, v in resources(t, "AWS::S3::Bucket").items() if "DataBucket" in k]
    enc = data["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert enc["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert only(t, "AWS::KMS::Key")["Properties"]["EnableKeyRotation"] is True


def test_ecr_repository(synth):
    # The trainer's repository; the image build's cache repository is tested in test_image_build.
    (repo,) = [v for k, v in resources(synth("default").template("data"),
                                       "AWS::ECR::Repository").items() if "TrainerImage" in k]
    assert repo["Properties"]["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert repo["Properties"]["ImageTagMutability"] == "IMMUTABLE"
    assert repo["DeletionPolicy"] == "Retain"


def test_ephemeral_destroys_data(synth):
    t = synth("ci-ephemeral").template("data")
    for r in list(resources(t, "AWS::S3::Bucket").values()) + list(
            resources(t, "AWS::ECR::Repository").values()):
        assert r["DeletionPolicy"] == "Delete"


def test_an_ephemeral_environment_keeps_nothing_after_its_stacks(synth):
    """Every resource of an ephemeral environment goes with its stack: a kept one outlives the
    environment (and its tags make `rlkit teardown` report a leftover and exit 1 on each CI run).
    The VPC flow-log group was CDK's default, retained, until 2026-12-02."""
    s = synth("ci-ephemeral")
    kept = [f"{stack} {lid} ({r['Type']})" for stack, t in s.templates.items()
            for lid, r in t["Resources"].items()
            if "Retain" in (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy"))]
    assert kept == []


def test_pod_identity_role_names_only_its_bucket_prefixes(synth):
    s = synth("p5-2node")
    assoc = only(s.template("cluster"), "AWS::EKS::PodIdentityAssociation")["Properties"]
    assert (assoc["Namespace"], assoc["ServiceAccount"]) == (
        names.TRAINER_NAMESPACE, names.TRAINER_SERVICE_ACCOUNT)
    t = s.template("data")
    (role_id,) = [k for k in resources(t, "AWS::IAM::Role") if k.startswith("TrainerRole")]
    assert role_id in assoc["RoleArn"]["Fn::ImportValue"]
    role = t["Resources"][role_id]["Properties"]
    trust = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    policies = [p for p in resources(t, "AWS::IAM::Policy").values()
                if {"Ref": role_id} in p["Properties"]["Roles"]]
    (policy,) = policies
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    s3_statements = [st for st in statements if any(a.startswith("s3:") for a in _list(st["Action"]))]
    for st in s3_statements:
        for action in _list(st["Action"]):
            assert "*" not in action, action
        text = json.dumps(st["Resource"])
        assert "DataBucket" in text and "AccessLogs" not in text
        if st["Sid"] != "ListOwnPrefixes":
            assert (names.CHECKPOINTS_PREFIX + "*") in text or (names.DATASETS_PREFIX + "*") in text
    by_sid = {st["Sid"]: st for st in s3_statements}
    assert set(by_sid) == {"ListOwnPrefixes", "ReadWriteCheckpoints", "ReadDatasets"}
    assert by_sid["ReadDatasets"]["Action"] == "s3:GetObject"
    # Before: no s3:GetObjectVersion, and the bucket is versioned, so restoring a save (its
    # manifest pins each object's version; the download passes VersionId) was refused: every
    # resume from S3 on the kit's own stack failed.
    # Before: no s3:DeleteObjectVersion nor s3:ListBucketVersions, so a save that keep_s3 pruned
    # from the versioned bucket only got delete markers and stayed stored for
    # storage.noncurrent_version_days; the store now lists and deletes every version of it.
    assert sorted(_list(by_sid["ReadWriteCheckpoints"]["Action"])) == [
        "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:GetObject",
        "s3:GetObjectVersion", "s3:ListMultipartUploadParts", "s3:PutObject"]
    assert sorted(_list(by_sid["ListOwnPrefixes"]["Action"])) == ["s3:ListBucket", "s3:ListBucketVersions"]
    assert by_sid["ListOwnPrefixes"]["Condition"] == {"StringLike": {"s3:prefix": [
        "checkpoints/*", "datasets/*"]}}
    kms = [st for st in statements if any(a.startswith("kms:") for a in _list(st["Action"]))]
    assert kms, "a KMS-encrypted bucket needs key access"
    # what SSE-KMS needs and nothing else (was Encrypt, ReEncrypt* and GenerateDataKey* too)
    assert sorted(a for st in kms for a in _list(st["Action"])) == ["kms:Decrypt",
                                                                   "kms:GenerateDataKey"]


def _list(x):
    return x if isinstance(x, list) else [x]


@pytest.mark.parametrize("example", EXAMPLES)
def test_outputs_for_manifests_and_cli(synth, example):
    s = synth(example)
    cluster = s.template("cluster")["Outputs"]
    for key in (names.OutputKeys.CLUSTER_NAME, names.OutputKeys.REGION,
                names.OutputKeys.CLUSTER_ENDPOINT, names.OutputKeys.KUBECONFIG_COMMAND,
                names.OutputKeys.TRAINER_NAMESPACE, names.OutputKeys.TRAINER_SERVICE_ACCOUNT):
        assert key in cluster, key
    assert cluster[names.OutputKeys.TRAINER_NAMESPACE]["Value"] == names.TRAINER_NAMESPACE
    assert "aws eks update-kubeconfig --region " + s.config.region in json.dumps(
        cluster[names.OutputKeys.KUBECONFIG_COMMAND]["Value"])
    data = s.template("data")["Outputs"]
    assert {names.OutputKeys.BUCKET_NAME, names.OutputKeys.ECR_REPOSITORY_URI,
            names.OutputKeys.TRAINER_ROLE_ARN} <= set(data)
    for group in s.config.gpu_node_groups:
        assert names.OutputKeys.NODEGROUP_NAME in s.template("gpu", group)["Outputs"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_environment_and_ttl_tags(synth, example):
    s = synth(example)
    c = only(s.template("cluster"), "AWS::EKS::Cluster")["Properties"]
    tags = {t["Key"]: t["Value"] for t in c["Tags"]}
    assert tags[names.ENVIRONMENT_TAG] == s.config.name
    if s.config.cost_guard.ttl_hours:
        assert tags[names.TTL_TAG] == str(s.config.cost_guard.ttl_hours)


def test_catalog_drives_interface_count_for_every_example(synth):
    for example in EXAMPLES:
        s = synth(example)
        for group_name, group in s.config.gpu_node_groups.items():
            lt = launch_template(synth, example, group_name)
            itype = INSTANCE_TYPES[group.instance_type]
            # The catalog's layout, interface by interface: every card on p5-p6; p6e-gb200's card
            # 0 plus EFA-only on cards 1, 5, 9, 13 (5 of its 17 cards).
            assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"])
                    for i in lt["NetworkInterfaces"]] == [
                (i.network_card_index, i.device_index, i.interface_type.value)
                for i in itype.interfaces]
            assert len(lt["NetworkInterfaces"]) == 1 + len([c for c in itype.efa_card_indexes if c])


def test_node_monitoring_agent_tolerates_the_gpu_taints_and_coredns_waits_for_nodes(synth):
    t = synth("default").template("cluster")
    addons = {r["Properties"]["AddonName"]: r for r in resources(t, "AWS::EKS::Addon").values()}
    agent = addons["eks-node-monitoring-agent"]["Properties"]
    assert json.loads(agent["ConfigurationValues"]) == {
        "dcgmAgent": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    assert any("NodegroupSystemNodes" in d for d in addons["coredns"]["DependsOn"])


def test_node_health_can_be_turned_off(synth_config):
    cfg = parse_config({"node_health": {"monitoring_agent": False, "auto_repair": False}})
    s = synth_config(cfg)
    stacks = s.stacks
    cluster = s.templates[stacks.cluster.stack_name]
    assert "eks-node-monitoring-agent" not in {
        r["Properties"]["AddonName"] for r in resources(cluster, "AWS::EKS::Addon").values()}
    gpu = s.templates[stacks.gpu["p5"].stack_name]
    repair = only(gpu, "AWS::EKS::Nodegroup")["Properties"].get("NodeRepairConfig")
    assert repair in (None, {"Enabled": False})  # absent = off (EKS default)


def test_system_nodes_disk_is_the_configured_default(synth):
    lt = only(synth("default").template("cluster"), "AWS::EC2::LaunchTemplate")["Properties"]
    assert lt["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == \
        DEFAULT_SYSTEM_ROOT_VOLUME_GIB == 60


def test_default_api_endpoint_is_private_and_public_access_only_for_listed_cidrs(synth):
    vpc_cfg = only(synth("default").template("cluster"), "AWS::EKS::Cluster")["Properties"][
        "ResourcesVpcConfig"]
    assert vpc_cfg["EndpointPublicAccess"] is False and vpc_cfg["EndpointPrivateAccess"] is True
    # The CI example opens it on purpose (and says why in the file).
    ci = only(synth("ci-ephemeral").template("cluster"), "AWS::EKS::Cluster")["Properties"][
        "ResourcesVpcConfig"]
    assert ci["PublicAccessCidrs"] == ["0.0.0.0/0"]
    assert "Open on purpose" in (REPO_ROOT / "examples" / "ci-ephemeral.yaml").read_text()


def test_pods_cannot_reach_imds_on_gpu_nodes(synth):
    for example in EXAMPLES:
        s = synth(example)
        for group in s.config.gpu_node_groups:
            lt = launch_template(synth, example, group)
            assert lt["MetadataOptions"] == {"HttpEndpoint": "enabled",
                                             "HttpPutResponseHopLimit": 1,
                                             "HttpTokens": "required"}


@pytest.mark.parametrize("example", EXAMPLES)
def test_pods_cannot_reach_imds_on_system_nodes_and_their_root_volume_is_encrypted(synth, example):
    """Before: the system group had no launch template, so its nodes got EKS's defaults: hop
    limit 2 (a pod could take the node role through IMDS) and a root volume encrypted only where
    the account's EBS default encryption is on. Now the GPU groups' settings, through a launch
    template the group names; no DiskSize beside it (EKS refuses both) and no fixed group name
    (CloudFormation could not create the replacement of a deployed group under the same name)."""
    from aws_cdk.assertions import Match, Template

    s = synth(example)
    template = Template.from_json(s.template("cluster"))
    template.has_resource_properties("AWS::EC2::LaunchTemplate", {"LaunchTemplateData": {
        "MetadataOptions": {"HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1,
                            "HttpTokens": "required"},
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
            "VolumeSize": s.config.system_nodes.root_volume_gib, "VolumeType": "gp3",
            "Encrypted": True, "DeleteOnTermination": True}}],
    }})
    [(lt_id, _)] = template.find_resources("AWS::EC2::LaunchTemplate").items()
    template.has_resource_properties("AWS::EKS::Nodegroup", {
        "LaunchTemplate": {"Id": {"Ref": lt_id},
                           "Version": {"Fn::GetAtt": [lt_id, "LatestVersionNumber"]}},
        "DiskSize": Match.absent(),
        "NodegroupName": Match.absent(),
    })
    # The same settings as every GPU group's (one source: infra/constructs/node_hardening.py).
    system = only(s.template("cluster"), "AWS::EC2::LaunchTemplate")["Properties"][
        "LaunchTemplateData"]
    for group in s.config.gpu_node_groups:
        gpu = launch_template(synth, example, group)
        assert gpu["MetadataOptions"] == system["MetadataOptions"]
        assert {k: v for k, v in gpu["BlockDeviceMappings"][0]["Ebs"].items() if k != "VolumeSize"} \
            == {k: v for k, v in system["BlockDeviceMappings"][0]["Ebs"].items() if k != "VolumeSize"}


def test_vpc_cni_enforces_network_policies_and_takes_the_pod_address_targets(synth):
    def cni_values(example):
        t = synth(example).template("cluster")
        (cni,) = [r for r in resources(t, "AWS::EKS::Addon").values()
                  if r["Properties"]["AddonName"] == "vpc-cni"]
        return json.loads(cni["Properties"]["ConfigurationValues"])

    assert cni_values("default") == {"enableNetworkPolicy": "true"}
    # vpc.pod_addresses becomes the aws-node environment, as strings (the add-on's "env" map)
    assert cni_values("existing-vpc") == {"enableNetworkPolicy": "true", "env": {
        "WARM_IP_TARGET": "2", "MINIMUM_IP_TARGET": "12"}}


def test_a_user_tag_cannot_replace_the_environment_tag(synth_config):
    cfg = parse_config({"tags": {"team": "rl"}})
    s = synth_config(cfg)
    template = s.templates[s.stacks.data.stack_name]
    bucket = next(iter(resources(template, "AWS::S3::Bucket").values()))
    tags = {t["Key"]: t["Value"] for t in bucket["Properties"]["Tags"]}
    assert tags[names.ENVIRONMENT_TAG] == cfg.name and tags["team"] == "rl"


@pytest.mark.parametrize("example, reads", [("p5en-capacity-block", True), ("default", False)])
def test_the_trainer_may_read_its_capacity_blocks_end_and_nothing_more(synth, example, reads):
    """Upstream failure: a Capacity Block can be extended, and manifests applied without `rlkit
    launch` carry no end; without ec2:DescribeCapacityReservations the launcher cannot learn the
    end and EKS drains the nodes 40 minutes before it with no save taken (EKS user guide,
    capacity-blocks-mng). Only configs with a Capacity Block grant it."""
    t = synth(example).template("data")
    (role_id,) = [k for k in resources(t, "AWS::IAM::Role") if k.startswith("TrainerRole")]
    (policy,) = [p for p in resources(t, "AWS::IAM::Policy").values()
                 if {"Ref": role_id} in p["Properties"]["Roles"]]
    ec2 = [st for st in policy["Properties"]["PolicyDocument"]["Statement"]
           if any(a.startswith("ec2:") for a in _list(st["Action"]))]
    if reads:
        assert ec2 == [{"Sid": "ReadCapacityBlockEnd", "Action": "ec2:DescribeCapacityReservations",
                        "Effect": "Allow", "Resource": "*"}]
    else:
        assert ec2 == []

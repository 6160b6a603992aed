"""Preflight: what the next deploy would do to the running nodes of the node groups
(ops/preflight_nodegroups.py): a GPU group's nodes rolled by a new launch template version (tags,
root volume), a GPU group or the system group replaced (create-only properties). The deployed
templates are the kit's own, synthesized; botocore's Stubber answers the AWS calls (requests and
answers checked against the services' models); the create-only properties come from the
CloudFormation resource schemas cfn-lint ships."""

from __future__ import annotations

import json
from importlib import resources as importlib_resources

import yaml

from infra.catalog import INSTANCE_TYPES
from infra.config import parse_config
from infra.config.derived import resource_tags
from infra.problems import FAIL, PASS, WARN
from ops import preflight_nodegroups as png
from ops.preflight_reads import PreflightReads
from tests.support import REPO_ROOT
from tests.support.cdk import only
from tests.support.preflight import reads, stubbed


def create_only(resource_type: str) -> set[str]:
    """A CloudFormation resource type's create-only properties, from the schema cfn-lint ships."""
    schemas = importlib_resources.files("cfnlint.data.schemas")
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    schema = json.loads((schemas / "resources" / f"{index[resource_type]}.json").read_text())
    return set(schema["createOnlyProperties"])


def example(name: str, **over) -> dict:
    raw = yaml.safe_load((REPO_ROOT / "examples" / f"{name}.yaml").read_text())
    return {**raw, **over}


def with_group(raw: dict, group: str, **over) -> dict:
    return {**raw, "gpu_node_groups": {**raw["gpu_node_groups"],
                                       group: {**raw["gpu_node_groups"][group], **over}}}


SUBNET = "subnet-0123456789abcdef0"


def deployed_gpu(stack: str, template: dict, desired: int = 2, zone: str = "us-east-1a",
                 eks_error: str | None = None, version: str | None = None) -> PreflightReads:
    """Reads answering for the deployed GPU stack ``stack``: GetTemplate returns
    ``template``, its node group (physical ID <cluster>/<node group>) runs at ``desired`` nodes
    in one subnet of ``zone`` (at Kubernetes ``version``, when given)."""
    cfn, cfn_stub = stubbed("cloudformation")
    eks, eks_stub = stubbed("eks")
    ec2, ec2_stub = stubbed("ec2")
    cfn_stub.add_response("get_template", {"TemplateBody": json.dumps(template)}, {"StackName": stack})
    cfn_stub.add_response("describe_stack_resources", {"StackResources": [
        {"LogicalResourceId": "EfaNodeGroupNodegroup3B02DA54", "PhysicalResourceId": "c/ng-1",
         "ResourceType": "AWS::EKS::Nodegroup", "Timestamp": "2026-11-01T00:00:00Z",
         "ResourceStatus": "CREATE_COMPLETE"}]}, {"StackName": stack})
    params = {"clusterName": "c", "nodegroupName": "ng-1"}
    if eks_error:
        eks_stub.add_client_error("describe_nodegroup", "AccessDeniedException", eks_error,
                                  expected_params=params)
    else:
        eks_stub.add_response("describe_nodegroup", {"nodegroup": {
            "nodegroupName": "ng-1", "clusterName": "c", "subnets": [SUBNET],
            "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": desired},
            **({"version": version} if version else {})}}, params)
    if desired and not eks_error:
        ec2_stub.add_response("describe_subnets", {"Subnets": [
            {"SubnetId": SUBNET, "AvailabilityZone": zone}]}, {"SubnetIds": [SUBNET]})
    for stub in (cfn_stub, eks_stub, ec2_stub):
        stub.activate()
    return reads(cloudformation=cfn, eks=eks, ec2=ec2)


def checks_of(clients: PreflightReads, raw: dict, group: str) -> dict[str, object]:
    cfg = parse_config(raw)
    return {c.name: c for c in png.gpu_group_checks(clients, cfg, group, cfg.gpu_node_groups[group])}


# --- the real artifacts --------------------------------------------------------------------------


def test_what_the_checks_compare_is_create_only_and_a_launch_template_change_an_update():
    """The real AWS::EKS::Nodegroup schema: subnets, capacity type, AMI type, and (the system
    group's) instance types and disk size are create-only, so changing one replaces the group
    (dropping the DiskSize of a system group deployed before its launch template too);
    the launch template's data and the group's launch template reference are not, so a changed
    template is a new version the group is updated (rolled) to."""
    assert {"/properties/Subnets", "/properties/CapacityType", "/properties/AmiType",
            "/properties/InstanceTypes", "/properties/DiskSize"} <= create_only("AWS::EKS::Nodegroup")
    assert "/properties/LaunchTemplate" not in create_only("AWS::EKS::Nodegroup")
    assert "/properties/LaunchTemplateData" not in create_only("AWS::EC2::LaunchTemplate")
    # What the system group check's replacement message rests on, in EKS's own model.
    import botocore.session
    shapes = botocore.session.get_session().get_service_model("eks")
    update = shapes.shape_for("UpdateNodegroupVersionRequest").members["launchTemplate"]
    assert "only update a node group using a launch template if the node group was originally " \
           "deployed with a launch template" in update.documentation
    create = shapes.shape_for("CreateNodegroupRequest").members["diskSize"]
    assert "If you specify <code>launchTemplate</code>, then don't specify <code>diskSize</code>" \
        in create.documentation


def test_the_templates_carry_the_config_values_the_checks_compare(synth):
    """The synthesized stacks set what the checks compare straight from the config: the launch
    template's instance tags and root volume, the node group's capacity and AMI type, the system
    group's instance type and disk size."""
    for name, group in (("default", "p5"), ("p6-b200-odcr", "b200"),
                        ("p6e-gb200-ultraserver", "gb200")):
        s = synth(name)
        g = s.config.gpu_node_groups[group]
        data = only(s.template("gpu", group), "AWS::EC2::LaunchTemplate")["Properties"][
            "LaunchTemplateData"]
        [instance] = [t for t in data["TagSpecifications"] if t["ResourceType"] == "instance"]
        assert {t["Key"]: t["Value"] for t in instance["Tags"]} == {
            **resource_tags(s.config), "rlkit:node-group": group}
        assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == g.root_volume_gib
        ng = only(s.template("gpu", group), "AWS::EKS::Nodegroup")["Properties"]
        assert ng["CapacityType"] == png.CAPACITY_TYPES[g.capacity.type]
        assert ng["AmiType"] == INSTANCE_TYPES[g.instance_type].ami_type
        system = only(s.template("cluster"), "AWS::EKS::Nodegroup")["Properties"]
        system_lt = only(s.template("cluster"), "AWS::EC2::LaunchTemplate")["Properties"][
            "LaunchTemplateData"]
        assert system["InstanceTypes"] == [s.config.system_nodes.instance_type]
        assert system_lt["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == \
            s.config.system_nodes.root_volume_gib


# --- a GPU group's launch template ---------------------------------------------------------------


def test_a_tag_change_on_an_odcr_group_rolls_its_running_nodes(synth):
    """Before: an ODCR group (no placement group of the kit's) got a new launch template version
    from a `tags` edit and EKS rolled every node under the job, with nothing warning."""
    s = synth("p6-b200-odcr")
    stack = "b200-odcr-gpu-b200"
    same = checks_of(deployed_gpu(stack, s.template("gpu", "b200"), zone="us-west-2a"),
                     example("p6-b200-odcr"), "b200")
    assert {n: c.status for n, c in same.items()} == {png.NODE_ROLL: PASS, png.NODEGROUP_KEPT: PASS}
    tagged = checks_of(deployed_gpu(stack, s.template("gpu", "b200"), zone="us-west-2a"),
                       example("p6-b200-odcr", tags={"team": "ml"}), "b200")
    roll = tagged[png.NODE_ROLL]
    assert (roll.status, roll.subject) == (WARN, f"gpu_node_groups.b200 ({stack})")
    assert roll.detail == (
        "the deploy gives the group's launch template a new version (instance tags team: (none) "
        "-> ml), and EKS replaces each of the 2 nodes of node group ng-1 in a rolling update: the "
        "RL job's disruption budget stops the drain, so the update fails after EKS's drain "
        "timeout and CloudFormation rolls the deploy back (force_update is off)")
    assert roll.fix == ("deploy when no job runs on the group (rlkit status), or keep tags and "
                        "cost_guard.ttl_hours as deployed")
    assert tagged[png.NODEGROUP_KEPT].status == PASS


def test_a_root_volume_change_rolls_the_nodes_and_force_update_evicts_the_job(synth):
    """A group with the kit's placement group: its tag change is the placement group check's
    (the same roll), its root volume this check's."""
    s = synth("default")
    stack = "moe-rl-gpu-p5"
    raw = with_group(example("default"), "p5", root_volume_gib=400, force_update=True)
    raw["tags"] = {"team": "ml"}
    roll = checks_of(deployed_gpu(stack, s.template("gpu", "p5")), raw, "p5")[png.NODE_ROLL]
    assert roll.status == WARN
    assert roll.detail.startswith("the deploy gives the group's launch template a new version "
                                  "(root volume 200 -> 400 GiB), and EKS replaces each of the 2 ")
    assert roll.detail.endswith(": force_update is on, so the drain evicts the job's pods")
    assert roll.fix.endswith("or keep gpu_node_groups.p5.root_volume_gib: 200 as deployed")
    tags_only = checks_of(deployed_gpu(stack, s.template("gpu", "p5")),
                          example("default", tags={"team": "ml"}), "p5")[png.NODE_ROLL]
    assert (tags_only.status, tags_only.detail) == (
        PASS, "the deploy does not change the root volume of the group's launch template (its "
        "tags: the placement group kept check)")


def test_a_kubernetes_version_change_rolls_the_nodes_and_with_a_new_launch_template_fails(synth):
    """Before: nothing said that moving kubernetes_version rolls a running GPU group (the kit now
    names it as the group's Version), nor that CloudFormation refuses that Version change
    together with a new launch template version in one update."""
    s = synth("default")
    stack = "moe-rl-gpu-p5"
    moved = checks_of(deployed_gpu(stack, s.template("gpu", "p5"), version="1.34"),
                      example("default"), "p5")[png.NODE_ROLL]
    assert moved.status == WARN
    assert moved.detail.startswith(
        "the deploy moves node group ng-1 from Kubernetes 1.34 to 1.35 (the kit names "
        "kubernetes_version as each group's Version), and EKS replaces each of its 2 nodes in a "
        "rolling update: the RL job's disruption budget stops the drain")
    both = checks_of(deployed_gpu(stack, s.template("gpu", "p5"), version="1.34"),
                     with_group(example("default"), "p5", root_volume_gib=400), "p5")[png.NODE_ROLL]
    assert both.status == FAIL
    assert "(root volume 200 -> 400 GiB) in one update, which CloudFormation refuses" in both.detail
    assert both.fix == ("keep gpu_node_groups.p5.root_volume_gib: 200 as deployed in this deploy, "
                        "and make that change in a deploy of its own after it")
    same = checks_of(deployed_gpu(stack, s.template("gpu", "p5"), version="1.35"),
                     example("default"), "p5")[png.NODE_ROLL]
    assert same.status == PASS


def test_a_group_without_nodes_passes_and_a_capacity_block_group_is_left_to_its_own_check(synth):
    s = synth("default")
    raw = with_group(example("default", tags={"team": "ml"}), "p5", availability_zone="us-east-1b",
                     root_volume_gib=400)
    checks = checks_of(deployed_gpu("moe-rl-gpu-p5", s.template("gpu", "p5"), desired=0), raw, "p5")
    assert [(c.status, c.detail) for c in checks.values()] == [(
        PASS, "node group ng-1 has no nodes (desired size 0): a deploy that rolls or replaces it "
        "stops no job")]
    cb = parse_config(example("p5en-capacity-block"))
    [(name, group)] = cb.gpu_node_groups.items()
    assert png.gpu_group_checks(reads(), cb, name, group) == []  # no AWS call made


def test_a_gpu_stack_not_deployed_passes_and_an_unreadable_group_warns(synth):
    cfn, stub = stubbed("cloudformation")
    stub.add_client_error("get_template", "ValidationError", "Stack with id moe-rl-gpu-p5 does not exist",
                          expected_params={"StackName": "moe-rl-gpu-p5"})
    stub.activate()
    [check] = png.gpu_group_checks(reads(cloudformation=cfn), parse_config(example("default")),
                                   "p5", parse_config(example("default")).gpu_node_groups["p5"])
    assert (check.status, check.detail) == (
        PASS, "moe-rl-gpu-p5 is not deployed: the first deploy creates the node group")
    checks = checks_of(deployed_gpu("moe-rl-gpu-p5", synth("default").template("gpu", "p5"),
                                    eks_error="not allowed"), example("default"), "p5")
    [check] = checks.values()
    assert check.status == WARN and check.detail.startswith(
        "cannot read the nodes of moe-rl-gpu-p5's node group: ")
    assert check.fix == ("allow cloudformation:GetTemplate, cloudformation:DescribeStackResources, "
                         "eks:DescribeNodegroup and ec2:DescribeSubnets, then run preflight again")


# --- a GPU group's node group replaced -----------------------------------------------------------


def test_moving_an_on_demand_groups_zone_while_its_placement_group_stays_fails(synth):
    """Before: the deploy created the replacement group in us-east-1b, launching into the
    cluster placement group the old group's running nodes held in us-east-1a."""
    s = synth("default")
    raw = with_group(example("default"), "p5", availability_zone="us-east-1b")
    check = checks_of(deployed_gpu("moe-rl-gpu-p5", s.template("gpu", "p5")), raw, "p5")[
        png.NODEGROUP_KEPT]
    assert check.status == FAIL
    assert check.detail == (
        "a deploy would replace node group ng-1: this config changes its zone us-east-1a -> "
        "us-east-1b, which a node group cannot change in place; CloudFormation creates the new "
        "group first, in us-east-1b, in the placement group the kit made for it, which the old "
        "group's 2 nodes hold in us-east-1a: a cluster placement group lies in one AZ, so the new "
        "nodes fail to launch and the deploy rolls back")
    assert check.fix == (
        "keep gpu_node_groups.p5.availability_zone: us-east-1a while the group has nodes; to move "
        "it, stop the run (its last save is in S3), delete moe-rl-gpu-p5 (its node group and "
        "nodes go with it), then deploy: the group is created again in the new zone")
    # with new tags the placement group is replaced too: the move works, the job still dies
    tagged = checks_of(deployed_gpu("moe-rl-gpu-p5", s.template("gpu", "p5")),
                       {**raw, "tags": {"team": "ml"}}, "p5")[png.NODEGROUP_KEPT]
    assert tagged.status == WARN
    assert tagged.detail.endswith(
        "CloudFormation creates a new group, then deletes this one: EKS drains each of its 2 nodes "
        "for at most 5 minutes and terminates it, whatever the RL job's disruption budget says, so "
        "the run on them dies")


def test_moving_an_odcr_groups_zone_in_its_existing_placement_group_fails(synth):
    s = synth("p6-b200-odcr")
    raw = with_group(example("p6-b200-odcr"), "b200", availability_zone="us-west-2b")
    check = checks_of(deployed_gpu("b200-odcr-gpu-b200", s.template("gpu", "b200"), zone="us-west-2a"),
                      raw, "b200")[png.NODEGROUP_KEPT]
    assert check.status == FAIL and "in placement group b200-odcr-cluster, which the old" in check.detail


def test_a_capacity_block_group_turned_on_demand_is_replaced_under_the_job(synth):
    """Before: the block's group became an on-demand one; CloudFormation replaced the node group
    (CapacityType is create-only) and its deletion killed the run, with no Capacity Block check
    left to refuse it (the config's group is no longer one)."""
    s = synth("p5en-capacity-block")
    [(group, g)] = s.config.gpu_node_groups.items()
    raw = with_group(example("p5en-capacity-block"), group,
                     capacity={"type": "on-demand"}, placement_group=False)
    check = checks_of(deployed_gpu(s.config.name + f"-gpu-{group}", s.template("gpu", group),
                                   zone=g.availability_zone), raw, group)[png.NODEGROUP_KEPT]
    assert check.status == WARN
    assert check.detail.startswith(
        "a deploy would replace node group ng-1: this config changes its capacity type "
        "CAPACITY_BLOCK -> ON_DEMAND, which a node group cannot change in place; CloudFormation "
        "creates a new group, then deletes this one")
    assert check.fix == (
        f"keep gpu_node_groups.{group}.capacity.type; to change it, stop the run first (its last "
        "save is in S3; rlkit status), then deploy; or add a group under a new name with the new "
        f"settings, move the run to it, then delete {s.config.name}-gpu-{group}")


def test_an_instance_type_of_another_architecture_replaces_the_group(synth):
    """The deployed group runs arm64 (the AMI type the catalog gives p6e-gb200); an x86_64 type
    in the config changes the create-only AmiType."""
    s = synth("default")
    template = json.loads(json.dumps(s.template("gpu", "p5")))
    only(template, "AWS::EKS::Nodegroup")["Properties"]["AmiType"] = \
        INSTANCE_TYPES["p6e-gb200.36xlarge"].ami_type
    check = checks_of(deployed_gpu("moe-rl-gpu-p5", template), example("default"), "p5")[
        png.NODEGROUP_KEPT]
    assert check.status == WARN
    assert ("this config changes its AMI type AL2023_ARM_64_NVIDIA -> AL2023_x86_64_NVIDIA "
            "(p5.48xlarge)") in check.detail
    assert check.fix.startswith("keep an instance type of AMI type AL2023_ARM_64_NVIDIA;")


# --- the system node group -----------------------------------------------------------------------


def deployed_cluster(stack: str, template: dict | None) -> PreflightReads:
    cfn, stub = stubbed("cloudformation")
    if template is None:
        stub.add_client_error("get_template", "ValidationError", f"Stack with id {stack} does not exist",
                              expected_params={"StackName": stack})
    else:
        stub.add_response("get_template", {"TemplateBody": json.dumps(template)}, {"StackName": stack})
    stub.activate()
    return reads(cloudformation=cfn)


def before_the_system_launch_template(template: dict) -> dict:
    """``template`` (the cluster stack's) as a kit before the system launch template deployed
    it: the system group sized its root volume itself (DiskSize) and named no launch template."""
    old = json.loads(json.dumps(template))
    [(lt_id, lt)] = [(k, r) for k, r in old["Resources"].items()
                     if r["Type"] == "AWS::EC2::LaunchTemplate"]
    group = only(old, "AWS::EKS::Nodegroup")["Properties"]
    assert group.pop("LaunchTemplate")["Id"] == {"Ref": lt_id}
    group["DiskSize"] = lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"][
        "VolumeSize"]
    del old["Resources"][lt_id]
    return old


def test_a_new_system_instance_type_replaces_the_group_and_a_new_root_volume_rolls_it(synth):
    """Before: the deploy replaced the system node group (InstanceTypes is create-only), moving
    the KubeRay operator, the job submitter and CoreDNS mid-run, unwarned. The root volume is the
    launch template's now: a new size is a new template version, which EKS rolls the group to."""
    s = synth("default")
    same = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", s.template("cluster")),
                                       s.config)
    assert (same.status, same.detail) == (PASS, "the system node group stays: m7i.xlarge, 60 GiB")
    cfg = parse_config(example("default", system_nodes={"instance_type": "m7i.2xlarge",
                                                        "root_volume_gib": 300}))
    check = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", s.template("cluster")), cfg)
    assert (check.status, check.subject) == (WARN, "system_nodes (moe-rl-cluster)")
    assert check.detail == (
        "a deploy would replace the system node group: this config changes its instance type "
        "m7i.xlarge -> m7i.2xlarge, which a node group cannot change in place; the KubeRay "
        "operator and CoreDNS move to new nodes, mid-run if one runs")
    assert check.fix == ("deploy it when no job runs (rlkit status), or keep system_nodes."
                         "instance_type: m7i.xlarge")
    disk = parse_config(example("default", system_nodes={"root_volume_gib": 300}))
    roll = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", s.template("cluster")), disk)
    assert (roll.status, roll.detail, roll.fix) == (
        WARN, "a deploy would replace every system node in a rolling update: this config changes "
        "their root volume 60 -> 300 GiB, a new version of their launch template; the KubeRay "
        "operator and CoreDNS move to new nodes, mid-run if one runs",
        "deploy it when no job runs (rlkit status), or keep system_nodes.root_volume_gib: 60")
    new = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", None), cfg)
    assert (new.status, new.detail) == (
        PASS, "moe-rl-cluster is not deployed: the first deploy creates the node group")


def test_a_system_group_deployed_without_a_launch_template_is_replaced_once(synth):
    """Before: the first deploy of the hardened system nodes replaced the running system group
    (EKS cannot give a launch template to a group created without one, and the dropped DiskSize
    is create-only) with nothing saying so; preflight passed ("stays")."""
    s = synth("default")
    old = before_the_system_launch_template(s.template("cluster"))
    assert "DiskSize" not in only(s.template("cluster"), "AWS::EKS::Nodegroup")["Properties"]
    check = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", old), s.config)
    assert (check.status, check.subject) == (WARN, "system_nodes (moe-rl-cluster)")
    assert check.detail == (
        "a deploy would replace the system node group once: system nodes now come from a launch "
        "template (IMDSv2 with one hop, so pods cannot take the node role; an encrypted gp3 root "
        "volume), which a node group created without one cannot be given in place. "
        "CloudFormation creates the new group and waits for its nodes to join, then deletes this "
        "one: EKS drains its nodes for at most 5 minutes each and terminates them. The deploy "
        "takes some 10-20 minutes longer, both groups' nodes run meanwhile, and the KubeRay "
        "operator and CoreDNS move to new nodes, mid-run if one runs")
    assert check.fix == (
        "deploy it when no job runs (rlkit status); it happens once, on the first deploy of a kit "
        "with the system launch template (docs/operations.md, \"IMDS on the system nodes\")")
    assert "### IMDS on the system nodes" in (REPO_ROOT / "docs" / "operations.md").read_text()
    bigger = parse_config(example("default", system_nodes={"instance_type": "m7i.2xlarge"}))
    both = png.check_system_nodes_kept(deployed_cluster("moe-rl-cluster", old), bigger)
    assert both.status == WARN and (
        "cannot be given in place; this config also changes its instance type m7i.xlarge -> "
        "m7i.2xlarge. CloudFormation creates") in both.detail

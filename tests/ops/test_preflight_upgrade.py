"""Preflight of a Kubernetes version change (ops/preflight_upgrade.py): the deployed cluster's
version against the config's, its node groups' versions (EKS UpdateClusterVersion requires them
all at the cluster's), the first deploy of a kit that names each group's Version, and each EKS
add-on's build against those EKS offers for the config's version. botocore's Stubber answers
the AWS calls, so the requests and answers are checked against the EKS and CloudFormation
models; before this module, preflight read none of it and said nothing of an upgrade."""

from __future__ import annotations

import json

from infra.config import parse_config
from infra.problems import FAIL, PASS, WARN
from ops import preflight_upgrade as up
from ops.preflight_reads import PreflightReads
from tests.support.preflight import reads, stubbed

P5 = {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
      "desired_size": 2, "max_size": 2}
CLUSTER = "up"


def config(version: str = "1.35"):
    return parse_config({"name": "up", "kubernetes_version": version,
                         "gpu_node_groups": {"p5": P5},
                         "training": {"node_group": "p5", "nodes": 2}})


def _resource(physical: str) -> dict:
    return {"LogicalResourceId": "Nodegroup", "PhysicalResourceId": physical,
            "ResourceType": "AWS::EKS::Nodegroup", "Timestamp": "2026-11-01T00:00:00Z",
            "ResourceStatus": "UPDATE_COMPLETE"}


def _template(version: str | None) -> str:
    props = {"ClusterName": CLUSTER} | ({"Version": version} if version else {})
    return json.dumps({"Resources": {"Nodegroup": {"Type": "AWS::EKS::Nodegroup",
                                                   "Properties": props}}})


def deployed(cluster: str, groups: dict[str, tuple[str, int]], *, templates: str | None = None,
             read_templates: bool = False, extra: tuple[str, ...] = (),
             addons: dict[str, tuple[str, dict[str, list[dict]]]] | None = None,
             eks_error: str | None = None) -> PreflightReads:
    """A deployed environment "up": cluster ``up`` at Kubernetes ``cluster``; the kit's groups
    ``system`` and ``p5`` (in the cluster and GPU stacks) and any ``extra`` group, each at
    (version, desired size) of ``groups``; with ``read_templates``, both stacks' templates, whose
    node groups name Version ``templates`` (None: none). ``addons``: name -> (running build,
    {Kubernetes version: DescribeAddonVersions' builds}), each asked in the order given."""
    cfn, cfn_stub = stubbed("cloudformation")
    eks, eks_stub = stubbed("eks")
    cfn_stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": "up-cluster", "StackStatus": "UPDATE_COMPLETE",
        "CreationTime": "2026-11-01T00:00:00Z",
        "Outputs": [{"OutputKey": "ClusterName", "OutputValue": CLUSTER}]}]},
        {"StackName": "up-cluster"})
    if eks_error:
        eks_stub.add_client_error("describe_cluster", "AccessDeniedException", eks_error,
                                  expected_params={"name": CLUSTER})
    else:
        eks_stub.add_response("describe_cluster", {"cluster": {"name": CLUSTER, "version": cluster}},
                              {"name": CLUSTER})
        names_ = ["ng-system", "ng-p5", *extra]
        eks_stub.add_response("list_nodegroups", {"nodegroups": names_}, {"clusterName": CLUSTER})
        for n in names_:
            version, desired = groups[n]
            eks_stub.add_response("describe_nodegroup", {"nodegroup": {
                "nodegroupName": n, "clusterName": CLUSTER, "version": version,
                "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": desired}}},
                {"clusterName": CLUSTER, "nodegroupName": n})
    for stack, group in (("up-cluster", "ng-system"), ("up-gpu-p5", "ng-p5")):
        if eks_error:
            break
        cfn_stub.add_response("describe_stack_resources", {"StackResources": [
            _resource(f"{CLUSTER}/{group}")]}, {"StackName": stack})
    if read_templates:
        for stack in ("up-cluster", "up-gpu-p5"):
            cfn_stub.add_response("get_template", {"TemplateBody": _template(templates)},
                                  {"StackName": stack})
    if addons is not None:
        eks_stub.add_response("list_addons", {"addons": list(addons)}, {"clusterName": CLUSTER})
        for name, (running, offered) in addons.items():
            eks_stub.add_response("describe_addon", {"addon": {
                "addonName": name, "clusterName": CLUSTER, "addonVersion": running}},
                {"clusterName": CLUSTER, "addonName": name})
            for version, builds in offered.items():
                eks_stub.add_response("describe_addon_versions", {"addons": [{
                    "addonName": name, "addonVersions": builds}]},
                    {"addonName": name, "kubernetesVersion": version})
    for stub in (cfn_stub, eks_stub):
        stub.activate()
    return reads(cloudformation=cfn, eks=eks)


def build(version: str, *clusters: str, default_for: tuple[str, ...] = ()) -> dict:
    return {"addonVersion": version, "compatibilities": [
        {"clusterVersion": c, "defaultVersion": c in default_for} for c in clusters]}


def addon_checks(clients: PreflightReads, cfg) -> list:
    """The add-on checks of a run (the upgrade check reads the cluster and its groups first, as
    run_preflight does; Stubber answers in order)."""
    return [c for c in up.upgrade_checks(clients, cfg) if c.name == up.ADDON_VERSION]


AT_134 = {"ng-system": ("1.34", 1), "ng-p5": ("1.34", 2)}


def test_an_upgrade_rolls_every_node_group_and_names_the_job():
    """1.34 -> 1.35 with every group at 1.34: the deploy may go, and it replaces every node."""
    check = up.check_kubernetes_upgrade(deployed("1.34", AT_134), config("1.35"))
    assert check.status == WARN
    assert check.detail.startswith(
        "the deploy moves cluster up's control plane from Kubernetes 1.34 to 1.35 (no way back), "
        "then every node group to 1.35: EKS replaces each group's nodes in a rolling update "
        "(ng-system (system_nodes; 1 node), ng-p5 (gpu_node_groups.p5; 2 nodes))")
    assert "disruption budget stops the drain" in check.detail
    # the job submitter runs beside the Ray head, not on the system nodes
    assert "the KubeRay operator and CoreDNS move" in check.detail and "submitter" not in check.detail
    assert "no other change to the node groups in the same deploy" in check.fix
    assert "aws/containers-roadmap#1258" in check.fix


def test_an_upgrade_fails_while_a_node_group_lags_the_cluster():
    """The state a kit without node group Versions left after one upgrade: cluster 1.34, its
    groups still at 1.33. EKS refuses the next control plane upgrade."""
    lagging = {"ng-system": ("1.33", 1), "ng-p5": ("1.33", 2), "ng-other": ("1.33", 1)}
    check = up.check_kubernetes_upgrade(deployed("1.34", lagging, extra=("ng-other",)),
                                        config("1.35"))
    assert check.status == FAIL
    assert check.detail.startswith(
        "cluster up runs Kubernetes 1.34, but node group(s) ng-system (system_nodes; 1 node) at "
        "1.33, ng-p5 (gpu_node_groups.p5; 2 nodes) at 1.33, ng-other (not the kit's; 1 node) at "
        "1.33 do not: EKS UpdateClusterVersion requires every managed node group at the "
        "cluster's version")
    assert check.fix.startswith('first deploy with kubernetes_version: "1.34"')
    assert ("aws eks update-nodegroup-version --cluster-name up --nodegroup-name ng-other "
            "--kubernetes-version 1.34 --region us-east-1") in check.fix
    assert "ng-system --kubernetes-version" not in check.fix  # the deploy moves the kit's own
    assert check.fix.endswith('then set kubernetes_version: "1.35" again '
                              '(docs/operations.md, "Kubernetes upgrades")')


def test_two_minor_versions_at_once_and_a_downgrade_fail():
    two = up.check_kubernetes_upgrade(deployed("1.33", {"ng-system": ("1.33", 1),
                                                        "ng-p5": ("1.33", 0)}), config("1.35"))
    assert two.status == FAIL and "one minor version at a time" in two.detail
    assert two.fix.startswith('set kubernetes_version: "1.34" and deploy')
    back = up.check_kubernetes_upgrade(deployed("1.35", {"ng-system": ("1.35", 1),
                                                         "ng-p5": ("1.35", 0)}), config("1.34"))
    assert back.status == FAIL and "runs Kubernetes 1.35, newer than 1.34" in back.detail
    assert back.fix == 'set kubernetes_version: "1.35"'


def test_a_group_an_older_kit_left_behind_is_moved_by_the_next_deploy():
    """Cluster and config at 1.35, the GPU group at 1.34 (never moved): this kit's template
    names Version 1.35, so the deploy rolls the group."""
    groups = {"ng-system": ("1.35", 1), "ng-p5": ("1.34", 2)}
    check = up.check_kubernetes_upgrade(deployed("1.35", groups), config("1.35"))
    assert check.status == WARN
    assert check.detail.startswith(
        "node group(s) ng-p5 (gpu_node_groups.p5; 2 nodes) at 1.34 run an older Kubernetes "
        "version than cluster up (1.35)")
    assert "the deploy moves them to 1.35, replacing their nodes" in check.detail


def test_the_first_deploy_that_names_version_warns_once_then_passes():
    """Everything at 1.35 but the deployed templates name no Version (a kit before this one):
    the deploy adds it, which may roll the groups; once the templates name it, a pass."""
    at_135 = {"ng-system": ("1.35", 1), "ng-p5": ("1.35", 2)}
    first = up.check_kubernetes_upgrade(deployed("1.35", at_135, read_templates=True),
                                        config("1.35"))
    assert first.status == WARN
    assert first.detail.startswith("the node groups of up-cluster, up-gpu-p5 were deployed by a "
                                   'kit that named no Version: this deploy adds Version "1.35"')
    assert "newest AMI release of that version" in first.detail
    later = up.check_kubernetes_upgrade(
        deployed("1.35", at_135, read_templates=True, templates="1.35"), config("1.35"))
    assert (later.status, later.detail) == (
        PASS, "cluster up and its 2 node group(s) run Kubernetes 1.35, the config's version")


def test_a_cluster_not_deployed_passes_and_an_unreadable_one_warns():
    cfn, stub = stubbed("cloudformation")
    stub.add_client_error("describe_stacks", "ValidationError", "Stack with id up-cluster does "
                          "not exist", expected_params={"StackName": "up-cluster"})
    stub.activate()
    checks = up.upgrade_checks(reads(cloudformation=cfn), config())
    assert [(c.name, c.status) for c in checks] == [(up.KUBERNETES_UPGRADE, PASS),
                                                    (up.ADDON_VERSION, PASS)]
    assert checks[0].detail == ("up-cluster is not deployed: the first deploy creates the "
                                "cluster at Kubernetes 1.35")
    denied = up.check_kubernetes_upgrade(deployed("1.35", {}, eks_error="no"), config())
    assert denied.status == WARN and "eks:DescribeCluster" in denied.fix


def test_an_addon_build_not_offered_for_the_target_fails_with_the_command_that_moves_it():
    """vpc-cni runs a build EKS offers for 1.34 only; a newer one is offered for both: move it
    before the deploy. kube-proxy's build is offered for 1.35 too: a pass that names the
    default to move to after the deploy."""
    addons = {
        "vpc-cni": ("v1.18.0-eksbuild.1", {
            "1.35": [build("v1.20.1-eksbuild.1", "1.35", default_for=("1.35",)),
                     build("v1.19.5-eksbuild.2", "1.35")],
            "1.34": [build("v1.19.5-eksbuild.2", "1.34", default_for=("1.34",)),
                     build("v1.18.0-eksbuild.1", "1.34")]}),
        "kube-proxy": ("v1.34.1-eksbuild.1", {
            "1.35": [build("v1.35.0-eksbuild.2", "1.35", default_for=("1.35",)),
                     build("v1.34.1-eksbuild.1", "1.35")]}),
    }
    checks = {c.subject: c for c in addon_checks(deployed("1.34", AT_134, addons=addons),
                                                 config("1.35"))}
    cni = checks["add-on vpc-cni (cluster up)"]
    assert cni.status == FAIL
    assert cni.detail.startswith("runs v1.18.0-eksbuild.1, which EKS does not offer for "
                                 "Kubernetes 1.35, and EKS does not update an add-on when the "
                                 "cluster moves")
    assert cni.fix.startswith(
        "before deploying, move it to v1.19.5-eksbuild.2, offered for both 1.34 and 1.35: aws eks "
        "update-addon --cluster-name up --addon-name vpc-cni --addon-version v1.19.5-eksbuild.2 "
        "--resolve-conflicts OVERWRITE --region us-east-1")
    proxy = checks["add-on kube-proxy (cluster up)"]
    assert proxy.status == PASS
    assert ("its default for 1.35 is v1.35.0-eksbuild.2: `aws eks update-addon --cluster-name up "
            "--addon-name kube-proxy --addon-version v1.35.0-eksbuild.2") in proxy.detail


def test_an_addon_with_no_build_for_both_versions_is_moved_right_after_the_deploy():
    addons = {"coredns": ("v1.11.1-eksbuild.1", {
        "1.35": [build("v1.12.4-eksbuild.1", "1.35", default_for=("1.35",))],
        "1.34": [build("v1.11.1-eksbuild.1", "1.34", default_for=("1.34",))]})}
    [check] = addon_checks(deployed("1.34", AT_134, addons=addons), config("1.35"))
    assert check.status == WARN
    assert check.fix.startswith(
        "right after the deploy (no build is offered for both 1.34 and 1.35): aws eks "
        "update-addon --cluster-name up --addon-name coredns --addon-version v1.12.4-eksbuild.1")


def test_an_addon_left_behind_by_an_earlier_upgrade_warns_now():
    at_135 = {"ng-system": ("1.35", 1), "ng-p5": ("1.35", 2)}
    addons = {"kube-proxy": ("v1.33.3-eksbuild.1", {
        "1.35": [build("v1.35.0-eksbuild.2", "1.35", default_for=("1.35",))]})}
    [check] = addon_checks(deployed("1.35", at_135, addons=addons), config("1.35"))
    assert check.status == WARN and "(left by an earlier upgrade)" in check.detail
    assert check.fix.startswith("now: aws eks update-addon --cluster-name up --addon-name "
                                "kube-proxy --addon-version v1.35.0-eksbuild.2")


def test_the_standard_support_warning_names_the_next_minor_version_not_the_newest():
    """Before: a cluster at 1.33 was told to set 1.35, two minor versions at once, which EKS
    refuses."""
    from datetime import date

    from infra.versions import standard_support_warning

    warning = standard_support_warning("1.33", date(2026, 11, 30))
    assert 'Fix: set kubernetes_version: "1.34" and deploy' in warning
    assert "docs/operations.md, \"Kubernetes upgrades\"" in warning


def test_the_procedure_the_messages_point_to_exists():
    from tests.support import REPO_ROOT

    assert up.PROCEDURE == 'docs/operations.md, "Kubernetes upgrades"'
    assert "### Kubernetes upgrades" in (REPO_ROOT / "docs" / "operations.md").read_text()

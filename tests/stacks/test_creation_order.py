"""Creation order that AWS requires, read from the synthesized templates.

Each rule names the upstream failure it prevents. CloudFormation creates resources in parallel
unless a reference or a DependsOn orders them, so an order that matters must be in the template.
"""

from __future__ import annotations

import pytest

from tests.support.cdk import EXAMPLES, only, resources


def _depends_on(resource: dict) -> set[str]:
    deps = resource.get("DependsOn", [])
    return {deps} if isinstance(deps, str) else set(deps)


@pytest.mark.parametrize("example", EXAMPLES)
def test_file_system_waits_for_its_own_lustre_rules(synth, example):
    # FSx checks at creation that the file servers reach each other on the Lustre ports; created
    # before the self-referencing rules exist it fails with InvalidNetworkSettings, now and then
    # [aws/aws-parallelcluster#6181, fixed by #6342 with this DependsOn].
    storage = synth(example).template("storage")
    (sg_id,) = resources(storage, "AWS::EC2::SecurityGroup")
    own_rules = {k for k, r in resources(storage, "AWS::EC2::SecurityGroupIngress").items()
                 if r["Properties"]["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}
                 and r["Properties"]["SourceSecurityGroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}}
    assert len(own_rules) == 2  # 988 and 1018-1023
    fs = only(storage, "AWS::FSx::FileSystem")
    missing = own_rules - _depends_on(fs)
    assert not missing, f"the file system does not wait for its ingress rules {sorted(missing)}"


@pytest.mark.parametrize("example", EXAMPLES)
def test_data_repository_associations_are_created_one_at_a_time(synth, example):
    # Two associations on one file system created in parallel failed every time
    # [hashicorp/terraform-provider-aws#24678]: each waits for the one before it.
    links = resources(synth(example).template("storage"), "AWS::FSx::DataRepositoryAssociation")
    assert len(links) == 2
    order = sorted(links, key=lambda k: len(_depends_on(links[k]) & set(links)))
    for before, after in zip(order, order[1:]):
        assert before in _depends_on(links[after]), f"{after} does not wait for {before}"
    assert not _depends_on(links[order[0]]) & set(links)


@pytest.mark.parametrize("example", EXAMPLES)
def test_file_system_runs_lustre_2_15(synth, example):
    # Recommended for new file systems; PERSISTENT_2 otherwise defaults to 2.12 [FSx API
    # Reference, CreateFileSystem, FileSystemTypeVersion].
    fs = only(synth(example).template("storage"), "AWS::FSx::FileSystem")
    assert fs["Properties"]["FileSystemTypeVersion"] == "2.15"


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_managed_addon_overwrites_eks_bootstrapped_fields(synth, example):
    # EKS bootstraps vpc-cni, CoreDNS and kube-proxy; a managed add-on created over them with
    # ResolveConflicts NONE fails on the first field they disagree on
    # [aws/amazon-network-policy-controller-k8s#200]. The kit chose OVERWRITE (docs/operations.md,
    # "Over time") over turning the bootstrap off, which would replace deployed clusters.
    s = synth(example)
    addons = {}
    for stack in s.templates.values():
        addons.update(resources(stack, "AWS::EKS::Addon"))
    names = {a["Properties"]["AddonName"] for a in addons.values()}
    assert {"vpc-cni", "coredns", "kube-proxy"} <= names
    wrong = {a["Properties"]["AddonName"]: a["Properties"].get("ResolveConflicts", "NONE")
             for a in addons.values() if a["Properties"].get("ResolveConflicts") != "OVERWRITE"}
    assert not wrong, f"add-ons that would fail over a bootstrapped copy: {wrong}"
    cluster = only(s.template("cluster"), "AWS::EKS::Cluster")["Properties"]
    assert cluster.get("BootstrapSelfManagedAddons", True) is True  # the choice this rests on


def _needs(template: dict, logical_id: str) -> set[str]:
    """Everything ``logical_id`` waits for: DependsOn, Ref and GetAtt, transitively."""
    res = template["Resources"]

    def direct(lid: str) -> set[str]:
        found = set(_depends_on(res[lid]))

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("Ref"), str) and node["Ref"] in res:
                    found.add(node["Ref"])
                if isinstance(node.get("Fn::GetAtt"), list) and node["Fn::GetAtt"][0] in res:
                    found.add(node["Fn::GetAtt"][0])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(res[lid].get("Properties", {}))
        return found

    seen: set[str] = set()
    todo = [logical_id]
    while todo:
        for dep in direct(todo.pop()) - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


@pytest.mark.parametrize("example", EXAMPLES)
def test_kubectl_resources_run_only_while_the_providers_log_groups_exist(synth, example):
    # The kubectl provider's log groups are named after its functions, so nothing waited for them:
    # created after the functions (a first Helm install could beat them, and the group's create
    # then fails with AlreadyExists) and deleted while Helm releases were still being uninstalled,
    # after which Lambda recreates them untagged and never expiring [aws/aws-cdk#31487].
    cluster = synth(example).template("cluster")
    functions = {k for k, r in resources(cluster, "AWS::Lambda::Function").items()
                 if "KubectlProvider" in k}
    groups = {k for k, r in resources(cluster, "AWS::Logs::LogGroup").items()
              if _needs(cluster, k) & functions}
    assert len(groups) == 2, groups
    kubectl = {k for k, r in cluster["Resources"].items() if r["Type"].startswith("Custom::AWSCDK-EKS-")}
    assert kubectl
    for k in sorted(kubectl):
        assert groups <= _needs(cluster, k), f"{k} does not wait for {sorted(groups - _needs(cluster, k))}"

"""Every role pods get through EKS Pod Identity trusts only the service account it is bound to.

EKS Pod Identity passes the cluster, namespace and service account as session tags, and a role's
trust policy may require them [Amazon EKS user guide, pod-id-role.html, "Setting Conditions"].
Without that, anyone in the account who may create an association and pass the role could bind
one environment's trainer role (a stack output) to a service account of another cluster, and read
and delete its checkpoints. The conditions must name exactly the binding EKS uses (the
association, or the add-on's association in the add-on's namespace), or the pods get no
credentials: both are read from the synthesized templates.
"""

from __future__ import annotations

import json

import pytest

from infra import names
from infra.constructs.pod_identity import CLUSTER_ARN_TAG, CLUSTER_TAG, NAMESPACE_TAG, SERVICE_ACCOUNT_TAG
from tests.support.cdk import EXAMPLES, resources

# The namespace EKS installs each add-on into (infra/names.py KUBE_SYSTEM_NAMESPACE,
# infra/constructs/observability.py ADDON_NAMESPACE).
ADDON_NAMESPACES = {"vpc-cni": "kube-system", "aws-fsx-csi-driver": "kube-system",
                    "amazon-cloudwatch-observability": "amazon-cloudwatch"}


def pod_identity_roles(templates: dict[str, dict]) -> dict[str, dict]:
    """Logical ID -> trust statement of every role pods.eks.amazonaws.com may assume."""
    found = {}
    for t in templates.values():
        for lid, role in resources(t, "AWS::IAM::Role").items():
            for st in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                if st.get("Principal") == {"Service": "pods.eks.amazonaws.com"}:
                    found[lid] = st
    return found


def bindings(templates: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(role reference as JSON, namespace, service account) of every association EKS uses."""
    found = []
    for t in templates.values():
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values():
            p = a["Properties"]
            found.append((json.dumps(p["RoleArn"]), p["Namespace"], p["ServiceAccount"]))
        for a in resources(t, "AWS::EKS::Addon").values():
            p = a["Properties"]
            for assoc in p.get("PodIdentityAssociations", []):
                found.append((json.dumps(assoc["RoleArn"]), ADDON_NAMESPACES[p["AddonName"]],
                              assoc["ServiceAccount"]))
    return found


def _cluster_parts(name) -> list:
    """The end of the ARN as CDK joins it: ":cluster/NAME" for a literal name, a Ref after it."""
    return [f":cluster/{name}"] if isinstance(name, str) else [":cluster/", name]


def cluster_names(s) -> list:
    """What a condition may say for the cluster: its name, or a Ref to the cluster resource."""
    cluster = s.template("cluster")
    refs = [{"Ref": lid} for lid in resources(cluster, "Custom::AWSCDK-EKS-Cluster")]
    refs += [{"Ref": lid} for lid in resources(cluster, "AWS::EKS::Cluster")]
    return [names.eks_cluster_name(s.config.name), *refs]


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_pod_identity_role_trusts_only_its_binding(synth, example):
    s = synth(example)
    roles = pod_identity_roles(s.templates)
    bound = bindings(s.templates)
    assert roles and bound
    for lid, trust in roles.items():
        assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"], lid
        mine = [(ns, sa) for ref, ns, sa in bound if lid in ref]
        assert len(mine) == 1, f"{lid}: bound {len(mine)} times"
        (namespace, service_account), = mine
        cond = trust.get("Condition", {}).get("StringEquals", {})
        assert cond.get(NAMESPACE_TAG) == namespace, (lid, cond)
        assert cond.get(SERVICE_ACCOUNT_TAG) == service_account, (lid, cond)
        assert cond.get(CLUSTER_TAG) in cluster_names(s), (lid, cond)
        # ... and by ARN: this stack's partition, region and account, and the same cluster name
        # (a name alone matched the environment of that name in every region of the account)
        assert cond.get(CLUSTER_ARN_TAG) == {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, ":eks:", {"Ref": "AWS::Region"}, ":",
            {"Ref": "AWS::AccountId"}, *_cluster_parts(cond.get(CLUSTER_TAG))]]}, (lid, cond)
    # Every binding's role is one of these (none trusts Pod Identity without conditions).
    assert all(any(lid in ref for lid in roles) for ref, _, _ in bound)


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_binding_waits_for_every_policy_of_its_role(synth, example):
    """A binding's role ARN orders it after the role only; a policy attached to the role is a
    resource of its own. Before: the CloudWatch add-on did not wait for its role's policy, which
    holds the Deny that keeps the agent's log writes to this cluster's groups, so the agent could
    start with the managed policy's writes open on every group of the account. A policy in
    another stack is created before this one's stack starts."""
    s = synth(example)
    checked = 0
    for stack, t in s.templates.items():
        policies = {pid: json.dumps(p["Properties"].get("Roles", []))
                    for pid, p in t["Resources"].items()
                    if p["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")}
        binders = {**resources(t, "AWS::EKS::PodIdentityAssociation"),
                   **{lid: a for lid, a in resources(t, "AWS::EKS::Addon").items()
                      if a["Properties"].get("PodIdentityAssociations")}}
        for lid, b in binders.items():
            p = b["Properties"]
            for ref in [p["RoleArn"]] if "RoleArn" in p else [
                    a["RoleArn"] for a in p["PodIdentityAssociations"]]:
                if "Fn::GetAtt" not in ref:
                    continue  # another stack's role (an import)
                role = ref["Fn::GetAtt"][0]
                needed = {pid for pid, roles in policies.items()
                          if json.dumps({"Ref": role}) in roles}
                missing = needed - set(b.get("DependsOn", []))
                assert not missing, f"{stack}: {lid} does not wait for {sorted(missing)} of {role}"
                checked += len(needed)
    assert checked or not s.config.observability.enabled or s.config.observability.application_signals

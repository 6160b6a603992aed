"""The VPC CNI on its own role through EKS Pod Identity; no node role carries its permissions.

On the node role, AmazonEKS_CNI_Policy (create, attach and delete network interfaces, assign IPs)
is open to every process that reaches the instance profile; the EKS user guide ("Configure Amazon
VPC CNI plugin to use IRSA") recommends a separate role and says the plugin supports Pod Identity.
Pod Identity gives a pod its credentials when the pod is created, so nodes that join before the
association would run aws-node with no credentials at all once the node role lacks the policy:
the system nodes wait for the association and the agent.
"""

from __future__ import annotations

import json

import pytest

from infra.constructs import node_roles
from tests.support.cdk import EXAMPLES, resources

CNI = f":iam::aws:policy/{node_roles.VPC_CNI_POLICY}"


def addon(template: dict, name: str) -> tuple[str, dict]:
    [(lid, a)] = [(k, v) for k, v in resources(template, "AWS::EKS::Addon").items()
                  if v["Properties"]["AddonName"] == name]
    return lid, a


def node_roles_of(template: dict) -> list[dict]:
    roles = []
    for ng in resources(template, "AWS::EKS::Nodegroup").values():
        role_id = ng["Properties"]["NodeRole"]["Fn::GetAtt"][0]
        roles.append(template["Resources"][role_id])
    return roles


@pytest.mark.parametrize("example", EXAMPLES)
def test_vpc_cni_has_its_own_role_and_no_node_role_has_the_policy(synth, example):
    s = synth(example)
    cluster = s.template("cluster")
    _, cni = addon(cluster, node_roles.VPC_CNI_ADDON)
    [association] = cni["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = cluster["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    trust = json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    assert "pods.eks.amazonaws.com" in trust and "sts:TagSession" in trust
    assert [json.dumps(p) for p in role["Properties"]["ManagedPolicyArns"]] == [
        json.dumps(p) for p in role["Properties"]["ManagedPolicyArns"] if CNI in json.dumps(p)]
    assert len(role["Properties"]["ManagedPolicyArns"]) == 1 and "Policies" not in role["Properties"]

    roles = node_roles_of(cluster) + [r for g in s.config.gpu_node_groups
                                      for r in node_roles_of(s.template("gpu", g))]
    assert len(roles) == 1 + len(s.config.gpu_node_groups)
    for node_role in roles:
        policies = json.dumps(node_role["Properties"]["ManagedPolicyArns"])
        assert CNI not in policies
        assert "AmazonEKSWorkerNodePolicy" in policies
        assert "AmazonEC2ContainerRegistryReadOnly" in policies


def test_system_nodes_join_after_the_association_and_the_agent(synth):
    cluster = synth("default").template("cluster")
    [system] = resources(cluster, "AWS::EKS::Nodegroup").values()
    for name in (node_roles.VPC_CNI_ADDON, "kube-proxy", "eks-pod-identity-agent"):
        lid, _ = addon(cluster, name)
        assert lid in system["DependsOn"], name
    # On an update, the node role loses the policy only once the association exists.
    role_id = system["Properties"]["NodeRole"]["Fn::GetAtt"][0]
    assert addon(cluster, node_roles.VPC_CNI_ADDON)[0] in cluster["Resources"][role_id]["DependsOn"]

"""Node roles without the pod network's permissions, and the VPC CNI on a role of its own.

EKS managed node groups get three AWS-managed policies on their node role by default, one of
them AmazonEKS_CNI_Policy (create, attach, detach and delete network interfaces, assign private
IPs). On the node role every process that reaches the instance profile has those rights; the EKS
user guide ("Configure Amazon VPC CNI plugin to use IRSA") recommends a separate role and notes
that the plugin supports EKS Pod Identity. The kit gives the vpc-cni add-on's service account
(``aws-node``) its own role through a Pod Identity association on the add-on, and removes the
policy from every node role.

The node roles keep their logical IDs (the role CDK makes for each node group, with its managed
policy list overridden): a node group whose role changed would be replaced by CloudFormation.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge, managed_policy_finding
from infra.constructs.pod_identity import pod_identity_principal

# What a node itself needs [EKS user guide, "Amazon EKS node IAM role"].
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")
# The VPC CNI's IPv4 permissions [EKS user guide, "Configure Amazon VPC CNI plugin to use IRSA"].
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
VPC_CNI_ADDON = "vpc-cni"
VPC_CNI_SERVICE_ACCOUNT = "aws-node"


def restrict_node_role(role: iam.IRole) -> None:
    """Leave ``role`` (a node group's, made by CDK) with NODE_POLICIES only."""
    # On the L1 property itself (not a raw override), so cdk-nag reads the same list.
    role.node.default_child.managed_policy_arns = [
        iam.ManagedPolicy.from_aws_managed_policy_name(p).managed_policy_arn
        for p in NODE_POLICIES]


def vpc_cni_role(scope: Construct, id: str, *, cluster_name: str) -> iam.Role:
    """The role the vpc-cni add-on's ``aws-node`` pods get through EKS Pod Identity."""
    role = iam.Role(
        scope, id,
        assumed_by=pod_identity_principal(cluster_name=cluster_name,
                                          namespace=names.KUBE_SYSTEM_NAMESPACE,
                                          service_account=VPC_CNI_SERVICE_ACCOUNT),
        description="Amazon VPC CNI (aws-node) through EKS Pod Identity, instead of the node role",
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(VPC_CNI_POLICY)],
    )
    acknowledge(role, managed_policy_finding(VPC_CNI_POLICY),
                "The EKS user guide attaches the AWS-managed AmazonEKS_CNI_Policy to the VPC CNI's "
                "role; it follows the plugin's needs as it changes.")
    return role

"""The trust of a role that pods get through EKS Pod Identity."""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

# Session tags EKS Pod Identity passes when it assumes a role for a pod [Amazon EKS user guide,
# "Create IAM role with trust policy required by EKS Pod Identity" (pod-id-role.html), "Setting
# Conditions", and "Enable or disable session tags" (pod-id-abac.html), read 2026-12-02].
CLUSTER_TAG = "aws:RequestTag/eks-cluster-name"
CLUSTER_ARN_TAG = "aws:RequestTag/eks-cluster-arn"
NAMESPACE_TAG = "aws:RequestTag/kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "aws:RequestTag/kubernetes-service-account"


def pod_identity_principal(*, cluster_name: str, namespace: str,
                           service_account: str) -> iam.IPrincipal:
    """EKS Pod Identity (sts:AssumeRole and sts:TagSession), for one service account of one
    namespace of one cluster. Without the conditions, anyone in the account who may create a Pod
    Identity association and pass the role could bind it to a service account of another
    namespace or cluster (another environment's) and use its permissions. The cluster is pinned
    by its ARN as well as its name: a name alone also matches a cluster of that name in another
    region of the account (the same environment name deployed twice, or the default one)."""
    return iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")).with_conditions(
        {"StringEquals": {CLUSTER_TAG: cluster_name, CLUSTER_ARN_TAG: cluster_arn(cluster_name),
                          NAMESPACE_TAG: namespace, SERVICE_ACCOUNT_TAG: service_account}})


def cluster_arn(cluster_name: str) -> str:
    """The ARN of the cluster named ``cluster_name`` in the stack's own region and account (every
    stack of an environment deploys there)."""
    return f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/{cluster_name}"

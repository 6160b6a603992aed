"""Acknowledging cdk-nag findings: one finding, one construct, one written reason.

cdk-nag 3 reads CDK's native acknowledgements (``Validations.of(scope).acknowledge``). A finding ID
is the rule plus, for rules with several findings per resource, the finding in brackets, e.g.
``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy]``.
Nothing here acknowledges a whole rule for a whole stack.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

_PACK = "AwsSolutions::"

# The AWS-managed policies EKS documents for its roles (EKS user guide, "Amazon EKS node IAM role"
# and "Amazon EKS cluster IAM role"); a hand-written copy would drift from what EKS needs.
EKS_NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                     "AmazonEC2ContainerRegistryReadOnly")


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Record that ``finding`` (an AwsSolutions rule ID, optionally [finding]) is accepted."""
    Validations.of(scope).acknowledge(Acknowledgment(id=_PACK + finding, reason=reason))


def managed_policy_finding(policy_name: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"


def acknowledge_eks_node_role(scope: IConstruct) -> None:
    for policy in EKS_NODE_POLICIES:
        acknowledge(scope, managed_policy_finding(policy),
                    f"EKS managed node roles need the AWS-managed {policy}, as EKS documents.")

"""Acknowledging cdk-nag findings: one finding, one construct, one written reason.

cdk-nag 3 reads CDK's native acknowledgements (``Validations.of(scope).acknowledge``). A finding ID
is the rule plus, for rules with several findings per resource, the finding in brackets, e.g.
``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy]``.
Nothing here acknowledges a whole rule for a whole stack.
"""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, Stack, Validations
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


def acknowledge_kubectl_provider(provider: IConstruct) -> None:
    """Findings on aws_eks_v2's kubectl provider, which CDK generates and the kit does not shape.

    It is the one Lambda-backed provider the kit accepts (Helm charts have no native resource).
    """
    stack = Stack.of(provider)
    handler = provider.node.find_child("Handler")
    handler_id = stack.get_logical_id(handler.node.default_child)
    has_public_ecr_id = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))
    reason = ("CDK's kubectl provider roles use the AWS-managed policies aws-cdk-lib attaches "
              "to them; the kit does not shape that construct.")
    for policy in ("service-role/AWSLambdaBasicExecutionRole",
                   "service-role/AWSLambdaVPCAccessExecutionRole",
                   "AmazonEC2ContainerRegistryReadOnly"):
        acknowledge(provider, managed_policy_finding(policy), reason)
    public_ecr_policy = json.dumps(
        {"Fn::If": [has_public_ecr_id, {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"},
            ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},
            {"Ref": "AWS::NoValue"}]}, separators=(",", ":"))
    acknowledge(provider, f"AwsSolutions-IAM4[Policy::{public_ecr_policy}]", reason)
    acknowledge(provider, "AwsSolutions-L1",
                "aws-cdk-lib picks the kubectl handler's runtime to match its kubectl layer; "
                "upgrading aws-cdk-lib upgrades it.")
    acknowledge(provider, f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]",
                "The provider framework may invoke any version of its own handler function.")
    # cfn-lint W3005: CDK adds a DependsOn on each function's role that a GetAtt already implies.
    for function in (handler, provider.node.find_child("Provider").node.find_child(
            "framework-onEvent")):
        function.node.default_child.add_metadata("cfn-lint",
                                                 {"config": {"ignore_checks": ["W3005"]}})

"""Accepted findings of cdk-nag and checkov: one finding, one resource, one written reason.

cdk-nag 3 reads CDK's native acknowledgements (``Validations.of(scope).acknowledge``). A finding ID
is the rule plus, for rules with several findings per resource, the finding in brackets, e.g.
``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy]``.
checkov reads ``Metadata: checkov: skip: [{id, comment}]`` on the CloudFormation resource itself
(``skip_checkov``). Nothing here accepts a whole rule for a whole stack.
"""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, CfnResource, Stack, Validations
from constructs import IConstruct

_PACK = "AwsSolutions::"

# The AWS-managed policies EKS documents for its roles (EKS user guide, "Amazon EKS node IAM role"
# and "Amazon EKS cluster IAM role"); a hand-written copy would drift from what EKS needs. The
# CNI policy is on the vpc-cni add-on's own role, not here (infra/constructs/node_roles.py).
EKS_NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Record that ``finding`` (an AwsSolutions rule ID, optionally [finding]) is accepted."""
    Validations.of(scope).acknowledge(Acknowledgment(id=_PACK + finding, reason=reason))


def skip_checkov(resource: IConstruct, check_id: str, reason: str) -> None:
    """Record in ``resource``'s template metadata that checkov's ``check_id`` is accepted, and why.

    ``resource`` is a CloudFormation resource or an L2 construct whose default child is one.
    """
    cfn = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not reason.strip():
        raise ValueError(f"skip_checkov({check_id}): a reason is required")
    metadata = cfn.get_metadata("checkov") or {}
    skips = [s for s in metadata.get("skip", []) if s["id"] != check_id]
    cfn.add_metadata("checkov", {**metadata, "skip": [*skips, {"id": check_id,
                                                               "comment": reason}]})


# checkov findings on Lambda functions that CDK generates to back a custom resource and that the
# kit does not shape; each runs only while CloudFormation deploys.
_DEPLOY_TIME_FUNCTION_SKIPS = {
    "CKV_AWS_115": "Reserved concurrency would come out of the account's unreserved pool and "
                   "fails to deploy in accounts at the low default concurrency quota; this "
                   "function runs only during deployments, one call per custom resource.",
    "CKV_AWS_116": "CloudFormation invokes it through CDK's provider framework, which reports "
                   "every failure back to the stack event; a dead-letter queue would hold events "
                   "nobody reads.",
}
_LOG_GROUP_KMS_REASON = ("CloudWatch Logs encrypts log data at rest with keys it manages; a "
                         "customer key would add a key policy for the logs service and a cost, "
                         "for logs that hold no secrets.")


def skip_checkov_deploy_time_function(function: IConstruct, *, env_vars: bool = False) -> None:
    """checkov findings on a CDK-generated custom-resource function (and its log group, if any)."""
    for check_id, reason in _DEPLOY_TIME_FUNCTION_SKIPS.items():
        skip_checkov(function, check_id, reason)
    if env_vars:
        skip_checkov(function, "CKV_AWS_173",
                     "Its environment holds no secrets (a region setting, a function ARN); "
                     "Lambda encrypts environment variables at rest with an AWS-managed key.")
    log_group = function.node.try_find_child("LogGroup")
    if log_group is not None:  # @aws-cdk/aws-lambda:useCdkManagedLogGroup
        skip_checkov(log_group, "CKV_AWS_158", _LOG_GROUP_KMS_REASON)


def skip_checkov_log_group_kms(log_group: IConstruct) -> None:
    """A log group left on CloudWatch Logs' own encryption (checkov CKV_AWS_158)."""
    skip_checkov(log_group, "CKV_AWS_158", _LOG_GROUP_KMS_REASON)


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
        skip_checkov_deploy_time_function(function, env_vars=True)

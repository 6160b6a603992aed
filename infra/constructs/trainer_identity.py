"""The trainer's AWS identity: an IAM role bound to its Kubernetes service account by Pod Identity."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import names


class TrainerIdentity(Construct):
    """Least privilege: read/write the bucket's checkpoint prefix, read its dataset prefix.

    Pod Identity (not IRSA): no OIDC provider to manage, and the association names the namespace
    and service account from ``infra.names``, the same ones the manifests render.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, bucket: s3.IBucket,
                 bucket_key: kms.IKey | None) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self, "Role",
            # Pod Identity needs both sts:AssumeRole and sts:TagSession in the trust policy.
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description="RL trainer pods: checkpoints and datasets in the kit's bucket only",
        )
        checkpoints = bucket.arn_for_objects(names.CHECKPOINTS_PREFIX + "*")
        datasets = bucket.arn_for_objects(names.DATASETS_PREFIX + "*")
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ListOwnPrefixes",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [
                names.CHECKPOINTS_PREFIX + "*", names.DATASETS_PREFIX + "*"]}},
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ReadWriteCheckpoints",
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                     "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resources=[checkpoints],
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ReadDatasets", actions=["s3:GetObject"], resources=[datasets],
        ))
        if bucket_key is not None:
            bucket_key.grant_encrypt_decrypt(self.role)
        self.association = eks.CfnPodIdentityAssociation(
            self, "Association",
            cluster_name=cluster.cluster_name,
            namespace=names.TRAINER_NAMESPACE,
            service_account=names.TRAINER_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )

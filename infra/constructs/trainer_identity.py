"""The trainer's AWS identity: an IAM role for its Kubernetes service account (EKS Pod Identity)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge
from infra.constructs.pod_identity import pod_identity_principal


class TrainerRole(Construct):
    """Least privilege: read/write the bucket's checkpoint prefix, read its dataset prefix.

    Lives next to the bucket (data stack), so its policy references the bucket directly; the
    cluster stack binds it to the service account with ``bind_trainer_role``.
    """

    def __init__(self, scope: Construct, id: str, *, cluster_name: str, bucket: s3.Bucket,
                 bucket_key: kms.IKey | None, read_capacity_blocks: bool = False) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self, "Role",
            assumed_by=pod_identity_principal(cluster_name=cluster_name,
                                              namespace=names.TRAINER_NAMESPACE,
                                              service_account=names.TRAINER_SERVICE_ACCOUNT),
            description="RL trainer pods: checkpoints and datasets in the kit's bucket only",
        )
        # ListBucketVersions: ListObjectVersions needs it [botocore's S3 model, ListObjectVersions:
        # "you must have permission to perform the s3:ListBucketVersions action"]; a delete of a
        # checkpoint lists every version under the save to remove them (rltrainer's store). Same
        # bucket, same prefix condition (the store always passes a prefix); where the listing is
        # refused anyway, the store deletes by key and says so.
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ListOwnPrefixes",
            actions=["s3:ListBucket", "s3:ListBucketVersions"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [
                names.CHECKPOINTS_PREFIX + "*", names.DATASETS_PREFIX + "*"]}},
        ))
        # GetObjectVersion: on the versioned bucket a save's manifest pins each object's version,
        # and restore downloads those versions; GetObject or HeadObject with a versionId needs it
        # [S3 API reference, GetObject and HeadObject, "Permissions"]. DeleteObjectVersion: on the
        # versioned bucket a delete without a versionId only adds a delete marker, so a pruned save
        # (training.checkpoint.keep_s3) is deleted version by version, which needs it [botocore's
        # S3 model, DeleteObjects, "Permissions": "To delete a specific version of an object from
        # a versioning-enabled bucket, you must specify the s3:DeleteObjectVersion permission"].
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ReadWriteCheckpoints",
            actions=["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject",
                     "s3:DeleteObjectVersion", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resources=[bucket.arn_for_objects(names.CHECKPOINTS_PREFIX + "*")],
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="ReadDatasets", actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(names.DATASETS_PREFIX + "*")],
        ))
        if read_capacity_blocks:
            # The launcher re-reads its Capacity Block's end (rltrainer.reservation): a block can be
            # extended, and manifests applied without `rlkit launch` carry no end. A read-only call
            # with no resource-level permissions [Service Authorization Reference, Amazon EC2].
            self.role.add_to_policy(iam.PolicyStatement(
                sid="ReadCapacityBlockEnd", actions=["ec2:DescribeCapacityReservations"],
                resources=["*"]))
            acknowledge(self.role, "AwsSolutions-IAM5[Resource::*]",
                        "ec2:DescribeCapacityReservations supports no resource-level permissions; "
                        "it only reads reservation metadata (the block's end).")
        bucket_id = Stack.of(bucket).get_logical_id(bucket.node.default_child)
        for prefix in (names.CHECKPOINTS_PREFIX, names.DATASETS_PREFIX):
            acknowledge(self.role, f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/{prefix}*]",
                        f"Objects under {prefix} are the trainer's; the wildcard stays inside that "
                        "prefix of the kit's own bucket.")
        if bucket_key is not None:
            # What SSE-KMS needs to upload (multipart included) and download: "kms:GenerateDataKey
            # and kms:Decrypt permissions on the key" [Amazon S3 user guide, SSE-KMS
            # "Permissions"]; not Encrypt, ReEncrypt* or the other GenerateDataKey* variants that
            # Key.grant_encrypt_decrypt adds.
            bucket_key.grant(self.role, "kms:Decrypt", "kms:GenerateDataKey")


def bind_trainer_role(scope: Construct, id: str, *, cluster: eks.ICluster,
                      role: iam.IRole) -> eks.CfnPodIdentityAssociation:
    """Give the trainer's service account (``infra.names``, as the manifests render it) the role."""
    return eks.CfnPodIdentityAssociation(
        scope, id,
        cluster_name=cluster.cluster_name,
        namespace=names.TRAINER_NAMESPACE,
        service_account=names.TRAINER_SERVICE_ACCOUNT,
        role_arn=role.role_arn,
    )

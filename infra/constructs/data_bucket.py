"""The S3 bucket for checkpoints and datasets, with its access-log bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge, skip_checkov


class DataBucket(Construct):
    """Versioned, encrypted, TLS-only bucket; no public access; lifecycle keeps costs bounded.

    Objects are never auto-deleted by a custom resource (that would need a Lambda): in ephemeral
    mode the bucket is destroyable and ``rlkit teardown`` empties it before deleting the stack.
    """

    def __init__(self, scope: Construct, id: str, *, removal_policy: RemovalPolicy,
                 use_kms: bool, noncurrent_version_days: int) -> None:
        super().__init__(scope, id)
        self.key: kms.IKey | None = None
        if use_kms:
            self.key = kms.Key(self, "Key", enable_key_rotation=True,
                               description="Encrypts the RL kit's checkpoint and dataset bucket",
                               removal_policy=removal_policy)
        self.access_logs = s3.Bucket(
            self, "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            # ACLs off: CDK then grants log delivery through the bucket policy, not a legacy ACL.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
            removal_policy=removal_policy,
        )
        acknowledge(self.access_logs, "AwsSolutions-S1",
                    "This is the access-log bucket itself; logging it to itself would loop.")
        skip_checkov(self.access_logs, "CKV_AWS_18",
                     "This is the access-log bucket itself; logging it to itself would loop.")
        skip_checkov(self.access_logs, "CKV_AWS_21",
                     "S3 writes each access-log object once and the lifecycle expires it after 90 "
                     "days; versions would only keep copies of expired logs.")
        self.bucket = s3.Bucket(
            self, "Bucket",
            encryption=s3.BucketEncryption.KMS if self.key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=self.key,
            bucket_key_enabled=bool(self.key),
            versioned=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="data-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="abort-incomplete-multipart",
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                ),
                # Build contexts (content-addressed zips `rlkit image build` uploads): needed
                # only while their build starts; expiring them makes a noncurrent version, which
                # the next rule removes. ECR keeps the images; a later build uploads again.
                s3.LifecycleRule(
                    id="expire-image-build-contexts",
                    prefix=names.IMAGE_BUILDS_PREFIX,
                    expiration=Duration.days(names.IMAGE_BUILD_CONTEXT_EXPIRY_DAYS),
                ),
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=Duration.days(noncurrent_version_days),
                    # Once a deleted key's versions have expired, its delete marker is all that is
                    # left ("a delete marker with no noncurrent versions", S3 API
                    # LifecycleExpiration.ExpiredObjectDeleteMarker): remove it, or every file of
                    # every pruned save stays listed as a marker for good.
                    expired_object_delete_marker=True,
                ),
            ],
            removal_policy=removal_policy,
        )
        # The policies CDK adds (TLS only; the log delivery grant) share their bucket's fate: a
        # bucket kept after its stack is deleted would otherwise lose its TLS-only deny, and the
        # log bucket its delivery grant (logging then stops without an error).
        for bucket in (self.bucket, self.access_logs):
            bucket.policy.apply_removal_policy(removal_policy)

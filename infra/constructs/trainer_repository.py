"""The ECR repository the trainer image is pushed to."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ecr as ecr
from constructs import Construct

from infra.constructs.nag import skip_checkov


class TrainerRepository(Construct):
    """Scan on push, immutable tags (a tag always means the same image on every node)."""

    def __init__(self, scope: Construct, id: str, *, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        self.repository = ecr.Repository(
            self, "Repository",
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            lifecycle_rules=[ecr.LifecycleRule(
                description="Drop untagged layers left by re-pushes after two weeks",
                tag_status=ecr.TagStatus.UNTAGGED, max_image_age=Duration.days(14),
            )],
            removal_policy=removal_policy,
        )
        skip_checkov(self.repository, "CKV_AWS_136",
                     "ECR encrypts images at rest with AES-256. A KMS key would need kms:Decrypt "
                     "for every node role that pulls, and changing a repository's encryption "
                     "replaces it (and loses its images).")

"""The ECR repository the trainer image is pushed to."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ecr as ecr
from constructs import Construct


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

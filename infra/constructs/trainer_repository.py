"""The ECR repository the trainer image is pushed to."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
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
            # No lifecycle rule. Tags are immutable, so no push leaves an untagged image behind;
            # the only untagged images are the per-platform images of a multi-arch tag (the
            # P6e-GB200 build), which its index lists by digest: an "untagged, older than N
            # days" rule (this repository had one) would select exactly those, and whether ECR's
            # lifecycle skips images an index still lists is not documented (aws/containers-
            # roadmap#1466 asks for rules that follow an index to its images).
            removal_policy=removal_policy,
            # Deleted with its stack, the repository is emptied by CloudFormation itself (ECR's
            # native EmptyOnDelete, no custom resource): an image pushed after teardown deleted
            # the images no longer fails the stack's delete. A retained one keeps its images.
            # EmptyOnDelete is not a create-only property of AWS::ECR::Repository (its schema,
            # cfn-lint==1.58.0 cfnlint/data/schemas/resources/3feaf06a6adf4eab.json,
            # createOnlyProperties), so setting it updates in place.
            empty_on_delete=removal_policy == RemovalPolicy.DESTROY,
        )
        skip_checkov(self.repository, "CKV_AWS_136",
                     "ECR encrypts images at rest with AES-256. A customer key would be one "
                     "more key to manage for no control the kit needs, and changing a "
                     "repository's encryption replaces it (and loses its images).")

"""Data stack: checkpoints, datasets, the trainer image and the role that reads/writes them.

Survives cluster teardown.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from constructs import Construct

from infra.config import KitConfig
from infra.constructs.data_bucket import DataBucket
from infra.constructs.shared_filesystem import fsx_may_use_bucket_key
from infra.constructs.trainer_identity import TrainerRole
from infra.constructs.trainer_image_build import TrainerImageBuild
from infra.constructs.trainer_repository import TrainerRepository
from infra import names
from infra.names import OutputKeys


def data_removal_policy(config: KitConfig) -> RemovalPolicy:
    """Retain data unless the environment is ephemeral or retention was switched off."""
    if config.ephemeral or not config.storage.retain:
        return RemovalPolicy.DESTROY
    return RemovalPolicy.RETAIN


class DataStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        policy = data_removal_policy(config)
        data = DataBucket(self, "Data", removal_policy=policy, use_kms=config.storage.kms,
                          noncurrent_version_days=config.storage.noncurrent_version_days)
        self.bucket = data.bucket
        self.bucket_key = data.key
        if self.bucket_key is not None and config.storage.shared_filesystem.type != "none":
            fsx_may_use_bucket_key(self.bucket_key)  # datasets/ and models/ links
        self.repository = TrainerRepository(self, "TrainerImage", removal_policy=policy).repository
        self.trainer_role = TrainerRole(
            self, "Trainer", cluster_name=names.eks_cluster_name(config.name),
            bucket=self.bucket, bucket_key=self.bucket_key,
            read_capacity_blocks=any(g.capacity.type == "capacity-block"
                                     for g in config.gpu_node_groups.values())).role
        CfnOutput(self, OutputKeys.BUCKET_NAME, value=self.bucket.bucket_name)
        CfnOutput(self, OutputKeys.ECR_REPOSITORY_URI, value=self.repository.repository_uri)
        CfnOutput(self, OutputKeys.TRAINER_ROLE_ARN, value=self.trainer_role.role_arn)
        self.image_build = TrainerImageBuild(
            self, "ImageBuild", repository=self.repository, bucket=self.bucket,
            bucket_key=self.bucket_key,
            default_backend=config.training.expert_parallel.backend,
            # <image_tag>-<backend>, as manifests.context.image_tag_for (a test keeps them equal)
            default_image_tag=f"{config.training.image_tag}-"
                              f"{config.training.expert_parallel.backend}",
            log_retention_days=config.image_build.log_retention_days, removal_policy=policy)
        CfnOutput(self, OutputKeys.IMAGE_BUILD_PROJECT, value=self.image_build.project.project_name)
        CfnOutput(self, OutputKeys.IMAGE_BUILD_LOG_GROUP,
                  value=self.image_build.log_group.log_group_name)
        CfnOutput(self, OutputKeys.IMAGE_CACHE_REPOSITORY_URI,
                  value=self.image_build.cache_repository.repository_uri)

"""The trainer image build: a CodeBuild project that builds one EP-backend variant of
images/trainer and pushes it to the kit's ECR repository, so no user needs a local Docker engine.

`rlkit image build` zips images/trainer (less .dockerignore) into the data bucket under
``infra.names.IMAGE_BUILDS_PREFIX`` and starts a build with the backend, tag and commit as
environment overrides; the commands are images/trainer/buildspec.yml, which travels in the zip.
BuildKit's layer cache lives in a repository of its own (its ``buildcache-<backend>`` tags are
overwritten by every build, which the trainer repository's immutable tags would refuse).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge, skip_checkov, skip_checkov_log_group_kms
from infra.versions import IMAGE_BUILD_BUILDKIT_IMAGE, IMAGE_BUILD_HOST_IMAGE

# 72 vCPUs, 144 GiB memory, 824 GB SSD; "supports Docker images up to 100 GB uncompressed"
# [CodeBuild API reference, ProjectEnvironment computeType, read 2026-11-30]. The image is ~45-50
# GB unpacked, base included; BuildKit holds the pulled base, the new layers and the cache export
# on disk at once, and the NVSHMEM/DeepEP/NCCL compiles use every core. LARGE (8 vCPUs, 16 GiB)
# would be short of memory for those compiles.
# The template says IMAGE_BUILD_COMPUTE_TYPE (tests/ops/test_preflight_services.py checks).
COMPUTE_TYPE = codebuild.ComputeType.X2_LARGE
# A cold deepep build (NVSHMEM + DeepEP + NCCL) plus pulling the base and pushing ~20 GB of layers;
# a warm cache finishes a launcher-only change in minutes.
BUILD_TIMEOUT = Duration.hours(names.IMAGE_BUILD_TIMEOUT_HOURS)
QUEUED_TIMEOUT = Duration.hours(names.IMAGE_BUILD_QUEUED_TIMEOUT_HOURS)
# The build's default source; `rlkit image build` uploads a content-addressed zip and points each
# build at it (StartBuild sourceLocationOverride).
DEFAULT_CONTEXT_KEY = f"{names.IMAGE_BUILDS_PREFIX}context.zip"
BUILDSPEC_FILE = "buildspec.yml"  # inside the build context (images/trainer)


class TrainerImageBuild(Construct):
    """CodeBuild project (privileged, for BuildKit), its log group, its cache repository and a role
    that can push to the trainer repository and the cache, read build contexts and write its logs,
    nothing else."""

    def __init__(self, scope: Construct, id: str, *, repository: ecr.IRepository,
                 bucket: s3.IBucket, bucket_key: kms.IKey | None, default_backend: str,
                 default_image_tag: str, log_retention_days: int,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        self.cache_repository = ecr.Repository(
            self, "CacheRepository",
            image_scan_on_push=False,
            image_tag_mutability=ecr.TagMutability.MUTABLE,
            lifecycle_rules=[ecr.LifecycleRule(
                description="Drop cache manifests no build has re-tagged for a week",
                tag_status=ecr.TagStatus.UNTAGGED, max_image_age=Duration.days(7),
            )],
            removal_policy=removal_policy,
            empty_on_delete=removal_policy == RemovalPolicy.DESTROY,  # as the trainer repository
        )
        skip_checkov(self.cache_repository, "CKV_AWS_51",
                     "BuildKit's registry cache overwrites its buildcache-<backend> tag on every "
                     "build; the images themselves go to the trainer repository, whose tags are "
                     "immutable.")
        skip_checkov(self.cache_repository, "CKV_AWS_163",
                     "It holds BuildKit cache manifests, not runnable images; the pushed image is "
                     "scanned on push in the trainer repository.")
        skip_checkov(self.cache_repository, "CKV_AWS_136",
                     "ECR encrypts images at rest with AES-256, as for the trainer repository.")

        # Build logs go with the stack even when the data is retained: they are kept for the
        # retention period while it exists, and a retained group would be a leftover that
        # `rlkit teardown --delete-data` reports.
        self.log_group = logs.LogGroup(self, "Logs", removal_policy=RemovalPolicy.DESTROY)
        # The config's number of days (infra.config.LOG_RETENTION_DAYS, CloudWatch's own list);
        # RetentionDays names these periods instead of numbering them.
        self.log_group.node.default_child.retention_in_days = log_retention_days
        skip_checkov_log_group_kms(self.log_group)

        # Every permission of the build is granted below, on named resources. The project gets
        # the role read-only: otherwise CodeBuild's L2 adds its own statements (a second log group
        # under /aws/codebuild/, test-report groups) that this build does not use.
        self.role = iam.Role(self, "Role",
                             assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
                             description="Trainer image build: push to the trainer and cache "
                                         "repositories, read build contexts, write its logs")
        # An S3 source needs the object and the bucket's ACL and location [CodeBuild user guide,
        # "Allow CodeBuild to interact with other AWS services", service role policy].
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["s3:GetObject", "s3:GetObjectVersion"],
            resources=[bucket.arn_for_objects(f"{names.IMAGE_BUILDS_PREFIX}*")]))
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["s3:GetBucketAcl", "s3:GetBucketLocation"], resources=[bucket.bucket_arn]))
        if bucket_key is not None:  # reads the zip, and encrypts what CodeBuild stores
            self.role.add_to_policy(iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
                resources=[bucket_key.key_arn]))
        self.log_group.grant_write(self.role)
        repository.grant_pull_push(self.role)
        self.cache_repository.grant_pull_push(self.role)
        # The buildspec checks that a tag is new and prints the scan findings of what it pushed.
        repository.grant(self.role, "ecr:DescribeImages", "ecr:DescribeImageScanFindings")
        policy = self.role.node.find_child("DefaultPolicy")
        bucket_id = Stack.of(self).get_logical_id(bucket.node.default_child)
        acknowledge(policy, f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/"
                            f"{names.IMAGE_BUILDS_PREFIX}*]",
                    "Build contexts are content-addressed zips under the image-builds/ prefix; "
                    "the role reads only that prefix.")
        acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                    "ecr:GetAuthorizationToken (docker login to ECR) has no resource-level "
                    "permission; every other ECR action names the two repositories.")

        self.project = codebuild.Project(
            self, "Project",
            role=self.role.without_policy_updates(),
            description="Builds and pushes the trainer image (rlkit image build)",
            source=codebuild.Source.s3(bucket=bucket, path=DEFAULT_CONTEXT_KEY),
            build_spec=codebuild.BuildSpec.from_source_filename(BUILDSPEC_FILE),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.from_code_build_image_id(
                    IMAGE_BUILD_HOST_IMAGE),
                compute_type=COMPUTE_TYPE,
                privileged=True,  # BuildKit runs in a container of the build host's Docker
            ),
            environment_variables={
                "REPOSITORY_URI": codebuild.BuildEnvironmentVariable(
                    value=repository.repository_uri),
                "CACHE_REPOSITORY_URI": codebuild.BuildEnvironmentVariable(
                    value=self.cache_repository.repository_uri),
                "BUILDKIT_IMAGE": codebuild.BuildEnvironmentVariable(
                    value=IMAGE_BUILD_BUILDKIT_IMAGE),
                # Defaults for a build started without overrides (the console, say): the
                # config's backend and its tag; `rlkit image build` always overrides both.
                "EP_BACKEND": codebuild.BuildEnvironmentVariable(value=default_backend),
                "IMAGE_TAG": codebuild.BuildEnvironmentVariable(value=default_image_tag),
                "VCS_REF": codebuild.BuildEnvironmentVariable(value="unknown"),
            },
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(
                log_group=self.log_group)),
            encryption_key=bucket_key,
            timeout=BUILD_TIMEOUT,
            queued_timeout=QUEUED_TIMEOUT,
        )
        if bucket_key is None:
            acknowledge(self.project, "AwsSolutions-CB4",
                        "No customer key in this configuration (storage.kms: false): the build "
                        "stores no artifacts, and CodeBuild uses the AWS-managed S3 key.")
            skip_checkov(self.project, "CKV_AWS_147",
                         "The build produces no artifacts and its source zip sits in the data "
                         "bucket, which has no customer key in this configuration "
                         "(storage.kms: false); CodeBuild uses the AWS-managed S3 key.")

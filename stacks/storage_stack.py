"""Storage stack: the shared FSx for Lustre file system, linked to the data bucket.

Needs only the network and the data stack, so it deploys in parallel with the cluster. Its
file system is retained with the data unless the environment is ephemeral or retention is off.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import KitConfig
from infra.config.derived import shared_fs_availability_zone
from infra.constructs.network import import_existing_vpc
from infra.constructs.shared_filesystem import SharedFileSystem
from infra.names import OutputKeys
from stacks.data_stack import data_removal_policy


class StorageStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, vpc: ec2.IVpc | None,
                 bucket: s3.IBucket, bucket_key: kms.IKey | None, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        if vpc is None:  # an existing VPC is imported by ID; there is no network stack then
            vpc = import_existing_vpc(self, "ExistingVpc", existing=config.vpc.existing,
                                      availability_zones=config.availability_zones)
        fs = config.storage.shared_filesystem
        self.shared = SharedFileSystem(
            self, "SharedFileSystem", vpc=vpc,
            availability_zone=shared_fs_availability_zone(config),
            bucket=bucket, kms_key=bucket_key,
            capacity_gib=fs.capacity_gib, throughput_mb_s_per_tib=fs.throughput_mb_s_per_tib,
            removal_policy=data_removal_policy(config),
        )
        self.security_group = self.shared.security_group
        file_system = self.shared.file_system
        CfnOutput(self, OutputKeys.SHARED_FS_ID, value=file_system.ref)
        CfnOutput(self, OutputKeys.SHARED_FS_DNS_NAME, value=file_system.attr_dns_name)
        CfnOutput(self, OutputKeys.SHARED_FS_MOUNT_NAME, value=file_system.attr_lustre_mount_name)

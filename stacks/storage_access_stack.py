"""Storage access stack: opens the shared file system's Lustre ports to the cluster's nodes.

A stack of its own because it needs both the storage and the cluster stack; putting these rules
in either would make that one wait for the other, and the file system and the cluster deploy in
parallel.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from infra.constructs.shared_filesystem import SharedFileSystemAccess


class StorageAccessStack(Stack):
    def __init__(self, scope: Construct, id: str, *, file_system_security_group: ec2.ISecurityGroup,
                 node_security_group_id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        SharedFileSystemAccess(
            self, "LustreAccess",
            file_system_security_group_id=file_system_security_group.security_group_id,
            node_security_group_id=node_security_group_id,
        )

"""The shared file system: FSx for Lustre linked to the data bucket, its network access and its
CSI driver.

Three pieces with three lifecycles, so the file system deploys in parallel with the cluster:

- ``SharedFileSystem`` (storage stack: needs only the VPC and the bucket): a PERSISTENT_2 file
  system in the training group's AZ, encrypted at rest, with a security group that lets its file
  servers talk Lustre to each other, and data repository associations that show the bucket's
  ``datasets/`` and ``models/`` prefixes as directories, imported lazily on first read.
- ``SharedFileSystemAccess`` (storage-access stack: needs the file system and the cluster): the
  Lustre ports between the file system and the cluster security group, which every kit node
  carries (system nodes by default, GPU nodes through their launch template).
- ``FsxCsiDriver`` (cluster stack): the ``aws-fsx-csi-driver`` EKS managed add-on, with its
  controller's IAM role bound through EKS Pod Identity.

Checkpoints get no data repository association on purpose. Auto-export copies each file to S3 on
its own, in no particular order, so S3 would hold torn saves and never say which saves are whole.
The launcher's upload (shards first, ``_COMPLETE.json`` manifest last) stays the only path from
``checkpoints/`` to S3, and restore trusts only saves with a manifest.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from infra import names, versions
from infra.constructs.nag import skip_checkov
from infra.constructs.pod_identity import pod_identity_principal

# Lustre traffic: TCP 988 and TCP 1018-1023, between the file servers and between the file system
# and its clients [FSx for Lustre User Guide, "File system access control with Amazon VPC" and
# "Creating an FSx for Lustre file system fails" (ports 988 and 1018-1023)].
# Lustre 2.15: "supported by all Lustre deployment types and recommended for all new file systems";
# without it PERSISTENT_2 defaults to 2.12 [FSx API Reference, CreateFileSystem,
# FileSystemTypeVersion]. The nodes' AL2023 kernel 6.12 is a current kernel: see the FSx guide's
# "Lustre file system and client kernel compatibility" before changing it.
LUSTRE_VERSION = "2.15"
LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))

DEPLOYMENT_TYPE = "PERSISTENT_2"
# Bucket prefixes shown in the file system, each at /<prefix> (mounted at /fsx/<prefix>).
LINKED_PREFIXES = (names.DATASETS_PREFIX, names.MODELS_PREFIX)
# Keep the file system's view of a linked prefix current as objects appear, change or go.
AUTO_IMPORT_EVENTS = ["NEW", "CHANGED", "DELETED"]

# The EKS managed add-on and the service account its controller runs as
# (kubernetes-sigs/aws-fsx-csi-driver@5b227125add7, tag helm-chart-aws-fsx-csi-driver-1.17.0,
# charts/aws-fsx-csi-driver/values.yaml:86-91: controller.serviceAccount.name).
FSX_CSI_ADDON_NAME = versions.FSX_CSI_ADDON_NAME
FSX_CSI_CONTROLLER_SERVICE_ACCOUNT = "fsx-csi-controller-sa"

# FSx reads and writes linked S3 prefixes as this service-linked role, one per file system
# (FSx for Lustre User Guide, "Working with server-side encrypted Amazon S3 buckets").
FSX_S3_ACCESS_ROLE_PATH = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
FSX_S3_ACCESS_ROLE_PREFIX = "AWSServiceRoleForFSxS3Access_"


def _port(low: int, high: int) -> ec2.Port:
    return ec2.Port.tcp(low) if low == high else ec2.Port.tcp_range(low, high)


def fsx_may_use_bucket_key(key: kms.IKey) -> None:
    """Let FSx's S3-access role use the bucket's KMS key, through S3, in this account.

    The role's name ends with the file system ID, which the data stack cannot know (the storage
    stack comes after it), so the statement names the role by pattern and narrows it by account
    and by S3 as the calling service. It does not name the bucket in the encryption context: the
    bucket already refers to its key, so the key's policy referring to the bucket would be a
    circular dependency. The key encrypts that one bucket only.
    """
    stack = Stack.of(key)
    key.add_to_resource_policy(iam.PolicyStatement(
        sid="FsxLinkedBucketObjects",
        principals=[iam.AnyPrincipal()],
        actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*",
                 "kms:DescribeKey"],
        resources=["*"],
        conditions={
            "StringEquals": {"kms:CallerAccount": stack.account,
                             "kms:ViaService": f"s3.{stack.region}.amazonaws.com"},
            "ArnLike": {"aws:PrincipalArn": f"arn:{stack.partition}:iam::{stack.account}:"
                                            f"{FSX_S3_ACCESS_ROLE_PATH}{FSX_S3_ACCESS_ROLE_PREFIX}*"},
        },
    ))
    skip_checkov(key, "CKV_AWS_33",
                 "Principal '*' only because FSx's S3-access role is named after the file system "
                 "ID, unknown here; the statement admits that role's ARN pattern in this account "
                 "(aws:PrincipalArn, kms:CallerAccount) and only through S3 (kms:ViaService).")


class SharedFileSystem(Construct):
    """FSx for Lustre PERSISTENT_2 in one AZ, linked to the data bucket's datasets/ and models/."""

    def __init__(self, scope: Construct, id: str, *, vpc: ec2.IVpc, availability_zone: str,
                 bucket: s3.IBucket, kms_key: kms.IKey | None, capacity_gib: int,
                 throughput_mb_s_per_tib: int, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
            description="FSx for Lustre file system of the RL kit (Lustre ports only)",
        )
        for low, high in LUSTRE_PORTS:
            self.security_group.add_ingress_rule(
                self.security_group, _port(low, high),
                "Lustre between the file servers of this file system")

        # The training nodes' AZ: Lustre traffic then never crosses an AZ (latency, data charges).
        subnet = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                    availability_zones=[availability_zone]).subnets[0]
        self.file_system = fsx.CfnFileSystem(
            self, "FileSystem",
            file_system_type="LUSTRE",
            storage_type="SSD",
            storage_capacity=capacity_gib,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            # Persistent file systems are always encrypted at rest; with no key FSx uses its
            # AWS-managed key. The bucket's own key when it has one, so both sides match.
            kms_key_id=kms_key.key_arn if kms_key is not None else None,
            file_system_type_version=LUSTRE_VERSION,
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type=DEPLOYMENT_TYPE,
                per_unit_storage_throughput=throughput_mb_s_per_tib,
            ),
        )
        # FSx checks at creation that its security group lets the file servers reach each other
        # on the Lustre ports, and fails (InvalidNetworkSettings) when the self-referencing rules
        # are not there yet. The reference to the group's ID orders the file system after the
        # group only, not after its separate ingress resources: wait for those too
        # [aws/aws-parallelcluster#6181, fixed by #6342 with this dependency; FSx for Lustre User
        # Guide, "You can't create a file system"].
        rules = [r for r in self.security_group.node.find_all()
                 if isinstance(r, ec2.CfnSecurityGroupIngress)]
        for rule in rules:
            self.file_system.node.add_dependency(rule)

        self.associations: dict[str, fsx.CfnDataRepositoryAssociation] = {}
        previous: fsx.CfnDataRepositoryAssociation | None = None
        for prefix in LINKED_PREFIXES:
            directory = prefix.rstrip("/")
            self.associations[directory] = fsx.CfnDataRepositoryAssociation(
                self, f"Link-{directory}",
                file_system_id=self.file_system.ref,
                file_system_path=f"/{directory}",
                data_repository_path=f"s3://{bucket.bucket_name}/{prefix}",
                # Directory listings now, file contents on first read (lazy load).
                batch_import_meta_data_on_create=True,
                s3=fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                        events=AUTO_IMPORT_EVENTS)),
            )
            # One at a time: associations on one file system created in parallel fail
            # [hashicorp/terraform-provider-aws#24678].
            if previous is not None:
                self.associations[directory].node.add_dependency(previous)
            previous = self.associations[directory]
        # One removal policy for the file system and for what it needs to keep working once its
        # stack is gone, so a retained file system outlives the stack whole: its security group
        # (CloudFormation would try to delete it under the file system), the group's
        # self-referencing Lustre rules, separate resources (deleted, the kept file servers can
        # no longer reach each other), and the links to S3. CloudFormation deletes an
        # association with DeleteDataInFileSystem false
        # [aws-cloudformation/aws-cloudformation-resource-providers-fsx@a944547dc6a0
        # aws-fsx-datarepositoryassociation/src/main/java/software/amazon/fsx/
        # datarepositoryassociation/Translator.java:127-133]: the files stay, but /datasets and
        # /models stop following the bucket, and a lazily imported file whose contents were never
        # read has no link left to load them through. The storage-access stack's rules are not
        # kept: they name the cluster's security group, which goes with the cluster, and a kept
        # rule naming it would block that delete.
        for resource in (self.file_system, self.security_group, *rules,
                         *self.associations.values()):
            resource.apply_removal_policy(removal_policy)


class SharedFileSystemAccess(Construct):
    """Lustre ports between the file system's security group and the nodes' (cluster) one."""

    def __init__(self, scope: Construct, id: str, *, file_system_security_group_id: str,
                 node_security_group_id: str) -> None:
        super().__init__(scope, id)
        for low, high in LUSTRE_PORTS:
            suffix = f"{low}" if low == high else f"{low}-{high}"
            ec2.CfnSecurityGroupIngress(
                self, f"FromNodes{suffix}",
                group_id=file_system_security_group_id,
                source_security_group_id=node_security_group_id,
                ip_protocol="tcp", from_port=low, to_port=high,
                description="Lustre from the EKS nodes (cluster security group)")
            # Lustre servers also open connections back to their clients [FSx for Lustre User
            # Guide, "Lustre client VPC security group rules"].
            ec2.CfnSecurityGroupIngress(
                self, f"ToNodes{suffix}",
                group_id=node_security_group_id,
                source_security_group_id=file_system_security_group_id,
                ip_protocol="tcp", from_port=low, to_port=high,
                description="Lustre from the RL kit's FSx file system")


class FsxCsiDriver(Construct):
    """The FSx for Lustre CSI driver as an EKS managed add-on, its controller on Pod Identity.

    Its node DaemonSet tolerates every taint by default (chart value ``node.tolerateAllTaints``),
    so it runs on the GPU nodes too.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster,
                 addon_version: str | None, depends_on: list[IConstruct]) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self, "ControllerRole",
            assumed_by=pod_identity_principal(cluster_name=cluster.cluster_name,
                                              namespace=names.KUBE_SYSTEM_NAMESPACE,
                                              service_account=FSX_CSI_CONTROLLER_SERVICE_ACCOUNT),
            # No permissions. The driver's install guide attaches AmazonFSxFullAccess for
            # dynamic provisioning; the controller calls the FSx API only in CreateVolume,
            # DeleteVolume, ValidateVolumeCapabilities and ControllerExpandVolume
            # [kubernetes-sigs/aws-fsx-csi-driver@0267bab6c628 (tag v1.9.0, the driver chart 1.17.0
            # runs; pkg/ is the same at the chart's tag, 5b227125add7) pkg/driver/controller.go:
            # d.cloud calls at :143-322, :344, :404, :471-504].
            # The kit's volume is a static PersistentVolume with reclaim policy Retain whose claim
            # is never expanded, so none of those runs. The role stays so that the add-on's
            # Pod Identity association (and the SDK's credential chain) has something to bind.
            description="FSx for Lustre CSI driver controller (EKS Pod Identity; no permissions: "
                        "static provisioning only)",
        )
        self.addon = eks.CfnAddon(
            self, "Addon",
            addon_name=FSX_CSI_ADDON_NAME,
            cluster_name=cluster.cluster_name,
            addon_version=addon_version,
            pod_identity_associations=[eks.CfnAddon.PodIdentityAssociationProperty(
                service_account=FSX_CSI_CONTROLLER_SERVICE_ACCOUNT, role_arn=self.role.role_arn)],
            # Like every add-on the kit installs: its fields are the kit's (see KitCluster).
            resolve_conflicts="OVERWRITE",
        )
        for dependency in depends_on:
            self.addon.node.add_dependency(dependency)

"""What every node the kit launches gets from its launch template, GPU or system: instance metadata
through IMDSv2 only, one hop, and an encrypted gp3 root volume. One place, so the two kinds of
node group cannot drift apart (a managed node group without a launch template gets EKS's
defaults instead: hop limit 2, and a root volume encrypted only where the account's EBS default
encryption is on). And what every managed node group gets: the cluster's Kubernetes version.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from infra import names


def metadata_options() -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    """IMDSv2 only, and one hop: pods (one hop further, behind the pod network) cannot reach IMDS
    and take the node role. They use Pod Identity; the node daemons that read IMDS (aws-node,
    kube-proxy, the Pod Identity agent, the device plugins, Fluent Bit, the CloudWatch and node
    monitoring agents) run on the host network and are unaffected."""
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(
        http_tokens="required", http_endpoint="enabled", http_put_response_hop_limit=1)


def root_volume(size_gib: int) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    """An encrypted gp3 root volume of ``size_gib`` GiB, deleted with its instance. Encrypted with
    the account's default EBS key (aws/ebs unless the account names another)."""
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=names.ROOT_DEVICE_NAME,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(volume_size=size_gib, volume_type="gp3",
                                              encrypted=True, delete_on_termination=True))


def node_version_override(nodegroup: eks.Nodegroup, kubernetes_version: str) -> None:
    """Name the cluster's Kubernetes version as the group's ``Version``. aws-cdk-lib 2.275.0's
    aws-eks-v2 Nodegroup sets only ``ReleaseVersion`` (lib/managed-nodegroup.js), and a group
    without ``Version`` keeps the version it was created at when the cluster moves: the control
    plane alone upgrades, and the next upgrade fails, since EKS UpdateClusterVersion requires
    every managed node group at the cluster's version (botocore 1.44.8
    botocore/data/eks/2017-11-01/service-2.json.gz, UpdateClusterVersion). With it, the deploy
    that moves the cluster then moves each group (the group depends on the cluster) in a rolling
    update of its nodes (Version is not create-only: cfn-lint==1.58.0
    cfnlint/data/schemas/resources/e703fb10b42108ae.json; its update handler may call
    eks:UpdateNodegroupVersion): docs/operations.md, "Kubernetes upgrades"."""
    nodegroup.node.default_child.add_property_override("Version", kubernetes_version)

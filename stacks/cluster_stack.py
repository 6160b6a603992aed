"""Cluster stack: EKS control plane, managed add-ons, system nodes and the trainer's identity."""

from __future__ import annotations

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import names, versions
from infra.config import KitConfig
from infra.constructs.cluster import KitCluster
from infra.constructs.cluster_addons import ClusterAddons
from infra.constructs.network import import_existing_vpc
from infra.constructs.shared_filesystem import FsxCsiDriver
from infra.constructs.trainer_identity import bind_trainer_role
from infra.names import OutputKeys


class ClusterStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, vpc: ec2.IVpc | None,
                 trainer_role: iam.IRole, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        if vpc is None:  # an existing VPC is imported here; there is no network stack then
            vpc = import_existing_vpc(self, "ExistingVpc", existing=config.vpc.existing,
                                      availability_zones=config.availability_zones)
        self.vpc = vpc
        kit_cluster = KitCluster(
            self, "Eks", vpc=vpc,
            kubernetes_version=config.kubernetes_version,
            endpoint_access=config.endpoint_access,
            admin_role_arns=config.admin_role_arns,
            system_nodes=config.system_nodes,
            managed_addons=versions.MANAGED_ADDONS,
            node_monitoring_agent=config.node_health.monitoring_agent,
            gpu_tolerations=config.gpu_tolerations(),
            kubectl_layer_factory=versions.kubectl_layer_class(config.kubernetes_version),
            # The cluster holds no data: always delete it with the stack. Its secrets key is
            # kept unless the environment is ephemeral.
            key_removal_policy=RemovalPolicy.DESTROY if config.ephemeral else RemovalPolicy.RETAIN,
        )
        self.cluster = kit_cluster.cluster
        self.addons = ClusterAddons(self, "Addons", cluster=self.cluster, addons=config.addons,
                                    gpu_tolerations=config.gpu_tolerations(),
                                    system_nodegroup=kit_cluster.system_nodegroup)
        bind_trainer_role(self, "TrainerPodIdentity", cluster=self.cluster, role=trainer_role)
        if config.storage.shared_filesystem.type == "fsx-lustre":
            # The add-on's controller gets its role through Pod Identity, so the agent add-on
            # must be there first; the system nodes run the controller.
            self.fsx_csi_driver = FsxCsiDriver(
                self, "FsxCsiDriver", cluster=self.cluster, addon_version=versions.FSX_CSI_ADDON,
                depends_on=[kit_cluster.addons["eks-pod-identity-agent"],
                            kit_cluster.system_nodegroup])

        cluster_name = self.cluster.cluster_name
        CfnOutput(self, OutputKeys.CLUSTER_NAME, value=cluster_name)
        CfnOutput(self, OutputKeys.REGION, value=self.region)
        CfnOutput(self, OutputKeys.CLUSTER_ENDPOINT, value=self.cluster.cluster_endpoint)
        CfnOutput(self, OutputKeys.KUBECONFIG_COMMAND,
                  value=f"aws eks update-kubeconfig --region {config.region} --name {cluster_name}")
        CfnOutput(self, OutputKeys.TRAINER_NAMESPACE, value=names.TRAINER_NAMESPACE)
        CfnOutput(self, OutputKeys.TRAINER_SERVICE_ACCOUNT, value=names.TRAINER_SERVICE_ACCOUNT)

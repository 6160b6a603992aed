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
from infra.constructs.observability import ClusterLogGroups, RunDashboard
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
        # The cluster's control-plane log group is named after it, so the name is fixed and the
        # group is created first (infra/constructs/observability.py).
        cluster_name = names.eks_cluster_name(config.name)
        observability = config.observability
        log_groups = ClusterLogGroups(
            self, "Logs", cluster_name=cluster_name,
            retention_days=observability.log_retention_days,
            # Logs live as long as the environment; the retention period bounds them before that.
            removal_policy=RemovalPolicy.DESTROY,
        ) if observability.enabled else None
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
            ami_release_version=config.node_ami_release_version,
            cluster_name=cluster_name,
            control_plane_logs=log_groups is not None,
            log_retention_days=observability.log_retention_days,
            vpc_cni_env=config.vpc.pod_addresses.cni_env() if config.vpc.pod_addresses else None,
        )
        self.cluster = kit_cluster.cluster
        if log_groups is not None:
            self.cluster.node.add_dependency(log_groups.control_plane)
        self.addons = ClusterAddons(self, "Addons", cluster=self.cluster, config=config,
                                    system_nodegroup=kit_cluster.system_nodegroup)
        bind_trainer_role(self, "TrainerPodIdentity", cluster=self.cluster, role=trainer_role)
        if config.storage.shared_filesystem.type == "fsx-lustre":
            # The add-on's controller gets its role through Pod Identity, so the agent add-on
            # must be there first; the system nodes run the controller.
            self.fsx_csi_driver = FsxCsiDriver(
                self, "FsxCsiDriver", cluster=self.cluster, addon_version=versions.FSX_CSI_ADDON,
                depends_on=[kit_cluster.addons["eks-pod-identity-agent"],
                            kit_cluster.system_nodegroup])

        if log_groups is not None:
            # The add-on itself is in the observability stack, which depends on this one.
            # Fluent Bit and the CloudWatch agent run on every node and write into these groups:
            # the system nodes (the last nodes of the cluster; the GPU stacks go first) are
            # created after the groups and so deleted before them, and no log line can arrive
            # once a group is gone, whatever a Fluent Bit output says about creating groups.
            for group in log_groups.groups.values():
                kit_cluster.system_nodegroup.node.add_dependency(group)
            dashboard = RunDashboard(self, "RunDashboard",
                                     dashboard_name=names.dashboard_name(config.name, config.region),
                                     cluster_name=cluster_name, log_groups=log_groups,
                                     trainer_namespace=names.TRAINER_NAMESPACE)
            CfnOutput(self, OutputKeys.DASHBOARD_NAME, value=dashboard.dashboard.dashboard_name)

        cluster_name = self.cluster.cluster_name
        CfnOutput(self, OutputKeys.CLUSTER_NAME, value=cluster_name)
        CfnOutput(self, OutputKeys.REGION, value=self.region)
        CfnOutput(self, OutputKeys.CLUSTER_ENDPOINT, value=self.cluster.cluster_endpoint)
        CfnOutput(self, OutputKeys.KUBECONFIG_COMMAND,
                  value=f"aws eks update-kubeconfig --region {config.region} --name {cluster_name}")
        CfnOutput(self, OutputKeys.TRAINER_NAMESPACE, value=names.TRAINER_NAMESPACE)
        CfnOutput(self, OutputKeys.TRAINER_SERVICE_ACCOUNT, value=names.TRAINER_SERVICE_ACCOUNT)

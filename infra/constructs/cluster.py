"""The EKS control plane, its managed add-ons, admin access and the system node group."""

from __future__ import annotations

from aws_cdk import Annotations, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import names, versions
from infra.config import EndpointAccessConfig, SystemNodesConfig
from infra.constructs import node_hardening, node_roles
from infra.constructs.node_roles import restrict_node_role
from infra.constructs.nag import (
    acknowledge,
    acknowledge_eks_node_role,
    acknowledge_kubectl_provider,
    managed_policy_finding,
)



class KitCluster(Construct):
    """An ``aws_eks_v2`` cluster: native ``AWS::EKS::Cluster``, no custom resources.

    API authentication mode with access entries (only the configured admin roles; the creator
    gets none), all control-plane log types, secrets envelope encryption with a rotating KMS key,
    the EKS managed add-ons the kit relies on (pod networking, DNS, service proxy, Pod Identity,
    and optionally the node monitoring agent) and a small AL2023 node group for CPU work.
    """

    def __init__(self, scope: Construct, id: str, *, vpc: ec2.IVpc, kubernetes_version: str,
                 endpoint_access: EndpointAccessConfig, admin_role_arns: list[str],
                 system_nodes: SystemNodesConfig, managed_addons: dict[str, str | None],
                 node_monitoring_agent: bool, gpu_tolerations: list[dict[str, str]],
                 kubectl_layer_factory, log_retention_days: int,
                 ami_release_version: str | None = None,
                 cluster_name: str | None = None,
                 control_plane_logs: bool = True,
                 vpc_cni_env: dict[str, str] | None = None) -> None:
        super().__init__(scope, id)
        # The key lives as long as the secrets it protects: the cluster is always deleted with
        # its stack, so a kept key would only be a monthly charge and a teardown leftover. Deleting
        # it schedules the deletion (KMS waits 30 days), so an accidental delete can be undone.
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True,
                                   description="Envelope encryption of Kubernetes secrets",
                                   removal_policy=RemovalPolicy.DESTROY)
        # Public access only for the CIDRs the config lists (validation requires at least one).
        access = (eks.EndpointAccess.PRIVATE if endpoint_access.mode == "private" else
                  eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*endpoint_access.public_cidrs))
        self.cluster = eks.Cluster(
            self, "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=access,
            # Capacity is added explicitly below (system) and by the GPU stacks.
            default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            # Only into the group the kit creates with a retention (ClusterLogGroups): without it
            # EKS creates /aws/eks/<name>/cluster itself, kept forever and left after teardown.
            cluster_logging=[
                eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR, eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ] if control_plane_logs else None,
            secrets_encryption_key=self.secrets_key,
            # Explicitly off: CloudFormation's role creates the cluster, so an admin entry for the
            # creator would grant nobody a human can use. People get access from admin_role_arns
            # only; the kubectl handler's role gets its own entry from CDK (docs/operations.md).
            bootstrap_cluster_creator_admin_permissions=False,
            removal_policy=RemovalPolicy.DESTROY,
            # The one Lambda-backed provider the kit accepts: Helm charts have no native
            # CloudFormation resource. Its kubectl layer matches the cluster's minor version.
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer_factory(self, "KubectlLayer")),
        )
        provider = self.cluster.node.find_child("KubectlProvider")
        acknowledge_kubectl_provider(provider)
        # The provider's log groups are named after its functions, so CloudFormation makes them
        # after the functions and, with nothing depending on them, deletes them while Helm
        # releases are still uninstalled through those functions; Lambda then recreates them
        # untagged and never expiring (aws/aws-cdk#31487), and a first invocation that beat the
        # group's creation would fail it with AlreadyExists. Every kubectl resource waits on the
        # ready barrier: the barrier waits on the groups, so they outlive the last invocation.
        barrier = self.cluster.node.find_child("KubectlReadyBarrier")
        for group in provider.node.find_all():
            if isinstance(group, logs.CfnLogGroup):
                barrier.node.add_dependency(group)
                # observability.log_retention_days, not CDK's 731 days: an in-place update (only
                # LogGroupName is create-only in AWS::Logs::LogGroup's schema, cfn-lint==1.58.0
                # cfnlint/data/schemas/resources/8614d83fb64a3f33.json createOnlyProperties, and
                # it stays the function's).
                group.retention_in_days = log_retention_days
        # Only an imported VPC (vpc.existing) triggers this: its owner tags its subnets. The kit
        # creates no load balancers; README "Existing VPC" lists the tags the AWS Load Balancer
        # Controller needs.
        Annotations.of(self.cluster).acknowledge_warning(
            "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
            "Imported subnets are tagged by their owner; see README, Existing VPC.")
        acknowledge(self.cluster.role, managed_policy_finding("AmazonEKSClusterPolicy"),
                    "The EKS cluster role uses AmazonEKSClusterPolicy, the AWS-managed policy EKS "
                    "documents for it.")

        for i, arn in enumerate(admin_role_arns):
            eks.AccessEntry(
                self, f"Admin{i}",
                cluster=self.cluster,
                principal=arn,
                access_policies=[eks.AccessPolicy.from_access_policy_name(
                    "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)],
            )

        # The GPU groups' IMDS and root-volume settings (node_hardening). Nothing on a system node
        # needs IMDS from a pod's network namespace: the add-ons there use Pod Identity, and the
        # node daemons run on the host network. One pod tries: the FSx CSI controller, whose
        # region comes from IMDS unless AWS_REGION is set [kubernetes-sigs/aws-fsx-csi-driver
        # v1.9.0 pkg/driver/controller.go newControllerService]; without IMDS it reads its node
        # from the Kubernetes API (pkg/cloud/metadata.go), which gives no region. Its only AWS
        # call then is the file-system cache poll, which its role (no permissions,
        # shared_filesystem.py) already denies: the kit's volume is static.
        # Replacing a group created without a launch template: docs/operations.md, "IMDS on
        # the system nodes". No NodegroupName, so CloudFormation names the new group itself.
        self.system_launch_template = ec2.CfnLaunchTemplate(
            self, "SystemNodesLaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=node_hardening.metadata_options(),
                block_device_mappings=[node_hardening.root_volume(system_nodes.root_volume_gib)],
            ),
        )
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            instance_types=[ec2.InstanceType(system_nodes.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            release_version=ami_release_version,  # the GPU groups' release (efa_node_group.py)
            min_size=system_nodes.min_size,
            desired_size=system_nodes.desired_size,
            max_size=system_nodes.max_size,
            # The root volume is the launch template's: EKS refuses a disk size beside one, and
            # so does CDK (aws-cdk-lib 2.275.0 aws-eks-v2/lib/managed-nodegroup.js,
            # DiskSizeMustBeSpecifiedInLaunchTemplate).
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.system_launch_template.ref,
                version=self.system_launch_template.attr_latest_version_number),
            labels={names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM},
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        )
        # The group follows the control plane (node_hardening.node_version_override says why).
        node_hardening.node_version_override(self.system_nodegroup, kubernetes_version)
        restrict_node_role(self.system_nodegroup.role)
        acknowledge_eks_node_role(self.system_nodegroup.role)

        # The VPC CNI enforces Kubernetes NetworkPolicy (the trainer namespace's ingress policy,
        # manifests/templates/networkpolicy.yaml.j2) only when asked to [EKS user guide, "Limit
        # Pod traffic with Kubernetes network policies"].
        # ``vpc_cni_env``: the aws-node environment (vpc.pod_addresses), which the add-on's
        # configuration takes under "env" (aws/amazon-vpc-cni-k8s@0c65d58cf2b4, tag v1.23.0,
        # charts/aws-vpc-cni/values.yaml:74 `env`; the kit pins no add-on build, EKS picks it).
        addon_config = {"vpc-cni": {"enableNetworkPolicy": "true",
                                    **({"env": vpc_cni_env} if vpc_cni_env else {})}}
        self.addons = {
            name: eks.Addon(self, f"Addon-{name}", cluster=self.cluster, addon_name=name,
                            addon_version=version, configuration_values=addon_config.get(name))
            for name, version in managed_addons.items()
        }
        # CoreDNS is a Deployment: created before any node exists, the add-on sits DEGRADED until
        # nodes join. The system nodes are its home.
        if "coredns" in self.addons:
            self.addons["coredns"].node.add_dependency(self.system_nodegroup)
        if node_monitoring_agent:
            # The agent itself tolerates every taint; its DCGM host-engine DaemonSet tolerates none
            # by default and would miss the tainted GPU nodes [aws/eks-node-monitoring-agent
            # 51af549 charts/eks-node-monitoring-agent/values.yaml `dcgmAgent.tolerations`; the
            # add-on schema charts/configuration.schema.json accepts it].
            self.addons[versions.NODE_MONITORING_ADDON] = eks.Addon(
                self, f"Addon-{versions.NODE_MONITORING_ADDON}", cluster=self.cluster,
                addon_name=versions.NODE_MONITORING_ADDON,
                addon_version=versions.NODE_MONITORING_ADDON_VERSION,
                configuration_values={"dcgmAgent": {"tolerations": gpu_tolerations}},
            )
        # EKS bootstraps its own vpc-cni, CoreDNS and kube-proxy into every new cluster; a managed
        # add-on created over them with ResolveConflicts NONE (the CloudFormation default) fails
        # on the first field they disagree on, e.g. vpc-cni's network policy switch
        # [aws/amazon-network-policy-controller-k8s#200]. The kit owns these add-ons' settings,
        # so the managed add-on overwrites the bootstrapped fields. Turning the bootstrap off
        # instead (BootstrapSelfManagedAddons: false, as terraform-aws-eks does) would replace
        # every deployed cluster: it is a create-time setting of the cluster (EKS CreateCluster;
        # the Terraform AWS provider forces a new cluster when it changes). docs/operations.md,
        # "Over time", records the choice.
        for addon in self.addons.values():
            addon.node.default_child.resolve_conflicts = "OVERWRITE"
        # The VPC CNI on a role of its own through Pod Identity, not the node role
        # (infra/constructs/node_roles.py). Pod Identity sets a pod's credentials when the pod is
        # created, so the nodes come after the association and the agent: the first aws-node pod
        # on a node already has them (kube-proxy too, as the creation order asks).
        if node_roles.VPC_CNI_ADDON in self.addons:
            self.vpc_cni_role = node_roles.vpc_cni_role(self, "VpcCniRole", cluster_name=cluster_name)
            self.addons[node_roles.VPC_CNI_ADDON].node.default_child.pod_identity_associations = [
                eks.CfnAddon.PodIdentityAssociationProperty(
                    service_account=node_roles.VPC_CNI_SERVICE_ACCOUNT,
                    role_arn=self.vpc_cni_role.role_arn)]
            for name in (node_roles.VPC_CNI_ADDON, "kube-proxy", "eks-pod-identity-agent"):
                if name in self.addons:
                    self.system_nodegroup.node.add_dependency(self.addons[name])
            # On an update of a deployed cluster, the node role loses the policy only after the
            # association exists (docs/operations.md: then restart aws-node once).
            self.system_nodegroup.role.node.add_dependency(
                self.addons[node_roles.VPC_CNI_ADDON])

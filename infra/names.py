"""Names and labels that the CDK side and the Kubernetes manifests must agree on, defined once.

The classic EKS + EFA bug is a launch template saying one thing and a pod asking for another; the
same goes for taints, namespaces and service-account names. Everything that crosses that line
lives here (counts live in ``infra.catalog``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # Kubernetes spelling: NoSchedule | PreferNoSchedule | NoExecute

    def toleration(self) -> dict[str, str]:
        """The pod toleration for this taint's key: ``Exists``, so a changed value or effect on
        the node (or a user's extra taint with the same key) can never strand a pod."""
        return {"key": self.key, "operator": "Exists"}


# Extended resources a GPU pod requests and the device plugins advertise on each node: the
# launch template and the catalog size them, the manifests request them, the scheduling check and
# the gate compare them with what a node offers.
GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA device plugin
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # EFA device plugin: a pod owns the node's EFA devices
HUGEPAGES_2MI_RESOURCE = "hugepages-2Mi"  # reserved by the launch template (HUGEPAGES_2MI_MIB)

# Every kit GPU node carries this taint (keyed like the GPU resource, the EKS convention), so only
# pods that ask for GPUs land there.
GPU_TAINT = Taint(key=GPU_RESOURCE, value="true", effect="NoSchedule")

# Startup taint of GPU nodes in a config with the FSx file system: pods that need /fsx must not
# start before the FSx CSI node plugin runs on the node. The plugin removes this key from its own
# node once ready, whatever the effect; NoExecute is the one its docs recommend
# [kubernetes-sigs/aws-fsx-csi-driver@5b227125add7 (tag helm-chart-aws-fsx-csi-driver-1.17.0)
# docs/install.md:79 "Configure node startup taint"; pkg/driver/constants.go:11
# AgentNotReadyNodeTaintKey; pkg/driver/node.go:335 removeNotReadyTaint]. Its node DaemonSet
# tolerates it (all taints by default, else this key explicitly: same commit,
# charts/aws-fsx-csi-driver/templates/node-daemonset.yaml:47-54).
FSX_AGENT_NOT_READY_TAINT = Taint(key="fsx.csi.aws.com/agent-not-ready", value="",
                                  effect="NoExecute")
# Taints that an agent on the node removes by itself once it is ready -> that agent's DaemonSet.
# The scheduling check requires the agent to tolerate the taint and land on the node, and lets
# every other pod wait it out instead of tolerating it.
SELF_REMOVING_TAINTS = {FSX_AGENT_NOT_READY_TAINT.key: "fsx-csi-node"}

# The root device of the EKS-optimized AL2023 AMIs: the launch templates size and encrypt it
# (infra/constructs/node_hardening.py); preflight and the scheduling check read its size there.
ROOT_DEVICE_NAME = "/dev/xvda"

# Labels the kit puts on its nodes (managed node group labels) and selects on in manifests/charts.
LABEL_PREFIX = "rlkit.aws"
NODE_ROLE_LABEL = f"{LABEL_PREFIX}/node-role"  # "gpu" | "system"
NODE_ROLE_GPU = "gpu"
NODE_ROLE_SYSTEM = "system"
EFA_LABEL = f"{LABEL_PREFIX}/efa"  # "true" on EFA node groups
NODE_GROUP_LABEL = f"{LABEL_PREFIX}/node-group"  # the config's node-group name
ZONE_LABEL = "topology.kubernetes.io/zone"  # well-known label set by the kubelet
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # well-known label
HOSTNAME_LABEL = "kubernetes.io/hostname"  # well-known label: one value per node
# KubeRay v1.7.0's labels on every pod of a Ray cluster, over any a template sets: the cluster's
# name and the pod's node type, "head" for the head (ray-project/kuberay@59d663aeec13
# ray-operator/controllers/ray/utils/constant.go:19-20, common/pod.go:1167-1190 labelPod;
# apis/ray/v1/raycluster_types.go:683).
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_HEAD_NODE_TYPE = "head"
# The NVIDIA device plugin chart's required node affinity accepts this label (or NFD's PCI labels,
# which the kit does not install) [NVIDIA/k8s-device-plugin v0.20.0
# deployments/helm/nvidia-device-plugin/values.yaml `affinity`]. nodeadm sets it by itself only
# from kubelet 1.35 [awslabs/amazon-eks-ami 81fec2e nodeadm/doc/api-concepts.md], so the kit puts
# it on every GPU node group, whatever the Kubernetes version.
NVIDIA_GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

# 2 MiB huge pages each GPU pod requests (every EFA trainer/benchmark manifest on EKS asks for
# 5120Mi [design.md]). The GPU launch template reserves exactly this before kubelet starts, and the
# manifests request it: one number for both.
HUGEPAGES_2MI_MIB = 5120


def image_tag(version: str, backend: str) -> str:
    """The trainer image tag the build pushes and the manifests pull: each expert-parallel backend
    is its own build, tagged ``<training.image_tag>-<backend>``."""
    return f"{version}-{backend}"


def gpu_node_labels(group: str) -> dict[str, str]:
    """Labels the kit sets on every node of GPU group ``group``; manifests and charts select on
    these (the node group adds the user's own labels on top)."""
    return {NODE_ROLE_LABEL: NODE_ROLE_GPU, EFA_LABEL: "true", NODE_GROUP_LABEL: group}


# Kubernetes' own namespace: where EKS installs the vpc-cni and aws-fsx-csi-driver add-ons' pods
# [EKS user guide: Amazon VPC CNI (aws-node); "Deploy the FSx for Lustre driver"], and where the
# kit installs the EFA device plugin.
KUBE_SYSTEM_NAMESPACE = "kube-system"

# Where the trainer runs and who it is: the Pod Identity association and the manifests both use it.
TRAINER_NAMESPACE = "rl-training"
TRAINER_SERVICE_ACCOUNT = "rl-trainer"

# Prefixes inside the data bucket; the trainer's role may touch only these.
CHECKPOINTS_PREFIX = "checkpoints/"
DATASETS_PREFIX = "datasets/"
MODELS_PREFIX = "models/"
# Trainer image build contexts (`rlkit image build` uploads, the CodeBuild project reads); no
# other role touches this prefix.
IMAGE_BUILDS_PREFIX = "image-builds/"
# The image build project's limits (infra/constructs/trainer_image_build.py): a build older than
# their sum has ended, so `rlkit image build` looks no further back for a running one.
IMAGE_BUILD_TIMEOUT_HOURS = 4
IMAGE_BUILD_QUEUED_TIMEOUT_HOURS = 1
# A multi-arch build (an arm64 GPU group: the arm64 half compiles under QEMU on the x86 host, many
# times slower) gets this limit per build (StartBuild timeoutInMinutesOverride): a build killed by
# the timeout exports no layer cache, so every retry started cold. It stays under the 12 hours an
# ECR login lasts from pre_build's login, which the first buildx run's cache export still uses;
# the buildspec logs in again before the push.
IMAGE_BUILD_MULTIARCH_TIMEOUT_HOURS = 10
# A build context is read once, when its build starts (at most the queued timeout after
# StartBuild); the data bucket expires image-builds/ objects this many days after their upload
# (each distinct context is a new key, so they would pile up for good). Two weeks lets a rebuild
# or `aws codebuild retry-build` of a recent context skip the upload; `rlkit image build` puts a
# key again that is within IMAGE_BUILD_CONTEXT_REFRESH_DAYS of expiry, so no build starts on a
# context about to go.
IMAGE_BUILD_CONTEXT_EXPIRY_DAYS = 14
IMAGE_BUILD_CONTEXT_REFRESH_DAYS = 2

# The shared file system (FSx for Lustre): mounted at the same path in the Ray head, the workers
# and KubeRay's submitter. Its datasets/ and models/ directories are linked to the bucket prefixes
# of the same name (read lazily from S3); checkpoints/ is local to the file system and reaches S3
# only through the launcher's manifest-last upload.
SHARED_FS_MOUNT_PATH = "/fsx"
SHARED_FS_DATASETS_DIR = f"{SHARED_FS_MOUNT_PATH}/{DATASETS_PREFIX.rstrip('/')}"
SHARED_FS_MODELS_DIR = f"{SHARED_FS_MOUNT_PATH}/{MODELS_PREFIX.rstrip('/')}"
SHARED_FS_CHECKPOINTS_DIR = f"{SHARED_FS_MOUNT_PATH}/{CHECKPOINTS_PREFIX.rstrip('/')}"
SHARED_FS_CSI_DRIVER = "fsx.csi.aws.com"  # the FSx for Lustre CSI driver's name

# Tag put on every resource so teardown can find leftovers (resource groups tagging API).
ENVIRONMENT_TAG = "rlkit:environment"
TTL_TAG = "rlkit:ttl-hours"
# Tag on a GPU node group and on every instance, volume and interface launched for it: the group.
NODE_GROUP_TAG = "rlkit:node-group"


def stack_names(prefix: str) -> dict[str, str]:
    """CloudFormation stack names for an environment; GPU stacks come from ``gpu_stack_name``."""
    return {
        "network": f"{prefix}-network",
        "data": f"{prefix}-data",
        "cluster": f"{prefix}-cluster",
        # The shared file system deploys in parallel with the cluster (it needs only the network
        # and the bucket); the access stack then opens its Lustre ports to the cluster's nodes.
        "storage": f"{prefix}-storage",
        "storage_access": f"{prefix}-storage-access",
        # The CloudWatch observability add-on alone: a configuration EKS rejects fails this
        # stack, not the cluster's (stacks/observability_stack.py).
        "observability": f"{prefix}-observability",
    }


def eks_cluster_name(prefix: str) -> str:
    """The EKS cluster's name. Fixed (not generated by CloudFormation) because EKS writes its
    control-plane logs to a log group named after the cluster, which the stack creates first."""
    return prefix


# CloudWatch log groups. EKS sends control-plane logs to /aws/eks/<cluster>/cluster [EKS user
# guide, "Send control plane logs to CloudWatch Logs"]; the CloudWatch Observability add-on's
# Fluent Bit and agent write /aws/containerinsights/<cluster>/<kind> [CloudWatch user guide,
# Container Insights, "Send logs to CloudWatch Logs"]. The kit adds one group for training-metric
# lines in embedded metric format (its own Fluent Bit output, infra/constructs/observability.py).
CONTAINER_INSIGHTS_LOG_KINDS = ("application", "dataplane", "host", "performance")
TRAINING_METRICS_LOG_KIND = "training-metrics"
# The metric namespace of the training metrics is the trainer's: infra.trainer_contract.METRICS_NAMESPACE.


def control_plane_log_group(cluster_name: str) -> str:
    return f"/aws/eks/{cluster_name}/cluster"


def container_insights_log_group(cluster_name: str, kind: str) -> str:
    return f"/aws/containerinsights/{cluster_name}/{kind}"


def dashboard_name(prefix: str, region: str) -> str:
    """CloudWatch dashboards are global to the account, not regional: the same environment name
    deployed in two regions must not overwrite one dashboard [CloudWatch PutDashboard: "a
    dashboard is a global resource"]."""
    return f"{prefix}-{region}-run"


GPU_STACK_INFIX = "-gpu-"
# GPU node-group names (they end GPU stack names); the config validates against the same pattern.
GPU_GROUP_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,19}")


def gpu_stack_name(prefix: str, group: str) -> str:
    return f"{prefix}{GPU_STACK_INFIX}{group}"


def environment_of_stack(stack: str) -> str | None:
    """The environment whose stack ``stack`` is (the ``prefix`` of ``stack_names`` /
    ``gpu_stack_name``), or None for a name no environment's stack has. Unambiguous because
    names that could collide are refused (``environment_names_can_collide``)."""
    if GPU_STACK_INFIX in stack:
        env, group = stack.split(GPU_STACK_INFIX, 1)
        return env if env and GPU_GROUP_NAME_RE.fullmatch(group) else None
    for suffix in stack_names("").values():  # "-network", "-data", ...: each role's suffix
        if stack.endswith(suffix) and len(stack) > len(suffix):
            return stack.removesuffix(suffix)
    return None


def environment_names_can_collide(name: str) -> bool:
    """Whether stacks of an environment with this name could share a name with another
    environment's GPU stacks: ``a-gpu`` has ``a-gpu-network``, which is also the GPU stack of
    group ``network`` in environment ``a``. Names with a ``gpu`` word after the first are
    reserved for that reason, which makes a collision impossible (the part before the first
    ``-gpu-`` of a stack name is then always the environment's own name)."""
    return GPU_STACK_INFIX in f"{name}-"


class OutputKeys:
    """CloudFormation output keys; the renderer and the CLI read outputs by these names."""

    CLUSTER_NAME = "ClusterName"
    REGION = "Region"
    CLUSTER_ENDPOINT = "ClusterEndpoint"
    KUBECONFIG_COMMAND = "UpdateKubeconfigCommand"
    TRAINER_NAMESPACE = "TrainerNamespace"
    TRAINER_SERVICE_ACCOUNT = "TrainerServiceAccount"
    TRAINER_ROLE_ARN = "TrainerRoleArn"
    BUCKET_NAME = "DataBucketName"
    ECR_REPOSITORY_URI = "EcrRepositoryUri"
    NODEGROUP_NAME = "NodegroupName"
    NODE_ROLE_ARN = "NodeRoleArn"
    VPC_ID = "VpcId"
    SHARED_FS_ID = "SharedFileSystemId"
    SHARED_FS_DNS_NAME = "SharedFileSystemDnsName"
    SHARED_FS_MOUNT_NAME = "SharedFileSystemMountName"
    DASHBOARD_NAME = "DashboardName"
    IMAGE_BUILD_PROJECT = "ImageBuildProjectName"
    IMAGE_BUILD_LOG_GROUP = "ImageBuildLogGroupName"
    IMAGE_CACHE_REPOSITORY_URI = "ImageCacheRepositoryUri"

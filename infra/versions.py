"""Every version the kit pins for things that run on (or build) the cluster, in one place.

Each entry names its source. Change a version here and the CDK side, the manifests and the
preflight checks all follow.
"""

from __future__ import annotations

# Kubernetes versions the kit is tested with -> the Python package and module of the matching
# kubectl Lambda layer (PyPI: aws-cdk.lambda-layer-kubectl-vNN; aws_eks_v2 needs one whose minor
# matches the cluster for Helm charts and manifests). The enum name is aws_eks_v2.KubernetesVersion.
KUBERNETES_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {"layer_module": "aws_cdk.lambda_layer_kubectl_v33", "layer_class": "KubectlV33Layer"},
    "1.34": {"layer_module": "aws_cdk.lambda_layer_kubectl_v34", "layer_class": "KubectlV34Layer"},
    "1.35": {"layer_module": "aws_cdk.lambda_layer_kubectl_v35", "layer_class": "KubectlV35Layer"},
}
DEFAULT_KUBERNETES_VERSION = "1.34"


def kubectl_layer_class(kubernetes_version: str):
    """The KubectlVNNLayer construct class for a supported Kubernetes version."""
    import importlib

    spec = KUBERNETES_VERSIONS[kubernetes_version]
    return getattr(importlib.import_module(spec["layer_module"]), spec["layer_class"])

# EKS managed add-ons. None = the default version EKS picks for the cluster's Kubernetes version
# (`aws eks describe-addon-versions --kubernetes-version 1.34 --addon-name vpc-cni`). Pin a build
# here (e.g. "v1.19.5-eksbuild.1") once it has been verified on a live cluster.
# vpc-cni must be >= 1.18.4 for efa-only interfaces [AWS EFA docs, "EFA-only interfaces"]; every
# EKS default for Kubernetes >= 1.31 already is.
MANAGED_ADDONS: dict[str, str | None] = {
    "vpc-cni": None,
    "coredns": None,
    "kube-proxy": None,
    "eks-pod-identity-agent": None,
}

# System (non-GPU) node group default instance type: general purpose, x86_64, AL2023.
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.xlarge"


# Helm charts the cluster stack installs. `versions` lists what the kit knows to work with its
# values; config validation refuses anything else (a version override must be added here first).
HELM_CHARTS: dict[str, dict] = {
    # eks-charts stable/aws-efa-k8s-device-plugin (https://github.com/aws/eks-charts). v0.5.7 is the
    # version aws-ia/terraform-aws-eks-blueprints pins in patterns/targeted-odcr/helm.tf; its
    # defaults tolerate nothing, so the kit passes the GPU taint's toleration.
    "efa_device_plugin": {
        "repository": "https://aws.github.io/eks-charts",
        "chart": "aws-efa-k8s-device-plugin",
        "namespace": "kube-system",
        "release": "aws-efa-k8s-device-plugin",
        "version": "v0.5.7",
        "versions": ["v0.5.7", "v0.5.2"],
    },
    # NVIDIA/k8s-device-plugin Helm repo. The AL2023 NVIDIA AMI ships the driver and container
    # toolkit, not the device plugin [EKS user guide, AL2023 accelerated AMIs]. 0.17.1 is pinned
    # by aws-ia/terraform-aws-eks-blueprints (patterns/targeted-odcr/helm.tf).
    "nvidia_device_plugin": {
        "repository": "https://nvidia.github.io/k8s-device-plugin",
        "chart": "nvidia-device-plugin",
        "namespace": "nvidia-device-plugin",
        "release": "nvidia-device-plugin",
        "version": "0.17.1",
        "versions": ["0.17.1", "0.17.0", "0.17.2"],
    },
    # ray-project/kuberay-helm. 1.7.0 ships the RayJob/RayCluster CRDs the manifests are
    # validated against (../shared/crds/kuberay-v1.7.0, helm-chart/kuberay-operator/crds/).
    "kuberay_operator": {
        "repository": "https://ray-project.github.io/kuberay-helm/",
        "chart": "kuberay-operator",
        "namespace": "kuberay-system",
        "release": "kuberay-operator",
        "version": "1.7.0",
        "versions": ["1.7.0"],
    },
    # NVIDIA/dcgm-exporter Helm repo (GPU metrics for Prometheus). Optional, off by default.
    # 3.5.0 as pinned in public Flux HelmReleases; verify against the repo index before relying.
    "dcgm_exporter": {
        "repository": "https://nvidia.github.io/dcgm-exporter/helm-charts",
        "chart": "dcgm-exporter",
        "namespace": "gpu-monitoring",
        "release": "dcgm-exporter",
        "version": "3.5.0",
        "versions": ["3.5.0"],
    },
}
ADDONS_ENABLED_BY_DEFAULT = {"efa_device_plugin": True, "nvidia_device_plugin": True,
                             "kuberay_operator": True, "dcgm_exporter": False}

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

"""Every version the kit pins for things that run on (or build) the cluster, in one place.

Each entry names its source. Change a version here and the CDK side, the manifests and the
preflight checks all follow. The exception is the Helm add-ons: each one's chart versions live in
its own record (infra/addons/<key>.py).
"""

from __future__ import annotations

import re

# Kubernetes versions the kit is tested with -> the Python package and module of the matching
# kubectl Lambda layer (PyPI: aws-cdk.lambda-layer-kubectl-vNN; aws_eks_v2 needs one whose minor
# matches the cluster for Helm charts and manifests; the enum is aws_eks_v2.KubernetesVersion) and
# the day EKS standard support ends (extended support costs more per cluster hour after that).
# End-of-standard-support dates (1.33: 2026-07-29, 1.34: 2026-12-02, 1.35: 2027-03-27), read
# 2026-11-30 from endoflife.date/amazon-eks and the aws-samples "EKS Version Support Calendar"
# (sample-apex-skills, verified 2026-04-24), which both copy the AWS EKS user guide's release
# calendar (not reachable from here; its rule: 14 months of standard support). 1.36 is not listed: its
# EKS release date could not be confirmed offline, although aws-cdk-lib 2.275 has V1_36 and PyPI
# has aws-cdk.lambda-layer-kubectl-v36 2.0.1. Add it here, with its date, once confirmed.
KUBERNETES_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {"layer_module": "aws_cdk.lambda_layer_kubectl_v33", "layer_class": "KubectlV33Layer",
             "end_of_standard_support": "2026-07-29"},
    "1.34": {"layer_module": "aws_cdk.lambda_layer_kubectl_v34", "layer_class": "KubectlV34Layer",
             "end_of_standard_support": "2026-12-02"},
    "1.35": {"layer_module": "aws_cdk.lambda_layer_kubectl_v35", "layer_class": "KubectlV35Layer",
             "end_of_standard_support": "2027-03-27"},
}
# NVIDIA driver branch the EKS AL2023 NVIDIA AMI installs, per Kubernetes version: 580 for every
# version above [awslabs/amazon-eks-ami 81fec2e (2026-07-23) templates/al2023/variables-default.json
# `nvidia_driver_major_version: "580"`; only variables-1.28.json overrides it, with 570], read
# 2026-11-30. Node groups take the newest AMI release when created; an older group keeps its
# release until it is updated.
AL2023_NVIDIA_DRIVER_BRANCH: dict[str, int] = {v: 580 for v in KUBERNETES_VERSIONS}
# EKS-optimized AL2023 AMI releases read, per Kubernetes version (managed node group
# ReleaseVersion), and the NVIDIA driver they install [awslabs/amazon-eks-ami 81fec2e (2026-07-23)
# CHANGELOG.md, "AMI Release v20260714": each release version is shared by the five AL2023 AMI types
# of its Kubernetes minor; kmod-nvidia-latest-dkms 580.159.03 on x86_64 and arm64], read 2026-12-02:
# the newest release whose notes that snapshot has. The kit applies a release only when the config
# names one (`node_ami_release_version`); these are what its messages and docs suggest. Not a default
# pin, because EKS cannot move a node group back to an earlier release (UpdateNodegroupVersion API
# reference) and CloudFormation refuses a release change combined with any other change of the group
# ("Version and ReleaseVersion updates cannot be combined with other updates", aws/aws-cdk#13602):
# pinned by default, an environment whose groups EKS had moved past the pin could not deploy.
EKS_AMI_RELEASES_READ: dict[str, str] = {
    "1.33": "1.33.13-20260714",
    "1.34": "1.34.9-20260714",
    "1.35": "1.35.6-20260714",
}
EKS_AMI_RELEASE_READ_DRIVER = "580.159.03"
# An EKS AMI release version: the Kubernetes version (minor, then patch) it is built for, the date.
AMI_RELEASE_RE = re.compile(r"(\d+\.\d+)\.(\d+)-(\d{8})")
# The trainer image's CUDA major and the oldest driver branch that runs it (Miles v0.1.0 is CUDA 13;
# images/trainer/Dockerfile CUDA_MAJOR / MIN_NVIDIA_DRIVER, a test keeps them equal).
TRAINER_IMAGE_CUDA_MAJOR = 13
TRAINER_IMAGE_MIN_DRIVER_BRANCH = 580

# The newest version above that EKS has in standard support.
DEFAULT_KUBERNETES_VERSION = "1.35"
# Preflight warns this many days before a version's standard support ends.
SUPPORT_WARNING_DAYS = 60


def kubernetes_minor(version: str) -> tuple[int, ...]:
    """``version`` ("1.35", or "1.35.6") as numbers, for ordering: as text, "1.9" > "1.10"."""
    return tuple(int(p) for p in version.split("."))


def standard_support_warning(kubernetes_version: str, today) -> str | None:
    """A warning when ``kubernetes_version`` leaves EKS standard support within
    SUPPORT_WARNING_DAYS of ``today`` (a ``datetime.date``), or already has; else None."""
    import datetime

    spec = KUBERNETES_VERSIONS.get(kubernetes_version)
    if spec is None:
        return None
    end = datetime.date.fromisoformat(spec["end_of_standard_support"])
    days = (end - today).days
    newest = max(KUBERNETES_VERSIONS, key=kubernetes_minor)
    major, minor = kubernetes_minor(kubernetes_version)[:2]
    # A deployed cluster moves one minor version a deploy: name the next one, not the newest.
    step = f"{major}.{minor + 1}" if f"{major}.{minor + 1}" in KUBERNETES_VERSIONS else newest
    fix = (f"set kubernetes_version: \"{step}\" and deploy (a deployed cluster moves one minor "
           f"version a deploy, up to {newest}; rlkit preflight checks its node groups and add-ons "
           "first: docs/operations.md, \"Kubernetes upgrades\")")
    if days < 0:
        return (f"Kubernetes {kubernetes_version} left EKS standard support on {end}; the cluster "
                f"is billed at the extended-support rate. Fix: {fix}.")
    if days <= SUPPORT_WARNING_DAYS:
        return (f"Kubernetes {kubernetes_version} leaves EKS standard support on {end} (in {days} "
                f"days); after that the cluster is billed at the extended-support rate. Fix: {fix}.")
    return None


def kubectl_layer_class(kubernetes_version: str):
    """The KubectlVNNLayer construct class for a supported Kubernetes version."""
    import importlib

    spec = KUBERNETES_VERSIONS[kubernetes_version]
    return getattr(importlib.import_module(spec["layer_module"]), spec["layer_class"])

# EKS managed add-ons. None = the default version EKS picks for the cluster's Kubernetes version
# (`aws eks describe-addon-versions --kubernetes-version 1.35 --addon-name vpc-cni`) when the
# add-on is created; neither EKS nor CloudFormation moves it when kubernetes_version changes
# (ops/preflight_upgrade.py checks each deployed build against the new version and prints the
# `aws eks update-addon`). Pin a build here (e.g. "v1.19.5-eksbuild.1") once it has been verified
# on a live cluster.
# vpc-cni must be >= 1.18.4 for efa-only interfaces [AWS EFA docs, "EFA-only interfaces"]; every
# EKS default for Kubernetes >= 1.31 already is.
MANAGED_ADDONS: dict[str, str | None] = {
    "vpc-cni": None,
    "coredns": None,
    "kube-proxy": None,
    "eks-pod-identity-agent": None,
}
# Node health (config `node_health.monitoring_agent`): the EKS node monitoring agent reports GPU,
# kernel, network and storage faults as node conditions, which node auto-repair acts on [EKS user
# guide, "Enable node auto repair and investigate node health issues"]. Version: EKS default.
NODE_MONITORING_ADDON = "eks-node-monitoring-agent"
NODE_MONITORING_ADDON_VERSION: str | None = None

# The FSx for Lustre CSI driver EKS managed add-on (aws-fsx-csi-driver), installed when the config
# has a shared file system. None = EKS's default version for the cluster's Kubernetes version: no
# add-on build could be read offline on 2026-11-30 (`aws eks describe-addon-versions --addon-name
# aws-fsx-csi-driver` needs AWS). Its upstream chart was read at kubernetes-sigs/aws-fsx-csi-driver
# 5b227125 (chart 1.17.0, driver 1.9.0). Pin a build here once verified on a live cluster.
FSX_CSI_ADDON_NAME = "aws-fsx-csi-driver"
FSX_CSI_ADDON: str | None = None

# Metrics, logs and the dashboard (config `observability`): the Amazon CloudWatch Observability
# EKS add-on. Its Container Insights (enhanced observability) collects NVIDIA GPU metrics from
# add-on v1.3.0-eksbuild.1 and EFA metrics from v1.5.2-eksbuild.1, needs v3.1.0 for Pod Identity,
# and v6.0.1-eksbuild.1 (v6.2.0-eksbuild.1 on another page) for the OpenTelemetry/PromQL mode,
# off by default, called a preview in five regions on one page and recommended on another
# [CloudWatch user guide: "Container Insights with enhanced observability metrics" (NVIDIA GPU
# metrics; EFA metrics), "Quick start with the Amazon CloudWatch Observability EKS add-on",
# "Container Insights with OpenTelemetry metrics for Amazon EKS", "Install the CloudWatch agent
# with the Amazon CloudWatch Observability EKS add-on or the Helm chart", "OTel Container
# Insights (Recommended)"; read 2026-11-30]. Its values are those of the aws-observability/helm-charts chart
# amazon-cloudwatch-observability (6.4.0 at 71a298f, read 2026-11-30): root tolerations
# [{operator: Exists}], containerLogs (Fluent Bit) on, containerInsights (classic) on,
# otelContainerInsights off; its DCGM exporter's required node affinity lists p5, p5e, p5en,
# p6-b200 and p6-b300 (values.yaml dcgmExporter.affinity; an older add-on may list fewer).
# None = EKS's default version for the cluster's Kubernetes version:
# no add-on build could be listed offline (`aws eks describe-addon-versions --addon-name
# amazon-cloudwatch-observability` needs AWS), so that the default is at least v3.1.0 (Pod
# Identity) is unverified, and no build's configuration schema (`describe-addon-configuration`,
# what EKS validates the kit's values against) could be read. Hence the add-on's own stack
# (stacks/observability_stack.py). Pin a build here, or per environment with the config's
# `observability.addon_version`, once its schema has been read.
CLOUDWATCH_OBSERVABILITY_ADDON = "amazon-cloudwatch-observability"
CLOUDWATCH_OBSERVABILITY_ADDON_VERSION: str | None = None

# System (non-GPU) node group default instance type: general purpose, x86_64, AL2023.
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.xlarge"
# System nodes hold the AMI, the add-ons' images (operators, CoreDNS, agents: a few GB) and
# container logs, with Fluent Bit's spool bounded under 2 GiB (infra/constructs/fluent_bit.py);
# no pod of a run pulls the trainer image there (KubeRay's submitter runs beside the Ray head:
# docs/manifests.md). EKS's own default is 20 GiB; the kit's floor leaves room above it, and
# its default room for images added later.
SYSTEM_ROOT_VOLUME_MIN_GIB = 30
DEFAULT_SYSTEM_ROOT_VOLUME_GIB = 60

# Disk a node needs to pull and unpack the trainer image: compressed layers in containerd's content
# store plus the unpacked snapshot. The image is ~45-50 GB unpacked (images/trainer/README.md, an
# estimate until the first build measures it); 80 GiB leaves room for both. The scheduling check
# (ops/scheduling.py) compares it with each node's root volume.
TRAINER_IMAGE_DISK_GIB = 80

# The trainer image build (CodeBuild project in the data stack, images/trainer/buildspec.yml).
# Build host image: aws/codebuild/standard:7.0 (Ubuntu 22.04, Docker 23.0.6, buildx 0.11.0,
# Python 3.11, AWS CLI v2) [aws/aws-codebuild-docker-images ubuntu/standard/7.0/Dockerfile at
# 374fad3, read 2026-11-30].
IMAGE_BUILD_HOST_IMAGE = "aws/codebuild/standard:7.0"
# Its compute type (infra/constructs/trainer_image_build.py says why this size). New accounts
# often have a concurrency quota of 0 for it, and StartBuild then fails with "Cannot have more
# than 0 builds in queue for the account" (rebuy-de/aws-nuke#1209, a 2xlarge project): preflight
# reads the quota (ops/preflight_services.py).
IMAGE_BUILD_COMPUTE_TYPE = "BUILD_GENERAL1_2XLARGE"
# BuildKit daemon the build runs in (buildx docker-container driver): v0.32.2 (991535e09734). Its
# registry cache exporter writes an OCI image manifest (image-manifest=true, default since v0.21),
# the form Amazon ECR stores as a cache [moby/buildkit@991535e09734 README.md:476 "Registry (push
# image and cache separately)"; AWS Containers blog "Announcing remote cache support in Amazon ECR
# for BuildKit clients", BuildKit >= 0.12]. Read 2026-11-30.
IMAGE_BUILD_BUILDKIT_IMAGE = "moby/buildkit:v0.32.2"

"""The NVIDIA DRA driver, ComputeDomains only: IMEX channels for multi-node NVLink (UltraServers).

On by default only where a GPU group's instance type has NVLink across instances (the catalog's
``multi_node_nvlink``: P6e-GB200 today); ``addons.dra_driver.enabled: true`` adds it elsewhere, and
turning it off where such a group is configured is refused (the pods claim its IMEX channels).
GPUs still come from the NVIDIA device plugin: EKS recommends it "until the NVIDIA DRA driver GPU
allocation functionality graduates from experimental", so the driver's GPU resources stay off.
Version 0.4.1 needs Kubernetes 1.34 (its record's floor, below): config refuses 1.33 while it is on.
Facts and sources: ../shared/upstream/ultraservers.md sections 1.6, 1.7 and 2.
"""

from __future__ import annotations

from infra import names
from infra.addons.record import (
    SYSTEM_NODES,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Workload,
)
from infra.catalog.instances import INSTANCE_TYPES

# kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu, tag v0.4.1
# (764900e, 2026-06-30, branch release-0.4), read 2026-12-01; packaged unchanged as
# ../shared/charts/dra-driver-nvidia-gpu-0.4.1.tgz (its README). The chart was renamed from
# nvidia-dra-driver-gpu at v0.4.0; EKS's "NVIDIA DRA driver or device plugin" page pins 0.4.1.
# Its floor is Kubernetes 1.34, not the chart's `kubeVersion: ">=1.32.0-0"`: the project's
# docs/prerequisites.md:10 at v0.4.1 (764900e78337) asks for "v1.34.2 or later" (DRA is a feature
# gate that EKS does not let one turn on in 1.32-1.33), and the EKS DRA page's table says "Minimum
# Kubernetes version | 1.34" (../shared/upstream/ultraservers.md 1.10). EKS picks the patch
# release itself.
V0_4_1 = ChartVersion("0.4.1", read="kubernetes-sigs/dra-driver-nvidia-gpu "
                      "deployments/helm/dra-driver-nvidia-gpu, tag v0.4.1 (764900e), read "
                      "2026-12-01",
                      min_kubernetes_version="1.34",
                      min_kubernetes_source="kubernetes-sigs/dra-driver-nvidia-gpu "
                      "docs/prerequisites.md:10 at v0.4.1 (764900e): Kubernetes v1.34.2 or "
                      "later; EKS user guide, NVIDIA DRA driver or device plugin: minimum 1.34")
RELEASE = "dra-driver-nvidia-gpu"
# Workload names as the chart renders them for this release name (templates/kubeletplugin.yaml,
# templates/controller.yaml: <fullname>-kubelet-plugin, <fullname>-controller).
KUBELET_PLUGIN = f"{RELEASE}-kubelet-plugin"
CONTROLLER = f"{RELEASE}-controller"
# The DeviceClasses the chart creates with ComputeDomains on (EKS page: `kubectl get
# deviceclasses` shows both; the chart's templates/deviceclass-compute-domain-*.yaml).
DEVICE_CLASSES = ("compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com")


def ultraservers_configured(instance_types: tuple[str, ...]) -> bool:
    """Whether any configured GPU instance type has NVLink across instances."""
    return any(INSTANCE_TYPES[t].multi_node_nvlink for t in instance_types if t in INSTANCE_TYPES)


def values(ctx: AddonContext) -> dict:
    # The EKS P6e-GB200 page's values (ultraservers.md 1.7), with the kit's placement: the
    # controller on the system nodes, the kubelet plugin on nodes labelled
    # nvidia.com/gpu.present=true (every kit GPU group sets the label, because nodeadm does so
    # only from Kubernetes 1.35) tolerating every GPU group taint. The page's
    # `controller.affinity: null` (it clears v25.8.0's *required* control-plane affinity) is not
    # sent: CDK drops null values from a HelmChart's values, so it never reached the template. A
    # Python None reaches aws-cdk-lib as undefined through jsii, and aws-cdk-lib==2.275.0 (the
    # pinned package; aws/aws-cdk tag v2.275.0, whose commit no snapshot here holds) writes Values
    # with stack.toJsonString (aws-eks-v2/lib/helm-chart.js), whose resolve skips undefined keys
    # and list items (core/lib/private/resolve.js, resolveObject/resolveArray). Checked by synth:
    # {"a": None, "b": 1, "f": [None, 3]} renders {"b":1,"f":[3]}. v0.4.1's default affinity is
    # only preferred (control plane, spread: dra-driver-nvidia-gpu@764900e78337
    # deployments/helm/dra-driver-nvidia-gpu/values.yaml:227-242), which system nodes meet or
    # ignore; the chart contract test checks where the controller lands and that synth writes
    # exactly these values.
    return {
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "controller": {"nodeSelector": SYSTEM_NODES, "tolerations": []},
        "kubeletPlugin": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": names.NVIDIA_GPU_PRESENT_LABEL, "operator": "In",
                    "values": ["true"]}]}]}}},
            "tolerations": ctx.gpu_tolerations,
        },
    }


ADDON = HelmAddon(
    key="dra_driver",
    # An OCI chart: CDK's Helm handler pulls `repository` as the chart reference.
    repository="oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
    chart="dra-driver-nvidia-gpu",
    namespace="nvidia-dra-driver-gpu",
    release=RELEASE,
    pinned=V0_4_1,
    tested=(V0_4_1,),
    enabled_by_default=False,
    enabled_when=ultraservers_configured,
    workloads=(Workload(KUBELET_PLUGIN, Placement.GPU),
               Workload(CONTROLLER, Placement.SYSTEM)),
    values=values,
    # DaemonSet and a small Deployment: no wait, like the device plugins (GPU groups may be at 0).
    waits_for=(),
)

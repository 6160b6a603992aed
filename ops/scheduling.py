"""Will every pod land where it should? An offline model of the kube-scheduler's hard rules.

Nodes are modelled per node group from the synthesized templates: the labels and taints the kit
sets, plus those EKS, the kubelet and nodeadm add; allocatable resources from the catalog, the
launch template (huge pages as provisioned by its user data) and the device plugins (a node has
``nvidia.com/gpu`` / ``vpc.amazonaws.com/efa`` only where that plugin's DaemonSet pod lands).
Pods come from the rendered Helm charts and the rendered kit manifests. For each pod and node
group the check evaluates nodeSelector, required node affinity (In, NotIn, Exists, DoesNotExist,
Gt, Lt), NoSchedule/NoExecute taints against tolerations, resource requests against
allocatable, and the disk the pod's image needs against the node's root volume. A kit pod that
must share a node with another (KubeRay's submitter beside the Ray head) lands only where that pod
lands, fits beside it, and must say so with a required pod affinity on the node's hostname.

Every DaemonSet must land on exactly the node groups it serves, and every kit pod on its intended
group and nothing else. A finding names the pod, the node group and the unmet term.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import KitConfig
from infra.versions import TRAINER_IMAGE_DISK_GIB, kubernetes_minor
from infra.names import HOSTNAME_LABEL, RAY_NODE_TYPE_LABEL
from ops.node_templates import node_root_volume_gib

GPU_RESOURCE = names.GPU_RESOURCE
EFA_RESOURCE = names.EFA_RESOURCE
HUGEPAGES_RESOURCE = names.HUGEPAGES_2MI_RESOURCE
NODEGROUP_TYPE = "AWS::EKS::Nodegroup"
LAUNCH_TEMPLATE_TYPE = "AWS::EC2::LaunchTemplate"
SYSTEM_GROUP = "system"
# Root-volume space the AMI, kubelet and the small system images take before any workload image.
NODE_DISK_RESERVE_GIB = 20
_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute",
            "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
# How much of an extended resource a node has where the device plugin that advertises it runs
# (which DaemonSet advertises what is declared by its add-on record, infra/addons/).
_ADVERTISED_AMOUNT = {GPU_RESOURCE: lambda itype: itype.gpu_count,
                      EFA_RESOURCE: lambda itype: itype.efa_devices}
# vCPUs and GiB per vCPU of common general-purpose/compute/memory families, for system nodes
# (EC2 instance type naming: large = 2 vCPUs, xlarge = 4, Nxlarge = 4N).
_GIB_PER_VCPU = {"m": 4, "c": 2, "r": 8}


@dataclass
class NodeGroupModel:
    """What the scheduler sees on every node of one node group."""

    name: str  # "system" or the config's GPU group name
    instance_type: str
    labels: dict[str, str]
    taints: list[dict[str, str]]  # Kubernetes spelling: key, value, effect
    allocatable: dict[str, float]  # resource -> amount (cpu in cores, bytes otherwise)
    disk_gib: float  # where container images are stored
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PodModel:
    """One pod template as the scheduler would see it."""

    name: str  # e.g. "DaemonSet kube-system/aws-efa-k8s-device-plugin"
    spec: dict[str, Any]
    intended: frozenset[str]  # node groups it must land on (and no others)
    daemonset: bool = False
    kit_image: bool = False  # runs the trainer image (needs TRAINER_IMAGE_DISK_GIB of disk)
    advertises: str | None = None  # extended resource a device plugin pod makes allocatable
    labels: dict[str, str] = field(default_factory=dict)  # the pod's labels, as created
    beside: str | None = None  # the kit pod whose node it must share (by required pod affinity)


@dataclass(frozen=True)
class Finding:
    pod: str
    node_group: str
    problem: str

    def __str__(self) -> str:
        return f"{self.pod} on node group {self.node_group!r}: {self.problem}"


# --- quantities ---------------------------------------------------------------------------------

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "k": 1e3, "M": 1e6,
           "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3}


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("100m", "5120Mi", "8", 8) as a number."""
    text = str(value)
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    if not match or match.group(2) not in ("", *_SUFFIX):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX.get(match.group(2), 1)


# --- nodes --------------------------------------------------------------------------------------


def _system_capacity(instance_type: str) -> tuple[dict[str, float], str | None]:
    family, _, size = instance_type.partition(".")
    per_vcpu = _GIB_PER_VCPU.get(family[:1])
    sizes = {"large": 2, "xlarge": 4}
    vcpus = sizes.get(size)
    if vcpus is None and (m := re.fullmatch(r"(\d+)xlarge", size)):
        vcpus = 4 * int(m.group(1))
    if per_vcpu is None or vcpus is None:
        return {}, (f"cpu and memory of {instance_type} are not modelled; requests there were "
                    "not checked")
    # Allocatable is below capacity (kube-reserved, system-reserved, eviction threshold); 90% of
    # memory and all but 0.1 core is a conservative reading of the EKS AMI's reservations.
    return {"cpu": vcpus - 0.1, "memory": vcpus * per_vcpu * 2**30 * 0.9, "pods": 110}, None


# EC2's CPU architecture names (the catalog's) -> Kubernetes' kubernetes.io/arch (Go's GOARCH).
K8S_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def _well_known_labels(*, config: KitConfig, group: str, instance_type: str, zone: str,
                       capacity_type: str, arch: str = "x86_64") -> dict[str, str]:
    """Labels the kubelet and EKS put on every managed node [Kubernetes "Well-Known Labels";
    EKS user guide, managed node groups]."""
    return {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": K8S_ARCH[arch],
        "kubernetes.io/hostname": f"ip-10-0-0-1.{config.region}.compute.internal",
        names.INSTANCE_TYPE_LABEL: instance_type,
        names.ZONE_LABEL: zone,
        "topology.kubernetes.io/region": config.region,
        "eks.amazonaws.com/nodegroup": group,
        "eks.amazonaws.com/capacityType": capacity_type,
    }


def _one(template: dict, type_: str) -> dict:
    found = [r for r in template.get("Resources", {}).values() if r.get("Type") == type_]
    if len(found) != 1:
        raise ValueError(f"expected one {type_} in the template, found {len(found)}")
    return found[0]["Properties"]


def _hugepages_from_user_data(launch_template: dict) -> float:
    """Bytes of 2 MiB huge pages the launch template's user data reserves (0 if none)."""
    data = launch_template.get("LaunchTemplateData", {}).get("UserData")
    if isinstance(data, dict) and "Fn::Base64" in data:
        text = data["Fn::Base64"]
    elif isinstance(data, str):
        text = base64.b64decode(data).decode()
    else:
        return 0.0
    pages = re.findall(r"sysctl -w vm\.nr_hugepages=(\d+)", text if isinstance(text, str) else "")
    return float(pages[-1]) * 2 * 2**20 if pages else 0.0


def node_groups(config: KitConfig, templates: dict[str, dict]) -> list[NodeGroupModel]:
    """One model per node group, read from the synthesized templates (stack name -> template)."""
    stack_names = names.stack_names(config.name)
    models = []
    cluster = templates[stack_names["cluster"]]
    ng = _one(cluster, NODEGROUP_TYPE)
    itype = ng["InstanceTypes"][0]
    allocatable, note = _system_capacity(itype)
    # The system nodes span every AZ of the VPC (the Auto Scaling group balances them); no kit
    # pod on them is pinned to one, so the model stands in one of them.
    zone = config.availability_zones[0]
    labels = {**_well_known_labels(config=config, group=f"{config.name}-system",
                                   instance_type=itype, zone=zone,
                                   capacity_type=ng.get("CapacityType", "ON_DEMAND")),
              **ng.get("Labels", {})}
    models.append(NodeGroupModel(
        name=SYSTEM_GROUP, instance_type=itype, labels=labels,
        taints=[_taint(t) for t in ng.get("Taints", [])], allocatable=allocatable,
        # EKS's default root volume (20 GiB) when the template sizes none.
        disk_gib=float(node_root_volume_gib(cluster, ng) or 20), notes=[note] if note else []))

    for group_name, group in config.gpu_node_groups.items():
        template = templates[names.gpu_stack_name(config.name, group_name)]
        ng = _one(template, NODEGROUP_TYPE)
        lt = _one(template, LAUNCH_TEMPLATE_TYPE)
        itype = INSTANCE_TYPES[lt["LaunchTemplateData"]["InstanceType"]]
        labels = _well_known_labels(config=config, group=group_name, instance_type=itype.name,
                                    zone=group.availability_zone,
                                    capacity_type=ng.get("CapacityType", "ON_DEMAND"),
                                    arch=itype.architecture)
        if kubernetes_minor(config.kubernetes_version) >= (1, 35):
            # nodeadm labels NVIDIA nodes itself from kubelet 1.35 [awslabs/amazon-eks-ami
            # 81fec2e nodeadm/doc/api-concepts.md].
            labels[names.NVIDIA_GPU_PRESENT_LABEL] = "true"
        labels.update(ng.get("Labels", {}))
        allocatable = {"cpu": itype.vcpus - 0.1, "memory": itype.memory_gib * 2**30 * 0.95,
                       "pods": 110}
        if hugepages := _hugepages_from_user_data(lt):
            allocatable[HUGEPAGES_RESOURCE] = hugepages
        models.append(NodeGroupModel(
            name=group_name, instance_type=itype.name, labels=labels,
            taints=[_taint(t) for t in ng.get("Taints", [])],
            allocatable=allocatable,
            # Containerd and kubelet state live on the instance-store RAID0 (nodeadm
            # localStorage), so images land there, not on the root volume.
            disk_gib=itype.nvme_count * itype.nvme_size_gb * 1e9 / 2**30))
    return models


def _taint(t: dict) -> dict[str, str]:
    return {"key": t["Key"], "value": t.get("Value", ""),
            "effect": _EFFECTS.get(t["Effect"], t["Effect"])}


# --- pods ---------------------------------------------------------------------------------------


def _pod_spec(obj: dict) -> dict | None:
    kind = obj.get("kind")
    if kind in ("DaemonSet", "Deployment", "Job", "StatefulSet"):
        return obj["spec"]["template"]["spec"]
    return None


def chart_pods(objects: Iterable[dict], intended: dict[str, frozenset[str]],
               advertises: dict[str, str] | None = None) -> list[PodModel]:
    """Pods of rendered chart objects. ``intended`` maps a workload name to the node groups it
    serves; a workload missing there is intended for no node group. ``advertises`` maps a device
    plugin's workload name to the extended resource it makes allocatable."""
    advertises = advertises or {}
    pods = []
    for obj in objects:
        spec = _pod_spec(obj)
        if spec is None:
            continue
        name = obj["metadata"]["name"]
        ns = obj["metadata"].get("namespace", "default")
        pods.append(PodModel(name=f"{obj['kind']} {ns}/{name}", spec=spec,
                             intended=intended.get(name, frozenset()),
                             daemonset=obj["kind"] == "DaemonSet",
                             advertises=advertises.get(name)))
    return pods




def _ray_pod(name: str, template: dict, node_type: str, train: frozenset[str]) -> PodModel:
    labels = {**(template.get("metadata") or {}).get("labels", {}), RAY_NODE_TYPE_LABEL: node_type}
    return PodModel(name, template["spec"], train, kit_image=True, labels=labels)


def kit_pods(objects: Iterable[dict], *, training_group: str) -> list[PodModel]:
    """Pods of the rendered kit manifests: RayJob head, workers and submitter; fabric Jobs."""
    pods = []
    train = frozenset({training_group})
    for obj in objects:
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
        if kind == "RayJob":
            cluster = obj["spec"]["rayClusterSpec"]
            head = _ray_pod(f"RayJob {name} head", cluster["headGroupSpec"]["template"], "head",
                            train)
            # The head is the run's first GPU node (the driver runs there: docs/manifests.md).
            pods.append(head)
            for wg in cluster.get("workerGroupSpecs", []):
                pods.append(_ray_pod(f"RayJob {name} worker group {wg['groupName']}",
                                     wg["template"], "worker", train))
            submitter = obj["spec"].get("submitterPodTemplate", {}).get("spec")
            if submitter is None:
                # KubeRay's default submitter: the head's image, no selector, no tolerations.
                submitter = {"containers": [{"image": head.spec["containers"][0]["image"]}]}
            # Beside the head: KubeRay creates it once the cluster is ready, and only the head's
            # node is sure to hold the trainer image by then (docs/manifests.md).
            pods.append(PodModel(f"RayJob {name} submitter", submitter, train, kit_image=True,
                                 beside=head.name))
        elif kind == "Job":
            pods.append(PodModel(f"Job {name}", obj["spec"]["template"]["spec"], train,
                                 kit_image=True))
    return pods


# --- rules --------------------------------------------------------------------------------------


def _expression_ok(expr: dict, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {op!r}")


def _describe(expr: dict, labels: dict[str, str]) -> str:
    values = expr.get("values") or []
    shown = values if len(values) <= 4 else values[:3] + [f"... {len(values)} values"]
    have = labels.get(expr["key"], "<absent>")
    return f"{expr['key']} {expr['operator']}" + (f" {shown}" if values else "") + \
        f" (node has {have})"


def placement_problem(spec: dict, node: NodeGroupModel, *,
                      at_startup: bool = False) -> str | None:
    """Why ``spec`` cannot be placed on ``node`` by selector, affinity or taints; None if it can.

    A self-removing startup taint (``names.SELF_REMOVING_TAINTS``) only delays other pods until
    its agent removes it, so it counts only ``at_startup`` (for that agent's own DaemonSet)."""
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            have = node.labels.get(key, "<absent>")
            return f"nodeSelector {key}={value} unmet (node has {key}={have})"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required:
        terms = required.get("nodeSelectorTerms", [])
        unmet = []
        for term in terms:
            failed = [e for e in term.get("matchExpressions", [])
                      if not _expression_ok(e, node.labels)]
            if term.get("matchFields"):
                failed.append({"key": "matchFields", "operator": "unsupported by this check"})
            if not failed:
                break
            unmet.append(" and ".join(_describe(e, node.labels) for e in failed))
        else:
            return "required node affinity unmet: no term matches (" + "; ".join(unmet) + ")"
    for taint in node.taints:
        if taint["effect"] == "PreferNoSchedule":
            continue
        if taint["key"] in names.SELF_REMOVING_TAINTS and not at_startup:
            continue
        if not any(_tolerates(t, taint) for t in spec.get("tolerations") or []):
            return (f"taint {taint['key']}={taint['value']}:{taint['effect']} is not tolerated "
                    f"(tolerations: {spec.get('tolerations') or 'none'})")
    return None


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects ``labels``."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_ok(e, labels) for e in selector.get("matchExpressions") or [])


def pod_affinity_problem(pod: PodModel, target: PodModel, others: Iterable[PodModel]) -> str | None:
    """Why ``pod`` is not bound to ``target``'s node by a required pod affinity on the node's
    hostname that selects ``target`` and none of ``others``; None if it is. A term naming
    namespaces is not read (the kit's pods share the RayJob's namespace)."""
    terms = ((((pod.spec.get("affinity") or {}).get("podAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution")) or [])
    for term in terms:
        if term.get("topologyKey") != HOSTNAME_LABEL or term.get("namespaces") \
                or "namespaceSelector" in term:
            continue
        selector = term.get("labelSelector") or {}
        if not _selects(selector, target.labels):
            continue
        if also := [o.name for o in others if o is not target and o is not pod
                    and _selects(selector, o.labels)]:
            return (f"its pod affinity {selector} selects {also} too, so it may start beside "
                    f"them instead of {target.name}. Fix: select labels only that pod has")
        return None
    return (f"no required pod affinity on {HOSTNAME_LABEL} selects {target.name} "
            f"(labels {target.labels}), so it may start on a node of the group that has not "
            "pulled the trainer image. Fix: a requiredDuringSchedulingIgnoredDuringExecution "
            f"podAffinity term, topologyKey {HOSTNAME_LABEL}, selecting that pod's labels")


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    key = toleration.get("key")
    if toleration.get("operator", "Equal") == "Exists":
        return not key or key == taint["key"]
    return key == taint["key"] and toleration.get("value", "") == taint["value"]


def _requests(spec: dict) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in spec.get("containers", []):
        resources = container.get("resources") or {}
        # Extended resources and huge pages may be given as limits only; requests then equal them.
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, amount in asked.items():
            total[resource] = total.get(resource, 0.0) + quantity(amount)
    return total


def resource_problem(pod: PodModel, node: NodeGroupModel, used: dict[str, float]) -> str | None:
    """Why ``pod``'s requests or image do not fit ``node`` next to ``used``; None if they do."""
    for resource, amount in _requests(pod.spec).items():
        if resource not in node.allocatable:
            if resource in ("cpu", "memory", "ephemeral-storage"):
                continue  # not modelled for this node (the node group carries a note)
            return (f"requests {resource}: {_fmt(resource, amount)} but the node has none "
                    "allocatable" + _why_missing(resource))
        free = node.allocatable[resource] - used.get(resource, 0.0)
        if amount > free + 1e-9:
            return (f"requests {resource}: {_fmt(resource, amount)} but only "
                    f"{_fmt(resource, free)} is allocatable" + _why_missing(resource))
    if pod.kit_image:
        need = TRAINER_IMAGE_DISK_GIB + NODE_DISK_RESERVE_GIB
        if node.disk_gib < need:
            return (f"the trainer image needs about {TRAINER_IMAGE_DISK_GIB} GiB of image disk "
                    f"plus {NODE_DISK_RESERVE_GIB} GiB for the AMI and system images, but the "
                    f"node's disk is {node.disk_gib:.0f} GiB")
    return None


def _why_missing(resource: str) -> str:
    if resource == HUGEPAGES_RESOURCE:
        return " (huge pages exist only as the launch template's user data reserves them)"
    if resource in (GPU_RESOURCE, EFA_RESOURCE):
        return " (the device plugin that advertises it does not run on this node group)"
    return ""


def _fmt(resource: str, amount: float) -> str:
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{amount / 2**20:.0f}Mi"
    return f"{amount:g}"


@dataclass
class Schedule:
    """The check's result: every finding, and per pod the node groups it would land on."""

    findings: list[Finding]
    lands: dict[str, list[str]]  # pod name -> node groups, in node-group order


def check(nodes: list[NodeGroupModel], chart: list[PodModel],
          kit: list[PodModel]) -> list[Finding]:
    """Every way the pods would not land exactly where they should."""
    return schedule(nodes, chart, kit).findings


def schedule(nodes: list[NodeGroupModel], chart: list[PodModel],
             kit: list[PodModel]) -> Schedule:
    """Place every pod on the node groups (DaemonSets first, as they decide which extended
    resources exist): where each lands, and every way that differs from where it should."""
    findings: list[Finding] = []
    lands: dict[str, list[str]] = {}
    used: dict[str, dict[str, float]] = {n.name: {} for n in nodes}
    # DaemonSets first: they decide which extended resources exist and take their share.
    for pod in [p for p in chart if p.daemonset]:
        lands[pod.name] = []
        for node in nodes:
            problem = placement_problem(pod.spec, node)
            if problem is None and node.name not in pod.intended:
                findings.append(Finding(pod.name, node.name, "would run here, but it serves only "
                                        f"{sorted(pod.intended) or 'no node group'}"))
            elif problem is not None and node.name in pod.intended:
                findings.append(Finding(pod.name, node.name, problem))
            if problem is None:
                lands[pod.name].append(node.name)
            itype = INSTANCE_TYPES.get(node.instance_type)
            if problem is None and itype is not None:
                if pod.advertises in _ADVERTISED_AMOUNT:
                    node.allocatable[pod.advertises] = _ADVERTISED_AMOUNT[pod.advertises](itype)
                for r, amount in _requests(pod.spec).items():
                    used[node.name][r] = used[node.name].get(r, 0.0) + amount
    by_name = {p.name: p for p in kit}
    for pod in [p for p in chart if not p.daemonset] + kit:
        target = by_name.get(pod.beside) if pod.beside else None
        if target is not None:
            why = pod_affinity_problem(pod, target, kit)
            findings += [Finding(pod.name, group, why) for group in sorted(pod.intended) if why]
        fits = []
        for node in nodes:
            problem = placement_problem(pod.spec, node)
            beside = used[node.name]
            if problem is None and target is not None:
                if node.name not in lands.get(target.name, []):
                    problem = f"{target.name}, which it must run beside, does not land here"
                beside = {r: beside.get(r, 0.0) + _requests(target.spec).get(r, 0.0)
                          for r in {*beside, *_requests(target.spec)}}
            if problem is None:
                problem = resource_problem(pod, node, beside)
                if problem is not None and target is not None:
                    problem += f" beside {target.name}"
            if problem is None:
                fits.append(node.name)
            elif node.name in pod.intended:
                findings.append(Finding(pod.name, node.name, problem))
        lands[pod.name] = fits
        for name in fits:
            if name not in pod.intended:
                findings.append(Finding(pod.name, name, "could be scheduled here, but it belongs "
                                        f"only on {sorted(pod.intended)}"))
    return Schedule(findings=findings, lands=lands)


def startup_taint_findings(nodes: list[NodeGroupModel], removers: dict[str, dict | None],
                           kit: list[PodModel]) -> list[Finding]:
    """Self-removing startup taints: on every node group that has one, the DaemonSet that removes
    it must start there (``removers``: taint key -> that DaemonSet's pod spec, None when it is not
    installed), or the group's pods never start; and no kit pod may tolerate it, or the pod starts
    before the agent it waits for."""
    findings = []
    for node in nodes:
        for taint in node.taints:
            agent = names.SELF_REMOVING_TAINTS.get(taint["key"])
            if agent is None:
                continue
            shown = f"{taint['key']}:{taint['effect']}"
            spec = removers.get(taint["key"])
            if spec is None:
                findings.append(Finding(
                    f"DaemonSet {agent}", node.name, f"is not installed, and only it removes the "
                    f"startup taint {shown}: no other pod would ever start here. Fix: install it, "
                    "or drop the taint"))
            elif problem := placement_problem(spec, node, at_startup=True):
                findings.append(Finding(
                    f"DaemonSet {agent}", node.name, f"cannot start, so the startup taint {shown} "
                    f"it removes stays and no other pod starts here: {problem}"))
            for pod in kit:
                if node.name in pod.intended and any(
                        _tolerates(t, taint) for t in pod.spec.get("tolerations") or []):
                    findings.append(Finding(pod.name, node.name, f"tolerates the startup taint "
                                            f"{shown}, so it may start before {agent} is ready"))
    return findings


# --- EKS managed add-ons (not rendered charts: their tolerations come from the template) --------


def managed_addon_values(cluster_template: dict, addon: str) -> dict | None:
    """The configuration values of EKS add-on ``addon`` in a synthesized cluster template ({} when
    it passes none), or None when the template has no such add-on."""
    for resource in cluster_template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::EKS::Addon" and props.get("AddonName") == addon:
            values = props.get("ConfigurationValues") or "{}"
            return json.loads(values) if isinstance(values, str) else values
    return None


def managed_addon_findings(values: dict | None, nodes: list[NodeGroupModel], *, pod: str,
                           key: tuple[str, ...], default: list[dict], serves: set[str],
                           fix: str) -> list[Finding]:
    """A finding for each node group in ``serves`` whose taints the add-on DaemonSet ``pod``
    would not tolerate. Its tolerations are ``values`` at ``key`` (the chart's ``default`` when
    the add-on does not set them); ``values`` None means the add-on is not installed."""
    if values is None:
        return []
    tolerations: Any = values
    for part in key:
        tolerations = tolerations.get(part, {}) if isinstance(tolerations, dict) else {}
    tolerations = tolerations or default
    findings = []
    for node in nodes:
        if node.name not in serves:
            continue
        # A self-removing startup taint only delays the add-on (startup_taint_findings).
        missing = [t for t in node.taints if t["effect"] != "PreferNoSchedule"
                   and t["key"] not in names.SELF_REMOVING_TAINTS
                   and not any(_tolerates(tol, t) for tol in tolerations)]
        if missing:
            findings.append(Finding(pod, node.name, f"its tolerations {tolerations} do not "
                                    f"tolerate the taint(s) {missing}. Fix: {fix}"))
    return findings

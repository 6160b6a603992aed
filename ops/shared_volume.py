"""The shared file system's PersistentVolume and claim on a live cluster: created once, then
checked against the deployed file system on every `rlkit launch` and `rlkit gate`.

A blind `kubectl apply` of both, each time, breaks over a deployment's life:

- ``capacity_gib`` grows: the claim's request would grow with it, and the API server refuses to
  grow a claim without a StorageClass ("only dynamically provisioned pvc can be resized",
  admission plugin PersistentVolumeClaimResize, kubernetes/kubernetes@76434bd62ab6
  ``plugin/pkg/admission/storage/persistentvolume/resize/admission.go``). A request cannot
  shrink either, so the claim is created once and never applied again; binding needs only the
  volume's capacity to cover the request. The volume's capacity may change (only its source
  and volume mode are immutable, ``ValidatePersistentVolumeUpdate``, kubernetes/kubernetes@
  a7264f95ffc8 ``pkg/apis/core/validation/validation.go``), so the volume is applied each time.
- the file system is replaced (new ID): a volume's source cannot change (same function). The
  volume still names the old file system; that is a refusal naming the two objects to delete.
- the claim was deleted (with its namespace, say): the volume, policy Retain, is Released and
  keeps the deleted claim's UID, so a new claim of the same name stays Pending for good ("volume
  already bound to different claim", ``syncUnboundClaim``/``syncVolume``, kubernetes/kubernetes@
  0097adc1c512 ``pkg/controller/volume/persistentvolume/pv_controller.go``). Clearing that UID makes
  the volume bindable again, which touches no data; rlkit says so and does it.

Those three commits are the code index's copies, not the release the kit targets (Kubernetes
1.35): the kubernetes/kubernetes snapshot is over the fetch limit here, so v1.35.x was not read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from infra import names
from manifests.context import SharedFs
from manifests.render import SHARED_FS_FILES
from ops.kube import Kubectl, KubectlError
from ops.scheduling import quantity

# A merge patch's null removes the key, and is a no-op when the key is absent.
_RELEASE_PATCH = json.dumps({"spec": {"claimRef": {"uid": None, "resourceVersion": None}}})


class SharedVolumeConflict(KubectlError):
    """The cluster's volume or claim cannot serve this file system as they are; ``fix`` names
    the objects to delete (neither holds data: the volume's reclaim policy is Retain)."""

    def __init__(self, message: str, fix: str):
        self.command = ""
        self.message = message
        self.fix = fix
        RuntimeError.__init__(self, f"{message}. Fix: {fix}.")


@dataclass(frozen=True)
class SharedVolumePlan:
    create_claim: bool  # no claim yet: apply it (never re-applied once it exists)
    release: bool  # the volume keeps a deleted claim's UID: clear it first
    notes: list[str] = field(default_factory=list)


def _source(pv: dict[str, Any]) -> dict[str, str]:
    """What a volume's source is made of (any change means another file system)."""
    csi = pv.get("spec", {}).get("csi") or {}
    attrs = csi.get("volumeAttributes") or {}
    return {"driver": csi.get("driver", ""), "volumeHandle": csi.get("volumeHandle", ""),
            "dnsname": attrs.get("dnsname", ""), "mountname": attrs.get("mountname", "")}


def _same_size(a: str, b: str) -> bool:
    """Whether two Kubernetes quantities are one size: the API server writes 76800Gi back as
    75Ti (its canonical form), which is no change."""
    try:
        return a == b or quantity(a) == quantity(b)
    except ValueError:  # not a quantity ("-": absent): only the same text is the same
        return False


def _storage(doc: dict[str, Any], *path: str) -> str:
    node: Any = doc
    for key in path:
        node = (node or {}).get(key)
    return str(node or "-")


def plan_shared_volume(want: SharedFs, ns: str, live_pv: dict[str, Any] | None,
                       live_pvc: dict[str, Any] | None) -> SharedVolumePlan:
    """What to do with the rendered volume and claim (``want``, in namespace ``ns``) given what
    the cluster holds (None: absent); SharedVolumeConflict when they cannot be used as they
    are."""
    pv_name, pvc_name = want.pv_name, want.pvc_name
    delete_claim = f"kubectl delete pvc {pvc_name} -n {ns}"
    delete_both = f"{delete_claim} && kubectl delete pv {pv_name}"
    idle = (f"once no pod mounts it (kubectl get pods -n {ns}; a claim in use is deleted only "
            "after its pods end)")
    then = ("then run this command again; the volume's reclaim policy is Retain, so deleting "
            "these objects never touches the file system or its data")
    for kind, name, doc in (("PersistentVolume", pv_name, live_pv),
                            ("PersistentVolumeClaim", f"{pvc_name} in {ns}", live_pvc)):
        if doc is not None and doc.get("metadata", {}).get("deletionTimestamp"):
            raise SharedVolumeConflict(
                f"{kind} {name} is being deleted (it goes once no pod mounts it)",
                f"wait until it is gone (kubectl get pods -n {ns} shows what still mounts it), "
                "then run this command again")
    notes: list[str] = []
    release = False
    if live_pv is not None:
        have = _source(live_pv)
        if have != {"driver": names.SHARED_FS_CSI_DRIVER, "volumeHandle": want.volume_handle,
                    "dnsname": want.dns_name, "mountname": want.mount_name}:
            raise SharedVolumeConflict(
                f"PersistentVolume {pv_name} mounts file system {have['volumeHandle'] or '?'} "
                f"({have['dnsname'] or '?'}), but the storage stack's is {want.volume_handle} "
                f"({want.dns_name}): the file system was replaced, and Kubernetes does not let a "
                "volume's source change", f"{idle}, {delete_both}; {then}")
        ref = live_pv.get("spec", {}).get("claimRef") or {}
        if ref and (ref.get("name"), ref.get("namespace")) != (pvc_name, ns):
            raise SharedVolumeConflict(
                f"PersistentVolume {pv_name} is reserved for claim {ref.get('name')} in "
                f"{ref.get('namespace')}, not {pvc_name} in {ns}",
                f"kubectl delete pv {pv_name}; {then}")
        stale = ref.get("uid")
        if stale and (live_pvc is None or live_pvc.get("metadata", {}).get("uid") != stale):
            release = True
        have_size = _storage(live_pv, "spec", "capacity", "storage")
        if not _same_size(have_size, want.capacity):
            notes.append(f"PersistentVolume {pv_name}: capacity {have_size} -> {want.capacity} "
                         "(the file system's size changed)")
    if live_pvc is not None:
        bound_to = live_pvc.get("spec", {}).get("volumeName")
        if bound_to and bound_to != pv_name:
            raise SharedVolumeConflict(
                f"claim {pvc_name} in {ns} is bound to volume {bound_to}, not {pv_name}",
                f"{idle}, {delete_claim}; {then}")
        phase = live_pvc.get("status", {}).get("phase")
        if phase == "Lost" or (live_pv is None and phase == "Bound"):
            raise SharedVolumeConflict(
                f"claim {pvc_name} in {ns} lost its volume {pv_name} (phase {phase}: the volume "
                "was deleted while the claim was bound), and a lost claim never binds again",
                f"{idle}, {delete_claim}; {then}")
        have_req = _storage(live_pvc, "spec", "resources", "requests", "storage")
        if not _same_size(have_req, want.capacity):
            notes.append(f"claim {pvc_name} keeps its request of {have_req} (not {want.capacity}): a "
                         "claim without a StorageClass cannot be resized, and the pods mount the "
                         "whole file system either way")
    return SharedVolumePlan(create_claim=live_pvc is None, release=release, notes=notes)


def ensure_shared_volume(k: Kubectl, out: Path, want: SharedFs | None, ns: str,
                         say: Callable[[str], None] = print) -> None:
    """Create or check the shared file system's volume and claim rendered under ``out``
    (nothing when the config has none); SharedVolumeConflict, before any change, when they
    cannot be used. A dry run previews the reads and the creation."""
    if want is None:
        return
    pv_path, pvc_path = (out / name for name in SHARED_FS_FILES)
    plan = plan_shared_volume(want, ns, k.get_json(["pv", want.pv_name]),
                              k.get_json(["pvc", want.pvc_name, "-n", ns]))
    if plan.release:
        say(f"PersistentVolume {want.pv_name} still names a deleted claim (it was Released): "
            "clearing that claim's UID so the claim binds again (no data is touched)")
        k.run(["patch", "pv", want.pv_name, "--type", "merge", "-p", _RELEASE_PATCH])
    k.apply([pv_path, *([pvc_path] if plan.create_claim else [])])
    for note in plan.notes:
        say(f"note: {note}.")

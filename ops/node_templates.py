"""Reading a node group's launch template out of a CloudFormation template (synthesized or
deployed): the preflight node-group checks and the scheduling check both need the root volume,
which lives in the launch template once a group has one, and in the node group's DiskSize before.
"""

from __future__ import annotations

from infra import names


def launch_template_data(template: dict, nodegroup: dict) -> dict | None:
    """The ``LaunchTemplateData`` of the launch template in ``template`` that the node group
    properties ``nodegroup`` name (``{"Ref": <logical ID>}``); None when they name none (a group
    created by a kit without one), ``{}`` when the name points outside ``template``."""
    ref = (nodegroup.get("LaunchTemplate") or {}).get("Id")
    if ref is None:
        return None
    logical_id = ref.get("Ref") if isinstance(ref, dict) else None
    resource = template.get("Resources", {}).get(logical_id) or {}
    return (resource.get("Properties") or {}).get("LaunchTemplateData") or {}


def root_volume_gib(data: dict) -> int | None:
    """The size of the root volume launch template data ``data`` gives, if it sizes one."""
    sizes = [(m.get("Ebs") or {}).get("VolumeSize") for m in data.get("BlockDeviceMappings") or []
             if m.get("DeviceName") == names.ROOT_DEVICE_NAME]
    return sizes[0] if sizes else None


def node_root_volume_gib(template: dict, nodegroup: dict) -> int | None:
    """The root volume of the node group ``nodegroup`` of ``template``: its launch template's,
    else its own DiskSize; None when neither says (EKS's default then)."""
    data = launch_template_data(template, nodegroup)
    return root_volume_gib(data) if data is not None else nodegroup.get("DiskSize")

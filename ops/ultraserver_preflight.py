"""Preflight checks for an UltraServer Capacity Block group (the catalog's ``ultraservers``).

Read from the account: the block's UltraServer type (DescribeCapacityBlocks ``UltraserverType``,
botocore 1.44.8), its zone (DescribeAvailabilityZones: a Local Zone, its zone group opted in),
and that the shared file system sits in that zone's parent AZ. The EC2 user guide
(capacity-blocks-launch): "To use P6e-GB200 UltraServer Capacity Blocks, you must be opted in to
the Dallas Local Zone (N. Virginia) Local Zone." Facts: ../shared/upstream/ultraservers.md 1.3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.catalog import INSTANCE_TYPES
from infra.config import GpuNodeGroupConfig, KitConfig
from infra.problems import FAIL, PASS, WARN
from ops.aws import AWS_ERRORS, describe_error, error_code
from ops.preflight_reads import PreflightReads


@dataclass(frozen=True)
class Check:
    """One check's result; ``ops.preflight`` turns it into its own Check (same fields)."""

    name: str
    subject: str
    status: str
    detail: str
    fix: str = ""


def check_ultraserver_block(reads: PreflightReads, cfg: KitConfig, group_name: str,
                            group: GpuNodeGroupConfig) -> list[Check]:
    """UltraServer type, Local Zone and opt-in of the group's Capacity Block (none for other
    groups; a missing reservation is reported by the reservation checks). The reservation and
    its zone come from ``reads``: read once per run, shared with the reservation checks and
    with other groups in the same zone."""
    itype = INSTANCE_TYPES.get(group.instance_type)
    rid = group.capacity.reservation_id
    if itype is None or not itype.ultraservers or rid is None:
        return []
    subject = f"gpu_node_groups.{group_name}.capacity"
    try:
        found = reads.capacity_reservations(rid)
    except AWS_ERRORS as err:
        # An ID EC2 does not know (NotFound, Malformed) is check_reservation's "not found", with
        # the ID's fix; only other errors are this call's to report.
        if "NotFound" in error_code(err) or "Malformed" in error_code(err):
            return []
        return [Check("ultraserver block", subject, FAIL, describe_error(err),
                      "allow ec2:DescribeCapacityReservations for your credentials")]
    if not found:
        return []  # the reservation checks already fail on it
    return [_check_type(reads.clients.ec2, subject, group, found[0]),
            *_check_zone(reads, cfg, subject, group, found[0].get("AvailabilityZone"))]


def _check_type(ec2: Any, subject: str, group: GpuNodeGroupConfig, r: dict) -> Check:
    name, want = "ultraserver type", group.capacity.ultraserver_type
    block_id = r.get("CapacityBlockId")
    if not block_id:
        return Check(name, subject, FAIL,
                     f"{r.get('CapacityReservationId')} belongs to no Capacity Block, so it is "
                     f"no UltraServer block; {group.instance_type} needs one",
                     "buy an UltraServer Capacity Block (aws ec2 "
                     "describe-capacity-block-offerings --ultraserver-type ...) and use its "
                     "reservation ID")
    try:
        blocks = ec2.describe_capacity_blocks(CapacityBlockIds=[block_id]).get(
            "CapacityBlocks", [])
    except AWS_ERRORS as err:
        return Check(name, subject, FAIL, describe_error(err),
                     "allow ec2:DescribeCapacityBlocks for your credentials")
    got = blocks[0].get("UltraserverType") if blocks else None
    if got != want:
        return Check(name, subject, FAIL,
                     f"Capacity Block {block_id} is UltraServer type {got or '(none)'}, the "
                     f"config says {want}",
                     f"set {subject}.ultraserver_type: {got}" if got else
                     "use the reservation of an UltraServer Capacity Block")
    return Check(name, subject, PASS, f"Capacity Block {block_id}: {got}")


def _check_zone(reads: PreflightReads, cfg: KitConfig, subject: str, group: GpuNodeGroupConfig,
                zone: str | None) -> list[Check]:
    if zone is None:
        return []
    try:
        zones = reads.availability_zone(zone)
    except AWS_ERRORS as err:
        return [Check("ultraserver zone", subject, FAIL, describe_error(err),
                      "allow ec2:DescribeAvailabilityZones for your credentials")]
    if not zones:
        return [Check("ultraserver zone", subject, FAIL, f"zone {zone} not found",
                      "check the reservation's region")]
    z = zones[0]
    checks = []
    if z.get("ZoneType") != "local-zone":
        checks.append(Check("ultraserver zone", subject, WARN,
                            f"the block is in {zone}, a {z.get('ZoneType')}; AWS documents "
                            "P6e-GB200 UltraServer blocks in the Dallas Local Zone",
                            "nothing to do if the block launches; the config needs no "
                            "local_zones entry for a regional AZ"))
    elif zone not in cfg.local_zones:
        checks.append(Check("ultraserver zone", subject, FAIL,
                            f"the block is in Local Zone {zone}, which local_zones does not list",
                            f"add {zone} at the end of local_zones and set the group's availability_zone "
                            f"to it"))
    else:
        checks.append(Check("ultraserver zone", subject, PASS,
                            f"Local Zone {zone} (zone group {z.get('GroupName')})"))
    opt_in = z.get("OptInStatus")
    if opt_in == "not-opted-in":
        checks.append(Check("zone group opt-in", subject, FAIL,
                            f"the account is not opted in to zone group {z.get('GroupName')}",
                            f"aws ec2 modify-availability-zone-group --region {cfg.region} "
                            f"--group-name {z.get('GroupName')} --opt-in-status opted-in"))
    else:
        checks.append(Check("zone group opt-in", subject, PASS,
                            f"{z.get('GroupName')}: {opt_in}"))
    fs = cfg.storage.shared_filesystem
    parent = z.get("ParentZoneName")
    if fs.type == "fsx-lustre" and parent and fs.availability_zone not in (None, parent) \
            and z.get("ZoneType") == "local-zone":
        checks.append(Check("shared file system zone", "storage.shared_filesystem", WARN,
                            f"the file system is in {fs.availability_zone}, the Local Zone's "
                            f"parent is {parent}: Lustre traffic takes a longer path",
                            f"set storage.shared_filesystem.availability_zone: {parent}"))
    return checks

"""Preflight of a GPU group's capacity reservation (On-Demand Capacity Reservation or Capacity
Block): it exists, is the kind, instance type, zone, platform and tenancy the group launches, is
usable now and for long enough, and has room for the group's nodes (EC2
DescribeCapacityReservations; DescribeInstances for the group's own nodes in it)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from infra import names
from infra.config import GpuNodeGroupConfig
from infra.problems import FAIL, PASS, WARN
from infra.trainer_contract import EKS_SCALE_DOWN_MARGIN_S
from ops.aws import AWS_ERRORS, describe_error, error_code, tag_dict
from ops.check_result import Check
from ops.preflight_reads import PreflightReads

# Capacity reservation states [EC2 API, CapacityReservation.State; EC2 User Guide, "View Capacity
# Blocks"]. A Capacity Block is scheduled until its start date, then active.
_RESERVATION_USABLE = {"active"}
_RESERVATION_LATER = {"scheduled", "payment-pending", "pending", "assessing", "delayed"}
_RESERVATION_GONE = {"expired", "cancelled", "failed", "payment-failed", "unsupported"}
# Before a Capacity Block starts its instance counts read zero; this tag holds the number it will
# deliver [EC2 User Guide, "View Capacity Blocks"].
_CB_REQUESTED_TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"

# What the kit's nodes are, for a reservation's attributes [EC2 API, CapacityReservation
# InstancePlatform and Tenancy enums]: the EKS AL2023 AMIs, no tenancy in the launch template.
_RESERVATION_PLATFORM = "Linux/UNIX"
_RESERVATION_TENANCY = "default"


def group_subject(name: str) -> str:
    return f"gpu_node_groups.{name}"


def _fmt_time(t: datetime | None) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "?"


def _hours_until(t: datetime, now: datetime) -> str:
    hours = (t - now).total_seconds() / 3600
    return f"in {hours:.1f} h" if hours >= 0 else f"{-hours:.1f} h ago"


def check_reservation(reads: PreflightReads, group_name: str, group: GpuNodeGroupConfig, region: str,
                      now: datetime | None = None, environment: str | None = None) -> list[Check]:
    """The group's reservation exists, matches type/AZ/platform/tenancy, holds `desired_size`, and
    is usable for long enough. ``environment`` (the config's name) tells the group's own running
    nodes apart from other instances in the reservation. The reservation is read once per run
    (``reads``): an UltraServer group's block checks read it too."""
    cap = group.capacity
    subject = f"{group_subject(group_name)}.capacity"
    if cap.type == "on-demand" or cap.reservation_id is None:
        return []
    now = now or datetime.now(timezone.utc)
    rid = cap.reservation_id
    kind = "capacity block" if cap.type == "capacity-block" else "capacity reservation"
    try:
        found = reads.capacity_reservations(rid)
    except AWS_ERRORS as err:
        if "NotFound" in error_code(err) or "Malformed" in error_code(err):
            found = []
        else:
            return [Check("reservation exists", subject, FAIL, describe_error(err),
                          "allow ec2:DescribeCapacityReservations for your credentials")]
    if not found:
        return [Check("reservation exists", subject, FAIL,
                      f"{kind} {rid} not found in {region}",
                      f"check the ID and the region: aws ec2 describe-capacity-reservations "
                      f"--region {region}; put the right cr-... into {subject}.reservation_id")]
    r = found[0]
    checks = [Check("reservation exists", subject, PASS,
                    f"{rid} ({r.get('ReservationType', 'default')}) in {region}")]

    rtype = r.get("ReservationType", "default")
    if cap.type == "capacity-block" and rtype != "capacity-block":
        checks.append(Check("reservation kind", subject, FAIL,
                            f"{rid} is an On-Demand Capacity Reservation, not a capacity block",
                            f"set {subject}.type: odcr"))
    elif cap.type == "odcr" and rtype == "capacity-block":
        checks.append(Check("reservation kind", subject, FAIL,
                            f"{rid} is a capacity block, not an On-Demand Capacity Reservation",
                            f"set {subject}.type: capacity-block (the launch template then asks "
                            "for the capacity-block market type)"))

    itype = r.get("InstanceType")
    if itype != group.instance_type:
        checks.append(Check("reservation instance type", subject, FAIL,
                            f"{rid} reserves {itype}, the group asks for {group.instance_type}",
                            f"set {group_subject(group_name)}.instance_type: {itype}, or use a "
                            f"reservation for {group.instance_type}"))
    else:
        checks.append(Check("reservation instance type", subject, PASS, f"{itype}"))

    az = r.get("AvailabilityZone")
    if az != group.availability_zone:
        checks.append(Check("reservation AZ", subject, FAIL,
                            f"{rid} is in {az}, the group is in {group.availability_zone}",
                            f"set {group_subject(group_name)}.availability_zone: {az} (and list "
                            f"{az} in availability_zones)"))
    else:
        checks.append(Check("reservation AZ", subject, PASS, f"{az}"))

    # The kit's nodes are Linux (the EKS AL2023 AMIs) on default tenancy (its launch template sets
    # none), and EC2 launches an instance into a reservation only with matching attributes
    # "(instance type, platform, Availability Zone, and tenancy)" [EC2 user guide,
    # capacity-reservations-launch].
    mismatched = [f"{field} {r[key]!r} (the kit launches {want!r})"
                  for field, key, want in (("platform", "InstancePlatform", _RESERVATION_PLATFORM),
                                           ("tenancy", "Tenancy", _RESERVATION_TENANCY))
                  if r.get(key) not in (None, want)]
    if mismatched:
        checks.append(Check("reservation attributes", subject, FAIL,
                            f"{rid} reserves {' and '.join(mismatched)}: EC2 launches an instance "
                            "into a reservation only when platform and tenancy match",
                            f"use a reservation for {_RESERVATION_PLATFORM} on {_RESERVATION_TENANCY} "
                            f"tenancy and put its ID into {subject}.reservation_id"))

    state = r.get("State", "?")
    start, end = r.get("StartDate"), r.get("EndDate")
    window = f"{_fmt_time(start)} to {_fmt_time(end)}" if start or end else "no end date"
    left = (end - now).total_seconds() if end else None
    if state in _RESERVATION_USABLE and left is not None and left <= 0:
        # EC2 ends a reservation "within an hour" of its end date [EC2 user guide,
        # capacity-reservations-using]: it may still read active after it.
        checks.append(Check("reservation state", subject, FAIL,
                            f"active, but its end date passed: {_fmt_time(end)} "
                            f"({_hours_until(end, now)})",
                            f"{rid} cannot deliver instances any more: buy a new {kind} and put "
                            f"its ID into {subject}.reservation_id"))
    elif (state in _RESERVATION_USABLE and cap.type == "capacity-block" and left is not None
          and left <= EKS_SCALE_DOWN_MARGIN_S):
        checks.append(Check("reservation state", subject, FAIL,
                            f"active, but it ends {_fmt_time(end)} ({_hours_until(end, now)}): EKS "
                            f"scales a Capacity Block's node group to 0 "
                            f"{EKS_SCALE_DOWN_MARGIN_S // 60} minutes before its end (EC2 "
                            "terminates the instances 30 minutes before), so a deploy now gets no "
                            "nodes",
                            f"buy a later {kind} and put its ID into {subject}.reservation_id"))
    elif state in _RESERVATION_USABLE:
        ends = f"; ends {_fmt_time(end)} ({_hours_until(end, now)})" if end else ""
        checks.append(Check("reservation state", subject, PASS, f"active{ends}"))
    elif state in _RESERVATION_LATER:
        when = f"; starts {_fmt_time(start)} ({_hours_until(start, now)})" if start else ""
        checks.append(Check("reservation state", subject, WARN, f"{state}{when} ({window})",
                            "deploy the GPU stack once the reservation is active; nodes cannot "
                            "launch into it before its start date"))
    else:
        checks.append(Check("reservation state", subject, FAIL, f"{state} ({window})",
                            f"{rid} cannot deliver instances any more: buy a new {kind} and put "
                            f"its ID into {subject}.reservation_id"))

    if state in _RESERVATION_GONE:
        return checks  # its size says nothing more: it delivers no instance
    total = int(r.get("TotalInstanceCount", 0) or 0)
    available = int(r.get("AvailableInstanceCount", 0) or 0)
    tags = tag_dict(r.get("Tags"))
    if state != "active" and total == 0 and _CB_REQUESTED_TAG in tags:
        total = int(tags[_CB_REQUESTED_TAG])
    want = group.desired_size
    own = (_own_instances(reads.clients.ec2, rid, environment, group_name)
           if state == "active" and available < want and environment else 0)
    if total < want:
        checks.append(Check("reservation size", subject, FAIL,
                            f"{rid} holds {total} instance(s), the group wants {want}",
                            f"lower {group_subject(group_name)}.desired_size (and max_size) to "
                            f"{total}, or reserve more capacity" if total else
                            f"reserve capacity for {want} instance(s) and put its ID into "
                            f"{subject}.reservation_id"))
    elif state == "active" and available + own < want:
        # AvailableInstanceCount is what is left: the group's own running nodes already took
        # theirs, so only other instances stand in its way.
        others = total - available - own
        checks.append(Check("reservation size", subject, WARN,
                            f"{rid} holds {total}: {others} other instance(s) use it"
                            + (f" besides this group's {own}" if own else "")
                            + f", {available} free; the group wants {want}",
                            "stop the other instances using the reservation (aws ec2 "
                            f"describe-instances --filters Name=capacity-reservation-id,Values={rid}), "
                            f"or lower {group_subject(group_name)}.desired_size"))
    else:
        checks.append(Check("reservation size", subject, PASS,
                            f"{total} instance(s) reserved, group wants {want}"))
    return checks


def _own_instances(ec2: Any, rid: str, environment: str, group_name: str) -> int:
    """Running or starting instances of this environment's group ``group_name`` in reservation
    ``rid`` (the launch template tags every instance with both). 0 when they cannot be read."""
    filters = [{"Name": "capacity-reservation-id", "Values": [rid]},
               {"Name": f"tag:{names.ENVIRONMENT_TAG}", "Values": [environment]},
               {"Name": f"tag:{names.NODE_GROUP_TAG}", "Values": [group_name]},
               {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    try:
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        return sum(len(r.get("Instances", [])) for page in pages for r in page.get("Reservations", []))
    except AWS_ERRORS:
        return 0


def check_shared_reservations(reads: PreflightReads, groups: dict[str, GpuNodeGroupConfig]) -> list[Check]:
    """Groups that launch into one reservation fit in it together: the per-group size check sees
    each group alone. Their max_size summed against the reservation's size, where it reads."""
    sharing: dict[str, list[str]] = {}
    for name, g in groups.items():
        if g.capacity.type != "on-demand" and g.capacity.reservation_id is not None:
            sharing.setdefault(g.capacity.reservation_id, []).append(name)
    checks = []
    for rid, names_ in sharing.items():
        if len(names_) < 2:
            continue
        try:
            found = reads.capacity_reservations(rid)
        except AWS_ERRORS:
            continue  # the per-group check reports the read
        if not found:
            continue
        r = found[0]
        total = int(r.get("TotalInstanceCount", 0) or 0)
        tags = tag_dict(r.get("Tags"))
        if total == 0 and _CB_REQUESTED_TAG in tags:
            total = int(tags[_CB_REQUESTED_TAG])
        want = sum(groups[n].max_size for n in names_)
        subjects = ", ".join(group_subject(n) for n in names_)
        if want > total:
            checks.append(Check("shared reservation size", subjects, FAIL,
                                f"{rid} holds {total} instance(s); groups {', '.join(names_)} "
                                f"launch into it and can scale to {want} together (sum of "
                                "max_size)", f"lower their max_size to {total} in all, or give "
                                "each group its own reservation"))
        else:
            checks.append(Check("shared reservation size", subjects, PASS,
                                f"{rid} holds {total}; groups {', '.join(names_)} scale to {want}"))
    return checks

"""A Capacity Block's window, as `rlkit status` shows it and `rlkit launch` checks it.

EKS scales a Capacity Block node group to 0 about 40 minutes before the block ends (EC2 starts
shutting the instances down 30 minutes before the end) [EKS user guide, "capacity-blocks-mng"].
A run must have a complete save in S3 by then: the launcher asks Miles for a save at the latest
one rollout plus one save and upload before that moment (rltrainer.reservation), so launch
refuses a run for which its start (image pull, Ray, loading the newest save:
``infra.config.derived.startup_estimate``) plus even that (one save and its upload:
``save_upload_estimate``) does not fit. The window is read with
DescribeCapacityReservations (moto has no Capacity Blocks: tests use botocore's Stubber).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from infra.config import KitConfig
from infra.config.derived import save_upload_estimate, startup_estimate
from infra.trainer_contract import EKS_SCALE_DOWN_MARGIN_S

MARGIN = timedelta(seconds=EKS_SCALE_DOWN_MARGIN_S)


@dataclass(frozen=True)
class Window:
    group: str
    reservation_id: str
    state: str
    start: datetime | None
    end: datetime | None


def capacity_block_groups(cfg: KitConfig) -> dict[str, str]:
    """GPU node group name -> Capacity Block reservation ID."""
    return {n: g.capacity.reservation_id for n, g in cfg.gpu_node_groups.items()
            if g.capacity.type == "capacity-block" and g.capacity.reservation_id}


def read_window(ec2: Any, group: str, reservation_id: str) -> Window | None:
    """The block's state, start and end (None: no such reservation). Raises the client's errors."""
    found = ec2.describe_capacity_reservations(
        CapacityReservationIds=[reservation_id]).get("CapacityReservations", [])
    if not found:
        return None
    r = found[0]
    return Window(group, reservation_id, r.get("State", "?"), _utc(r.get("StartDate")),
                  _utc(r.get("EndDate")))


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def fmt(t: datetime | None) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "?"


def _duration(td: timedelta) -> str:
    minutes = int(td.total_seconds() // 60)
    sign, minutes = ("-" if minutes < 0 else ""), abs(minutes)
    return f"{sign}{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{sign}{minutes} min"


def describe(window: Window, now: datetime) -> str:
    """One line: the block, its window, the time left and when EKS drains the nodes."""
    head = (f"capacity block {window.reservation_id} (gpu_node_groups.{window.group}): "
            f"{window.state}, {fmt(window.start)} to {fmt(window.end)}")
    if window.end is None:
        return head
    if window.start is not None and now < window.start:
        return f"{head}; starts in {_duration(window.start - now)}"
    left = window.end - now
    if left <= timedelta(0):
        return f"{head}; ended {_duration(-left)} ago"
    return (f"{head}; {_duration(left)} left; EKS drains the nodes at {fmt(window.end - MARGIN)} "
            f"({_duration(left - MARGIN)} from now)")


def first_save_problem(cfg: KitConfig, window: Window, now: datetime) -> str | None:
    """Why a run launched now cannot have one complete save in S3 before EKS drains the block's
    nodes (None: it can). A block that has not started counts from its start, which the pods
    wait for; the run's start (``startup_estimate``) counts before its first rollout, and one
    save and its upload (``save_upload_estimate``) after it."""
    t = cfg.training
    if window.end is None:
        return None
    start = max(now, window.start) if window.start is not None else now
    left = window.end - start
    usable = left - MARGIN
    startup, save = startup_estimate(cfg), save_upload_estimate(cfg)
    need = timedelta(minutes=startup.minutes + t.rollout_minutes + save.minutes)
    if usable >= need:
        return None
    return (f"capacity block {window.reservation_id} (gpu_node_groups.{window.group}) ends "
            f"{fmt(window.end)}: {_duration(left)} left minus the {_duration(MARGIN)} before EKS "
            f"drains its nodes = {_duration(usable)}, but one complete save needs the run's start "
            f"({startup.how}: {_duration(timedelta(minutes=startup.minutes))}) plus one rollout "
            f"(training.rollout_minutes = {t.rollout_minutes:g}) plus one save and its upload "
            f"({save.how}: {_duration(timedelta(minutes=save.minutes))}) = {_duration(need)} (the "
            "launcher asks for a save after the first rollout at the latest). Launch on a block "
            "with more time left, or set training.startup_minutes, training.rollout_minutes or "
            "training.save_upload_minutes to what earlier runs measured if that was less (the "
            "launcher logs what it measures)")

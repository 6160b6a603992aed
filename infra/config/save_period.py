"""Saves must reach S3 about as fast as the run makes them: ``training.checkpoint.save_interval``
against the run's estimates and the shared file system's size.

The launcher deletes a local save only once S3 holds it complete, never the newest save complete
there, and never one above the newest ``keep_local`` finished ones (``rltrainer.checkpoints.retention``;
it uploads one save at a time). The file system is sized for the reference weights plus
``keep_local + 1`` saves (``infra.catalog.fsx``), which holds while each save is in S3 before the
next one starts. When one save plus its upload (``training.save_upload_minutes``, or the kit's
estimate from the save's size and the file system's throughput: ``save_upload_estimate``) outlasts a save
period (``save_interval`` x ``training.rollout_minutes``), a save starts while the one before it
is still uploading: the newest save complete in S3 stays too, so with ``keep_local: 1`` three saves
are on disk (saves 19 complete in S3, 39 uploading, 59 being written: nothing is prunable).
"""

from __future__ import annotations

import math

from infra.catalog.fsx import shared_fs_required_gib, valid_shared_fs_capacity_gib
from infra.config.derived import save_upload_estimate
from infra.config.errors import problem
from infra.config.model import KitConfig
from infra.problems import Problem


def saves_behind(interval: int, rollout_minutes: float, save_upload_minutes: float) -> int:
    """Earlier saves not yet complete in S3 when a save starts: 0 when one save and its upload fit
    in a save period, else one for each further period they span (the estimate counts the save's
    write in, so this errs towards one too many)."""
    return max(0, math.ceil(save_upload_minutes / (interval * rollout_minutes)) - 1)


def save_period_check(cfg: KitConfig) -> Problem | str | None:
    """A problem when the file system has no room for the saves a lagging upload keeps (the next
    save would fail with ENOSPC), a warning when it has (or the model cannot be sized), None when
    each save is in S3 before the next starts. Nothing without a shared file system, or for values
    other rules refuse."""
    t = cfg.training
    fs = cfg.storage.shared_filesystem
    interval, keep = t.checkpoint.save_interval, t.checkpoint.keep_local
    if fs.type == "none" or interval < 1 or keep < 1 or not t.rollout_minutes > 0:
        return None
    estimate = save_upload_estimate(cfg)
    if not estimate.minutes > 0:
        return None
    period = interval * t.rollout_minutes
    behind = saves_behind(interval, t.rollout_minutes, estimate.minutes)
    if not behind:
        return None
    held = max(keep, behind + 1)  # finished saves that stay while the next one is written
    need = shared_fs_required_gib(t.model, held)
    enough = math.ceil(estimate.minutes / t.rollout_minutes)
    uploading = "the one before it is" if behind == 1 else f"the {behind} before it are"
    why = (f"a save every {interval} rollouts of training.rollout_minutes {t.rollout_minutes:g} is one "
           f"every {period:g} minutes, less than one save and its upload ({estimate.how}: "
           f"{estimate.minutes:g} min): each save starts while {uploading} still uploading, and the "
           "launcher deletes a local save only once a newer one is complete in S3")
    fix = (f"set training.checkpoint.save_interval: {enough} or more (a save per save and upload at "
           "most)")
    if t.save_upload_minutes is None:  # the kit's estimate: a measured run may know better
        fix += ", or set training.save_upload_minutes to what an earlier run measured"
    if need is not None and fs.capacity_gib < need:
        return problem(
            "training.checkpoint.save_interval", interval,
            f"{why}, so {held + 1} saves of {t.model} are on the shared file system at once (the "
            f"newest complete in S3, {behind} uploading, the one being written), {need} GiB with its "
            f"reference weights: more than storage.shared_filesystem.capacity_gib {fs.capacity_gib}, "
            f"sized for training.checkpoint.keep_local + 1 = {keep + 1} saves, so the save being "
            "written fails with ENOSPC",
            f"{fix}, or size the file system for them (capacity_gib: {valid_shared_fs_capacity_gib(need)})")
    room = (f"storage.shared_filesystem.capacity_gib {fs.capacity_gib} holds them ({need} GiB)"
            if need is not None else
            f"the kit cannot size {t.model}'s saves: make sure capacity_gib holds them and the weights")
    return (f"training.checkpoint.save_interval {interval}: {why}, so the newest save in S3 is "
            f"{behind + 1} saves older than the one being written and {held + 1} are on the shared "
            f"file system at once; {room}. If "
            f"uploads fall further behind, finished saves pile up until the file system is full. "
            f"Fix: {fix}.")

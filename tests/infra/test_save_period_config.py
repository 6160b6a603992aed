"""Saves made faster than they upload: training.checkpoint.save_interval x rollout_minutes against
one save and its upload (training.save_upload_minutes, or the kit's estimate from the save's size),
and the shared file system's room for the save that then stays behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import ConfigError, parse_config, shared_fs_required_gib
from infra.config.save_period import saves_behind
from infra.config.warnings import config_warnings

# 20 rollouts of 1 minute between saves, 35 minutes for a save and its upload
FAST = {"rollout_minutes": 1, "save_upload_minutes": 35}


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return [str(p) for p in err.value.problems]


def lag_warnings(data: dict) -> list[str]:
    return [w for w in config_warnings(parse_config(data)) if w.startswith("training.checkpoint.save_interval")]


def test_a_save_period_shorter_than_its_upload_without_room_for_the_extra_save_is_refused():
    """Before: nothing compared the two; with keep_local 1 the launcher keeps the newest save
    complete in S3 (19), the one uploading (39) and the one being written (59), and the default
    1200 GiB holds two saves and the weights: the third failed with ENOSPC on every retry."""
    assert shared_fs_required_gib("qwen3-30b-a3b", 1) <= 1200 < shared_fs_required_gib("qwen3-30b-a3b", 2) == 1252
    assert problems({"training": FAST}) == [
        "training.checkpoint.save_interval = 20: a save every 20 rollouts of training.rollout_minutes 1 "
        "is one every 20 minutes, less than one save and its upload (training.save_upload_minutes = "
        "35: 35 min): each save starts while the one before it is still uploading, and the launcher "
        "deletes a local save only once a newer one is complete in S3, so 3 saves of qwen3-30b-a3b "
        "are on the shared file system at once (the newest complete in S3, 1 uploading, the one being written), 1252 GiB with its reference "
        "weights: more than storage.shared_filesystem.capacity_gib 1200, sized for "
        "training.checkpoint.keep_local + 1 = 2 saves, so the save being written fails with ENOSPC. "
        "Fix: set training.checkpoint.save_interval: 35 or more (a save per save and upload at "
        "most), or size the file system for them (capacity_gib: 2400)."]


@pytest.mark.parametrize("data", [
    {"training": {**FAST, "checkpoint": {"save_interval": 35}}},  # the fix: 35 x 1 >= 35
    {"training": {"rollout_minutes": 10, "save_upload_minutes": 35}},  # the default's 200 minutes
])
def test_a_save_period_at_least_its_upload_passes_quietly(data):
    assert lag_warnings(data) == []


def test_with_room_for_the_extra_save_it_is_a_warning():
    data = {"training": FAST, "storage": {"shared_filesystem": {"capacity_gib": 2400}}}
    assert lag_warnings(data) == [
        "training.checkpoint.save_interval 20: a save every 20 rollouts of training.rollout_minutes 1 is "
        "one every 20 minutes, less than one save and its upload (training.save_upload_minutes = "
        "35: 35 min): each save starts while the one before it is still uploading, and the launcher "
        "deletes a local save only once a newer one is complete in S3, so the newest save in S3 is 2 "
        "saves older than the one being written and 3 are on the shared file system at once; storage.shared_filesystem.capacity_gib 2400 holds them "
        "(1252 GiB). If uploads fall further behind, finished saves pile up until the file system is "
        "full. Fix: set training.checkpoint.save_interval: 35 or more (a save per save and upload at "
        "most)."]


def test_keep_local_two_already_keeps_the_save_complete_in_s3():
    """With keep_local 2 the newest complete save is one of the two kept: one upload behind needs no
    more room than the file system is sized for (three saves), so only the lag is said."""
    data = {"training": {**FAST, "checkpoint": {"keep_local": 2}},
            "storage": {"shared_filesystem": {"capacity_gib": 2400}}}
    (warning,) = lag_warnings(data)
    assert "3 are on the shared file system at once" in warning


def test_two_uploads_behind_need_two_more_saves():
    assert saves_behind(20, 1, 35) == 1 and saves_behind(20, 1, 40) == 1 and saves_behind(20, 1, 41) == 2
    (problem,) = problems({"training": {"rollout_minutes": 1, "save_upload_minutes": 45},
                           "storage": {"shared_filesystem": {"capacity_gib": 1200}}})
    assert "4 saves of qwen3-30b-a3b are on the shared file system at once (the newest complete in S3, " \
           "2 uploading, the one being written), 1650 GiB" in problem
    assert problem.endswith("Fix: set training.checkpoint.save_interval: 45 or more (a save per "
                            "save and upload at most), or size the file system for them "
                            "(capacity_gib: 2400).")


# training.save_upload_minutes unset on the default file system (1200 GiB at 250 MB/s/TiB): one
# 398 GiB Qwen3-30B-A3B save written and read back at 293 MB/s (infra.config.derived).
DERIVED = ("training.save_upload_minutes unset: one qwen3-30b-a3b save (398 GiB) written to the "
           "shared file system and read back for its upload, each at the file system's 293 MB/s "
           "baseline (the head node's 100 Gbps share of the network to S3 is faster)")


def test_unset_the_rule_uses_the_kits_estimate_of_one_save_and_its_upload():
    """Before: unset meant a fixed 35 minutes (reasoned from a Ray head on a 1.56 Gbps system
    node), so a save every 20 rollouts of 2 minutes (40 minutes) passed, while the file system
    alone bounds one save's write plus its upload's read to 49 minutes: each save started while
    the one before it uploaded, and the third save on the default 1200 GiB failed with ENOSPC."""
    data = {"training": {"rollout_minutes": 2}}
    assert problems(data) == [
        "training.checkpoint.save_interval = 20: a save every 20 rollouts of training.rollout_minutes 2 "
        f"is one every 40 minutes, less than one save and its upload ({DERIVED}: 49 min): each save starts "
        "while the one before it is still uploading, and the launcher deletes a local save only once "
        "a newer one is complete in S3, so 3 saves of qwen3-30b-a3b are on the shared file system at "
        "once (the newest complete in S3, 1 uploading, the one being written), 1252 GiB with its "
        "reference weights: more than storage.shared_filesystem.capacity_gib 1200, sized for "
        "training.checkpoint.keep_local + 1 = 2 saves, so the save being written fails with ENOSPC. "
        "Fix: set training.checkpoint.save_interval: 25 or more (a save per save and upload at most), "
        "or set training.save_upload_minutes to what an earlier run measured, or size the file "
        "system for them (capacity_gib: 2400)."]
    # The field, when set, replaces the estimate; so does the fix's save interval.
    assert lag_warnings({"training": {"rollout_minutes": 2, "save_upload_minutes": 40}}) == []
    assert lag_warnings({"training": {"rollout_minutes": 2, "checkpoint": {"save_interval": 25}}}) == []


def test_save_interval_reaches_the_run_config_and_the_trainers_rules_name_it():
    from infra.catalog import INSTANCE_TYPES
    from infra.config.run_config import run_config_document

    cfg = parse_config({"training": {"checkpoint": {"save_interval": 50}}})
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    assert run_config_document(cfg, itype, bucket="b", prompt_data="/fsx/d.jsonl")["checkpoint"]["save_interval"] == 50
    assert parse_config({}).training.checkpoint.save_interval == 20
    assert problems({"training": {"checkpoint": {"save_interval": 0}}}) == [
        "training.checkpoint.save_interval = 0: the trainer refuses it: must be >= 1. "
        "Fix: use a value of at least 1."]


def test_the_rule_is_documented_where_save_upload_minutes_is():
    from infra.config.training_model import TrainingConfig

    text = TrainingConfig.model_fields["save_upload_minutes"].description
    assert "checkpoint.save_interval x rollout_minutes" in text
    ops = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert "infra/config/save_period.py" in ops


def test_the_kits_estimate_of_one_save_and_its_upload():
    """The default config: 49 minutes, with how it was reached; the field when set; the head's
    network where it is slower than the file system; a guess where the save cannot be sized."""
    from infra.config.derived import save_upload_estimate

    estimate = save_upload_estimate(parse_config({}))
    assert (estimate.minutes, estimate.how) == (49, DERIVED)
    assert save_upload_estimate(parse_config({"training": {"save_upload_minutes": 30}})).how == (
        "training.save_upload_minutes = 30")
    # 14400 GiB at 1000 MB/s/TiB reads at 14062 MB/s, more than a p5's 100 Gbps card (12500 MB/s)
    fast = parse_config({"storage": {"shared_filesystem": {"capacity_gib": 14400,
                                                           "throughput_mb_s_per_tib": 1000}}})
    assert save_upload_estimate(fast).how == (
        "training.save_upload_minutes unset: one qwen3-30b-a3b save (398 GiB) written at the file "
        "system's 14062 MB/s baseline and read back for its upload at the head node's 100 Gbps share "
        "of the network to S3 (12500 MB/s, slower than the file system)")
    unsized = save_upload_estimate(parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                                                 "training": {"nodes": 1, "hf_checkpoint": "/models/q"}}))
    assert (unsized.minutes, unsized.how) == (35, "training.save_upload_minutes unset: a guess, since the "
                                              "kit cannot size the save (no shared file system)")


@pytest.mark.parametrize("value", [0, -5])
def test_a_set_save_upload_estimate_must_be_positive(value):
    assert problems({"training": {"save_upload_minutes": value}}) == [
        f"training.save_upload_minutes = {float(value)}: must be more than 0 minutes. Fix: set an "
        "estimate from an earlier run (the launcher logs what it measures)."]


def test_the_schema_says_how_the_estimate_is_reached_when_unset():
    from infra.config.training_model import TrainingConfig

    from infra.config.derived import save_upload_estimate

    field = TrainingConfig.model_fields["save_upload_minutes"]
    assert field.default is None
    minutes = save_upload_estimate(parse_config({})).minutes
    assert f"{minutes} minutes for the default config" in field.description

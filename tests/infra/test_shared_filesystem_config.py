"""Config rules for the shared file system: one clear problem per mistake, exact text."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, parse_config, shared_fs_required_gib
from infra.catalog.models import (
    CHECKPOINT_BYTES_PER_PARAM,
    GIB,
    checkpoint_bytes,
    reference_weights_bytes,
)
from infra.catalog.models import MODEL_CATALOG


def problems(data: dict, path_prefix: str = "") -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return [str(p) for p in err.value.problems if p.path.startswith(path_prefix)]


def test_default_config_has_a_shared_file_system():
    cfg = parse_config({})
    fs = cfg.storage.shared_filesystem
    assert (fs.type, fs.capacity_gib, fs.throughput_mb_s_per_tib) == ("fsx-lustre", 1200, 250)
    assert cfg.training.hf_checkpoint == "/fsx/models/Qwen3-30B-A3B"


def test_multi_node_run_without_a_shared_file_system_is_refused():
    assert problems({"storage": {"shared_filesystem": {"type": "none"}},
                     "training": {"hf_checkpoint": "/models/Qwen3-30B-A3B"}}) == [
        "storage.shared_filesystem.type = 'none': a multi-node run (training.nodes = 2) needs a "
        "file system that the Ray head, every worker and the job submitter share: the launcher "
        "runs on the head and must see the workers' saves and inputs. Fix: set "
        "storage.shared_filesystem.type: fsx-lustre (the default), or training.nodes: 1."]


def test_single_node_run_may_go_without_one():
    cfg = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                        "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    assert cfg.storage.shared_filesystem.type == "none"


def test_weights_under_the_mount_need_the_file_system():
    assert problems({"storage": {"shared_filesystem": {"type": "none"}},
                     "training": {"nodes": 1}}) == [
        "training.hf_checkpoint = '/fsx/models/Qwen3-30B-A3B': /fsx is the shared file system's "
        "mount, and storage.shared_filesystem.type is none. Fix: use a path in the image or an "
        "s3:// URI in the data bucket, or set storage.shared_filesystem.type: fsx-lustre."]


@pytest.mark.parametrize("capacity, fix", [(3000, 4800), (1300, 2400), (100, 1200)])
def test_capacity_must_be_a_persistent_2_size(capacity, fix):
    assert problems({"storage": {"shared_filesystem": {"capacity_gib": capacity}}}) == [
        f"storage.shared_filesystem.capacity_gib = {capacity}: FSx for Lustre PERSISTENT_2 "
        f"capacity is 1200 GiB or a multiple of 2400 GiB. Fix: use {fix}, the next valid size."]


@pytest.mark.parametrize("capacity", [1200, 2400, 4800, 9600])
def test_valid_persistent_2_sizes(capacity):
    cfg = parse_config({"storage": {"shared_filesystem": {"capacity_gib": capacity}}})
    assert cfg.storage.shared_filesystem.capacity_gib == capacity


def test_throughput_must_be_a_persistent_2_tier():
    assert problems({"storage": {"shared_filesystem": {"throughput_mb_s_per_tib": 300}}}) == [
        "storage.shared_filesystem.throughput_mb_s_per_tib = 300: FSx for Lustre PERSISTENT_2 "
        "offers 125, 250, 500, 1000 MB/s per TiB. Fix: use one of those, e.g. 250."]


def test_capacity_must_hold_the_weights_and_two_checkpoints():
    assert problems({"training": {"model": "qwen3-235b-a22b"}},
                    "storage.shared_filesystem") == [
        "storage.shared_filesystem.capacity_gib = 1200: too small for qwen3-235b-a22b: its "
        "reference weights plus two checkpoints (weights + optimizer state; the newest complete "
        "save stays while the next is written) take 6569 GiB. Fix: set capacity_gib: 7200."]
    # The fix it names is accepted.
    assert not problems_or_none({"training": {"model": "qwen3-235b-a22b"},
                                 "storage": {"shared_filesystem": {"capacity_gib": 7200}}})


def problems_or_none(data: dict) -> list[str]:
    try:
        parse_config(data)
    except ConfigError as err:
        return [str(p) for p in err.value.problems if p.path.startswith("storage.")]
    return []


def test_required_size_is_the_planners_checkpoint_size():
    model = MODEL_CATALOG["qwen3-30b-a3b"]
    # BF16 weight + FP32 master + two FP32 Adam moments per parameter.
    assert CHECKPOINT_BYTES_PER_PARAM == 14
    assert checkpoint_bytes(model) == (model.total_params + model.mtp_params) * 14
    assert reference_weights_bytes(model) == model.total_params * 2
    expected = -(-(reference_weights_bytes(model) + 2 * checkpoint_bytes(model)) // GIB)
    assert shared_fs_required_gib("qwen3-30b-a3b") == expected == 854  # fits the 1200 default
    assert shared_fs_required_gib("not-a-catalog-model") is None


def test_run_config_checkpoints_on_the_shared_file_system_in_one_place():
    """Validation and the manifests use the same run config: saves go to /fsx/checkpoints/<run>."""
    from infra.catalog import INSTANCE_TYPES
    from infra.config.run_config import run_config_document

    cfg = parse_config({})
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    doc = run_config_document(cfg, itype, bucket="b", prompt_data="/fsx/datasets/x.jsonl")
    assert doc["checkpoint"]["local_dir"] == f"/fsx/checkpoints/{cfg.training.run_name}"
    single = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                           "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    doc = run_config_document(single, itype, bucket="b", prompt_data="/data/x.jsonl")
    assert doc["checkpoint"]["local_dir"] == "/checkpoints"


def test_keep_local_sizes_the_file_system_and_reaches_the_run_config():
    """Retention keeps training.checkpoint.keep_local saves; validation sizes for those plus the one
    being written, and names the cheaper fix too (issue 21: "validation, rlkit plan and rlkit check
    size the file system from the same K")."""
    from infra.catalog import INSTANCE_TYPES
    from infra.config.derived import shared_fs_sizing
    from infra.config.run_config import run_config_document

    model = MODEL_CATALOG["qwen3-30b-a3b"]
    assert shared_fs_required_gib("qwen3-30b-a3b", 2) == -(
        -(reference_weights_bytes(model) + 3 * checkpoint_bytes(model)) // GIB) == 1252
    assert problems({"training": {"checkpoint": {"keep_local": 2}}}, "storage.shared_filesystem") == [
        "storage.shared_filesystem.capacity_gib = 1200: too small for qwen3-30b-a3b: its reference "
        "weights plus three checkpoints (weights + optimizer state; the newest 2 complete saves stay "
        "(training.checkpoint.keep_local) while the next is written) take 1252 GiB. Fix: set "
        "capacity_gib: 2400, or keep fewer saves (training.checkpoint.keep_local: 1 needs 854 GiB)."]
    cfg = parse_config({"training": {"checkpoint": {"keep_local": 2}},
                        "storage": {"shared_filesystem": {"capacity_gib": 2400}}})
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    doc = run_config_document(cfg, itype, bucket="b", prompt_data="/fsx/datasets/x.jsonl")
    assert doc["checkpoint"]["keep_local"] == 2
    assert shared_fs_sizing(cfg) == (
        "2400 GiB holds qwen3-30b-a3b's reference weights plus three checkpoints "
        "(training.checkpoint.keep_local 2 kept + the save being written): 1252 GiB needed")
    assert parse_config({}).training.checkpoint.keep_local == 1


def test_keep_local_below_one_is_the_trainers_refusal_on_the_kit_path():
    assert problems({"training": {"checkpoint": {"keep_local": 0}}}, "training") == [
        "training.checkpoint.keep_local = 0: the trainer refuses it: must be >= 1. "
        "Fix: use a value of at least 1."]

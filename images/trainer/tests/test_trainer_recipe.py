"""Recipe choices the run config makes: the reward model (data.rm_type) and CPU Adam offload
(parallel.training.optimizer_cpu_offload), as run.yaml keys, validated, and as Miles flags.

Facts from Miles v0.1.0 (../shared/upstream/miles-v0.1.0 and the radixark/miles tag): the
DAPO-math recipe (scripts/run_qwen3_30b_a3b.py) passes --rm-type deepscaler; docs/models/qwen/
qwen3-moe.md, "Optimizer", keeps --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d
--use-precision-aware-optimizer for its H100 recipes. The flags parse with Miles' own parser in
tests/manifests/test_miles_contract.py.
"""

from __future__ import annotations

import yaml
import pytest

from rltrainer.contract import ConfigError, DEFAULT_RM_TYPE, OWNED_FLAGS, RM_TYPES, parse_run_config
from rltrainer.miles import miles_train_args
from trainer_helpers import FIXTURES, pinned_source

QWEN = FIXTURES / "qwen3-30b-a3b.yaml"
OFFLOAD = ["--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer"]


def base() -> dict:
    return yaml.safe_load(QWEN.read_text())


def argv(data: dict) -> list[str]:
    return miles_train_args(parse_run_config(data), hf_checkpoint="/m", prompt_data="/d.jsonl")


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_dapo_math_recipe_scores_with_deepscaler_by_default():
    data = base()
    data["data"].pop("rm_type", None)
    cfg = parse_run_config(data)
    assert cfg.data.rm_type == DEFAULT_RM_TYPE == "deepscaler"
    assert value(argv(data), "--rm-type") == "deepscaler"
    data["data"]["rm_type"] = "boxed_math"
    assert value(argv(data), "--rm-type") == "boxed_math"
    assert OWNED_FLAGS["--rm-type"] == "data.rm_type"  # model.megatron_args may not set it again


def test_an_unknown_reward_model_is_refused_with_the_fix():
    data = base()
    data["data"]["rm_type"] = "deepscalar"
    with pytest.raises(ConfigError) as exc:
        parse_run_config(data, "run.yaml")
    assert [str(p) for p in exc.value.problems] == [
        'data.rm_type = "deepscalar": Miles v0.1.0 has no such rule-based reward (one of deepscaler, dapo, math, '
        "gemma_math, f1, gpqa, ifbench, optionally with a boxed_ prefix). Fix: use `deepscaler`."]


def test_cpu_adam_offload_is_off_unless_asked_and_then_adds_miles_three_flags():
    data = base()
    assert not set(OFFLOAD) & set(argv(data))
    data["parallel"]["training"]["optimizer_cpu_offload"] = True
    args = argv(data)
    assert args[args.index(OFFLOAD[0]):args.index(OFFLOAD[0]) + 3] == OFFLOAD
    assert all(OWNED_FLAGS[f] == "parallel.training.optimizer_cpu_offload" for f in OFFLOAD)


def test_cpu_adam_offload_must_be_a_boolean():
    data = base()
    data["parallel"]["training"]["optimizer_cpu_offload"] = "yes"
    with pytest.raises(ConfigError) as exc:
        parse_run_config(data, "run.yaml")
    assert [str(p) for p in exc.value.problems] == [
        'parallel.training.optimizer_cpu_offload = "yes": must be true or false. Fix: write '
        "`optimizer_cpu_offload: true` or `optimizer_cpu_offload: false`."]


@pytest.mark.external
def test_every_reward_model_is_one_miles_dispatches():
    """RM_TYPES against Miles v0.1.0's own dispatch (miles/rollout/rm_hub/__init__.py async_rm)."""
    import re

    source = pinned_source("miles-v0.1.0", "miles/rollout/rm_hub/__init__.py", "Miles")
    dispatched = set(re.findall(r'rm_type == "([a-z0-9_]+)"', source))
    assert set(RM_TYPES) <= dispatched, set(RM_TYPES) - dispatched
    assert 'rm_type.startswith("boxed_")' in source

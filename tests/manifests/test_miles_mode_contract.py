"""Contract: the Miles arguments `rlkit plan --rl` prints for each GRPO mode are ones Miles v0.1.0
accepts.

The planner's ``miles_mode_args`` (infra/planner/rl_modes.py) names the entry point (train.py or
train_async.py) and the flags that select placement and asynchrony (--colocate or
--rollout-num-gpus, --update-weights-interval, --fully-async, --max-weight-staleness,
--pause-generation-mode, --sglang-mem-fraction-static). Each mode's flags replace the cluster
flags of the launcher's command for the default example and are parsed with the parser Miles'
train.py builds from the pinned sources (tests/support/miles_offline.py, the same child process as
tests/manifests/test_miles_contract.py). The combinations Miles refuses at run time
(miles/utils/arguments.py ``_resolve_rollout_functions``: --fully-async with --colocate,
--partial-rollout or --pause-generation-mode abort; train_async.py asserts no --colocate) are
checked against the text of that file, since the offline parser does not run them.
"""

from __future__ import annotations

import pytest

from infra.planner.request import RLSetup
from infra.planner.rl_modes import miles_mode_args
from tests.manifests.test_miles_contract import (  # noqa: F401 - upstream is a fixture
    MILES_DIR, example_case, parse_offline, upstream,
)

MODES = {
    "on-policy colocated": (RLSetup(), "colocated"),
    "on-policy disaggregated": (RLSetup(), "disaggregated"),
    "batch 2-off": (RLSetup(overlap="batch", off_policy_steps=2), "disaggregated"),
    "stream 4-off": (RLSetup(off_policy_steps=4), "disaggregated"),
}
CLUSTER_FLAGS = {"--actor-num-nodes": 1, "--actor-num-gpus-per-node": 1, "--num-gpus-per-node": 1,
                 "--rollout-num-gpus-per-engine": 1, "--sglang-mem-fraction-static": 1,
                 "--colocate": 0}


def _without_cluster_flags(argv: list[str]) -> list[str]:
    out, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
            continue
        if a in CLUSTER_FLAGS:
            skip = CLUSTER_FLAGS[a]
            continue
        out.append(a)
    return out


def _case(name: str, rl: RLSetup, placement: str, base: dict) -> dict:
    args = miles_mode_args(rl, placement=placement, train_nodes=2, gpus_per_node=8,
                           rollout_gpus=16, engine_gpus=8, mem_fraction=0.819)
    entry, flags = args[0], args[1:]
    assert entry == ("train.py" if rl.mode == "on-policy" else "train_async.py")
    assert (MILES_DIR / entry).is_file()
    return {"name": name, "train_args": _without_cluster_flags(base["train_args"]) + flags}


def test_each_mode_parses_with_miles_own_parser(upstream):  # noqa: F811
    base = example_case("default")
    cases = [_case(name, rl, placement, base) for name, (rl, placement) in MODES.items()]
    cases.append({"name": "broken", "train_args": cases[-1]["train_args"]
                  + ["--max-weight-staleness", "two"]})
    results = {r["name"]: r for r in parse_offline(cases)["results"]}
    for name in MODES:
        assert results[name]["error"] is None, f"{name}: {results[name]['error']}"
    assert results["broken"]["error"] == ("argument --max-weight-staleness: invalid int value: "
                                          "'two'")


@pytest.mark.parametrize("name", [n for n in MODES if n.startswith(("batch", "stream"))])
def test_async_modes_avoid_what_miles_refuses_at_run_time(upstream, name):  # noqa: F811
    rl, placement = MODES[name]
    args = miles_mode_args(rl, placement=placement, train_nodes=2, gpus_per_node=8,
                           rollout_gpus=16, engine_gpus=8, mem_fraction=0.819)
    text = (MILES_DIR / "miles" / "utils" / "arguments.py").read_text()
    entry = (MILES_DIR / "train_async.py").read_text()
    assert 'assert not args.colocate, "Colocation is not supported for async training."' in entry
    assert "--colocate" not in args
    if "--fully-async" in args:
        for refused in ('assert not args.colocate, "--fully-async cannot colocate',
                        'assert not args.partial_rollout, "--fully-async does not support '
                        '--partial-rollout"',
                        'assert args.pause_generation_mode != "abort"'):
            assert refused in text
        assert "--partial-rollout" not in args
        assert args[args.index("--pause-generation-mode") + 1] != "abort"

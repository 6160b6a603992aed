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

The same process parses what the kit really launches for each mode: the default example with
``training.rollout`` set to a disaggregated or asynchronous mode, rendered (manifests), read by
the trainer's run-config contract and turned into the launcher's command (rltrainer.miles), whose
entry point must be the script Miles runs that mode with.
"""

from __future__ import annotations

import pytest

import sys

import yaml

from infra.config import parse_config
from infra.planner.request import RLSetup
from infra.planner.rl_modes import miles_mode_args
from manifests.context import build_context
from manifests.outputs import placeholder_outputs
from rltrainer.contract import parse_run_config
from rltrainer.miles import build_train_command, resolve_model_args
from tests.support.miles_parser import MILES_DIR, example_case, parse_offline
from tests.support import REPO_ROOT

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


# training.rollout of the default example (2 x p5) per mode, and what the launcher must run
RENDERED = {
    "rendered disaggregated": ({"placement": "disaggregated", "nodes": 1}, "train.py"),
    "rendered batch 2-off": ({"placement": "disaggregated", "nodes": 1, "overlap": "batch",
                              "off_policy_steps": 2}, "train_async.py"),
    "rendered stream 3-off": ({"placement": "disaggregated", "nodes": 1, "overlap": "stream",
                               "off_policy_steps": 3}, "train_async.py"),
}


def rendered_run(rollout: dict):
    """The trainer's run config for the default example with ``rollout`` as its
    training.rollout, through the kit's validation, render and the trainer's contract."""
    data = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    data.setdefault("training", {})["rollout"] = rollout
    kit = parse_config(data, "default + rollout mode")
    return parse_run_config(build_context(kit, placeholder_outputs(kit)).run_config, "run config")


def rendered_command(rollout: dict, model_args: tuple[str, ...]) -> list[str]:
    """The launcher's argv (from the interpreter on) for that run config."""
    run = rendered_run(rollout)
    return build_train_command(run, hf_checkpoint="/fsx/models/hf",
                               prompt_data="/fsx/datasets/p.jsonl", miles_dir=str(MILES_DIR),
                               python=sys.executable, model_args=model_args).argv


def _rendered_case(name: str, rollout: dict, entry: str, model_args: tuple[str, ...]) -> dict:
    argv = rendered_command(rollout, model_args)
    assert argv[1] == f"{MILES_DIR}/{entry}" and (MILES_DIR / entry).is_file(), argv[1]
    return {"name": name, "train_args": argv[2:]}


def test_each_mode_parses_with_miles_own_parser(upstream):  # noqa: F811
    base = example_case("default")
    cases = [_case(name, rl, placement, base) for name, (rl, placement) in MODES.items()]
    model_args, _ = resolve_model_args(rendered_run({}), str(MILES_DIR), sys.executable)
    cases += [_rendered_case(name, rollout, entry, model_args)
              for name, (rollout, entry) in RENDERED.items()]
    stream = cases[-1]["train_args"]
    cases.append({"name": "broken", "train_args": cases[len(MODES) - 1]["train_args"]
                  + ["--max-weight-staleness", "two"]})
    # the rendered stream command with its pool flag misspelt, as a launcher bug would write it
    cases.append({"name": "rendered broken", "train_args": [
        "--rollout-num-gpu" if a == "--rollout-num-gpus" else a for a in stream]})
    results = {r["name"]: r for r in parse_offline(cases)["results"]}
    for name in [*MODES, *RENDERED]:
        assert results[name]["error"] is None, f"{name}: {results[name]['error']}"
    assert results["broken"]["error"] == ("argument --max-weight-staleness: invalid int value: "
                                          "'two'")
    assert results["rendered broken"]["error"].startswith("unrecognized arguments: --rollout-num-gpu")


@pytest.mark.parametrize("name", [n for n in [*MODES, *RENDERED]
                                  if n.startswith(("batch", "stream", "rendered "))])
def test_async_modes_avoid_what_miles_refuses_at_run_time(upstream, name):  # noqa: F811
    if name in RENDERED:
        rollout, _ = RENDERED[name]
        args = rendered_command(rollout, ("--num-experts", "128"))[1:]
        args[0] = args[0].rsplit("/", 1)[1]
        # the pool the kit renders is the one Miles allocates after the training GPUs
        # (miles/ray/placement_group.py:105): 1 of the example's 2 nodes
        assert args[args.index("--actor-num-nodes") + 1] == "1"
        assert args[args.index("--rollout-num-gpus") + 1] == "8"
    else:
        rl, placement = MODES[name]
        args = miles_mode_args(rl, placement=placement, train_nodes=2, gpus_per_node=8,
                               rollout_gpus=16, engine_gpus=8, mem_fraction=0.819)
    if args[0] == "train.py":
        # on-policy disaggregated: train.py refuses only --fully-async (train.py:23)
        assert 'assert not args.fully_async' in (MILES_DIR / "train.py").read_text()
        assert "--fully-async" not in args and "--colocate" not in args
        return
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

"""`rlkit plan --rl`: options that a GRPO plan derives itself are refused with the fix."""

from __future__ import annotations

import pytest

from ops.cli import main

BASE = ("plan", "--rl", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge")


@pytest.mark.parametrize("extra,message", [
    (("--seq-len", "8192"), "rlkit plan: error: --seq-len does not apply with --rl: the packed "
                            "sequence comes from --prompt-len and --mean-response-len"),
    (("--global-batch", "64"), "rlkit plan: error: --global-batch does not apply with --rl: the "
                               "batch is --prompts x --samples-per-prompt / --steps-per-rollout"),
    (("--colocate",), "rlkit plan: error: --colocate does not apply with --rl: use --placement "
                      "colocated"),
    (("--engine-gpus", "8"), "rlkit plan: error: --engine-gpus and --engine-ep go together; "
                             "pass both or neither"),
    (("--nodes", "4", "--max-nodes", "2"),
     "rlkit plan: error: --nodes 4 exceeds the quota given by --max-nodes (2)"),
    (("--steps-per-rollout", "3"),
     "rlkit plan: error: invalid RL setup: steps_per_rollout=3 does not divide the 256 samples of "
     "a rollout (prompts x samples_per_prompt); Miles needs rollout_batch_size x "
     "n_samples_per_prompt = global_batch_size x num_steps_per_rollout"),
])
def test_rl_option_errors_are_one_clear_line(capsys, extra, message):
    rc = main([*BASE, *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == message


@pytest.mark.parametrize("extra,message", [
    # a pinned part of the layout is checked on its own, so its own problem is named (the
    # search dropped it silently and blamed --max-nodes / --max-response-len)
    (("--tp", "3"), "requested layout does not divide: tp=3 does not divide the 32 attention "
                    "heads of qwen3-30b-a3b"),
    (("--ep", "7"), "requested layout does not divide: ep=7 does not divide the 128 routed "
                    "experts of qwen3-30b-a3b"),
    (("--pp", "64"), "requested layout does not divide: pp x vpp = 64 pipeline chunks exceed "
                     "the 48 layers of qwen3-30b-a3b"),
    (("--engine-gpus", "8", "--engine-ep", "3"),
     "--engine-ep 3 does not divide --engine-gpus 8: SGLang splits an engine's experts over ep of "
     "its GPUs; use one of 1, 2, 4, 8"),
    (("--engine-gpus", "3", "--engine-ep", "3"),
     "--engine-ep 3 does not divide the 128 routed experts of qwen3-30b-a3b; use an ep that "
     "divides both them and --engine-gpus 3"),
    (("--engine-gpus", "6", "--engine-ep", "2", "--nodes", "1"),
     "--engine-gpus 6 divides none of the GPU counts searched (8 per node, 1 node(s)): engines "
     "tile their GPUs; use a divisor of 8 or a multiple of it"),
    # SGLang 0.5.16 qwen3_moe.py:458-468 asserts at model load that the engine's TP size divides
    # the 32 heads; the engine tiles the 64 GPUs of 8 nodes, so only the heads refuse it
    (("--engine-gpus", "64", "--engine-ep", "64", "--nodes", "8"),
     "--engine-gpus 64 does not fit the 32 attention heads and 4 KV heads of qwen3-30b-a3b: SGLang "
     "splits attention over the engine's GPUs, which must divide the heads, and divide 4 or be a "
     "multiple of it (SGLang 0.5.16 qwen3_moe.py:458-468, mixtral.py:137-147, deepseek_v2.py:1603); "
     "use one of 1, 2, 4, 8, 16, 32"),
    (("--max-nodes", "1", "--placement", "disaggregated"),
     "a disaggregated GRPO step needs at least 2 nodes (one for training, one for rollout), got "
     "--max-nodes 1; plan 2 or more nodes"),
    (("--tp", "8", "--pp", "8", "--nodes", "1"),
     "no GRPO layout for qwen3-30b-a3b fits on 1 node(s) of p5.48xlarge: no training layout "
     "fits (requested layout does not divide: tp x cp x pp = 64 does not divide the 8 GPUs of "
     "1 x p5.48xlarge); plan more nodes (--nodes), or change the pinned --tp 8, --pp 8"),
])
def test_a_pinned_flag_s_problem_names_that_flag(capsys, extra, message):
    rc = main([*BASE, "--max-response-len", "1024", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == f"rlkit plan: error: {message}"


def test_a_pinned_engine_too_small_for_the_weights_names_it(capsys):
    rc = main(["plan", "--rl", "--model", "deepseek-v3", "--instance", "p5en.48xlarge",
               "--max-nodes", "4", "--engine-gpus", "8", "--engine-ep", "8"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == (
        "rlkit plan: error: --engine-gpus 8: an engine of 8 GPU(s) holds 159 GiB of BF16 weights "
        "per GPU, more than 90% of its memory share (125 GiB of p5en.48xlarge's 139.7 usable), so "
        "no KV cache fits; pin more GPUs per engine")


def test_pinned_engine_layout_is_used(capsys):
    import json

    rc = main([*BASE, "--max-nodes", "2", "--engine-gpus", "4", "--engine-ep", "4", "--json",
               "--max-response-len", "4096"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    for c in json.loads(out)["candidates"]:
        assert (c["engine"]["gpus"], c["engine"]["ep"]) == (4, 4)


# --- modes, and defaults from the config (issue #23) -------------------------------------------

def _json(capsys, argv):
    import json

    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_off_policy_steps_plans_a_streaming_disaggregated_step(capsys):
    d = _json(capsys, [*BASE, "--nodes", "3", "--off-policy-steps", "2", "--json",
                       "--max-response-len", "2048"])
    assert d["mode"] == "stream" and d["off_policy_steps"] == 2
    assert {c["placement"] for c in d["candidates"]} == {"disaggregated"}
    assert d["candidates"][0]["time"]["bound"] in ("rollout", "train", "sync")
    args = d["miles_args"]
    assert args[0] == "train_async.py" and "--fully-async" in args
    assert args[args.index("--max-weight-staleness") + 1] == "2"


def test_overlap_alone_is_one_step_batch_overlap(capsys):
    d = _json(capsys, [*BASE, "--nodes", "3", "--overlap", "--json", "--max-response-len", "2048"])
    assert d["mode"] == "batch" and d["off_policy_steps"] == 1
    assert "--update-weights-interval" in d["miles_args"]


def test_table_names_the_bound_phase_and_the_miles_command(capsys):
    rc = main([*BASE, "--nodes", "3", "--off-policy-steps", "1", "--max-response-len", "2048",
               "--top", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "bound" in out and "2-step" not in out and "1-step off-policy, stream overlap" in out
    assert "Miles: train_async.py" in out


def test_async_on_colocated_only_is_refused_with_the_fix(capsys):
    rc = main([*BASE, "--nodes", "2", "--placement", "colocated", "--off-policy-steps", "1"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.strip() == (
        "rlkit plan: error: an overlapped GRPO step (stream, 1 step(s) off-policy) needs rollout "
        "on its own GPUs: Miles refuses --colocate with train_async.py and --fully-async; use "
        "placement disaggregated, or --off-policy-steps 0 without overlap")


def test_plan_alone_takes_everything_from_the_built_in_config(capsys, monkeypatch):
    monkeypatch.delenv("RLKIT_CONFIG", raising=False)
    d = _json(capsys, ["plan", "--json"])
    assert (d["model"], d["instance_type"]) == ("qwen3-30b-a3b", "p5.48xlarge")
    assert d["node_counts_searched"] == [2]


def test_rlkit_config_supplies_the_defaults_and_flags_override(capsys, monkeypatch, tmp_path):
    from tests.support import REPO_ROOT

    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    monkeypatch.setenv("RLKIT_CONFIG", str(cfg))
    d = _json(capsys, ["plan", "--rl", "--json", "--placement", "colocated"])
    assert d["instance_type"] == "p5.48xlarge" and {c["nodes"] for c in d["candidates"]} == {2}
    d = _json(capsys, ["plan", "--rl", "--json", "--instance", "p5en.48xlarge", "--max-nodes",
                       "1", "--prompts", "16", "--max-response-len", "2048"])
    assert d["instance_type"] == "p5en.48xlarge" and d["rl"]["prompts"] == 16


def test_a_config_without_its_node_group_is_one_error(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training:\n  node_group: nope\n")
    rc = main(["plan", "--config", str(cfg)])
    _, err = capsys.readouterr()
    assert rc == 2
    assert "training.node_group = 'nope': no GPU node group has this name" in err
    # a command line that needs nothing from the config does not read it (a training plan
    # takes its global batch from a named config, so it gives --global-batch too)
    rc = main(["plan", "--config", str(cfg), "--model", "qwen3-30b-a3b", "--instance",
               "p5.48xlarge", "--nodes", "1", "--global-batch", "256", "--json", "--top", "1"])
    assert rc == 0, capsys.readouterr().err


RL_SHAPE = ["--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--max-response-len", "2048",
            "--prompts", "16"]


@pytest.mark.parametrize("argv,again_flags", [
    (["--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2"], []),
    (["--rl", "--placement", "colocated", *RL_SHAPE, "--nodes", "2"],
     ["--rl", "--placement", "colocated"]),
    # disaggregated and asynchronous plans: the config holds placement, pool and mode
    # (training.rollout), and the plan of the config alone is the same plan
    (["--rl", "--placement", "disaggregated", *RL_SHAPE, "--nodes", "3"], ["--rl"]),
    (["--rl", *RL_SHAPE, "--max-nodes", "4", "--overlap", "stream", "--off-policy-steps", "2"],
     ["--rl"]),
    (["--rl", *RL_SHAPE, "--nodes", "3", "--overlap", "batch", "--off-policy-steps", "1"],
     ["--rl"]),
])
def test_write_config_then_config_gives_the_same_plan(capsys, tmp_path, argv, again_flags):
    from tests.support import REPO_ROOT

    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    first = _json(capsys, ["plan", *argv, "--json", "--write-config", str(cfg), "--node-group",
                           "p5"])
    again = _json(capsys, ["plan", *again_flags, "--json", "--config", str(cfg)])
    if "--max-nodes" in argv:  # the first plan searched node counts; the config fixes the best one
        first_best, again_best = first["candidates"][0], again["candidates"][0]
        assert again_best == first_best
        assert (again["mode"], again["off_policy_steps"], again["miles_args"]) == (
            first["mode"], first["off_policy_steps"], first["miles_args"])
        return
    # the warnings say what the search left out (here: colocated layouts), not what it chose
    strip = ("search_seconds", "warnings")
    assert {k: v for k, v in again.items() if k not in strip} == \
        {k: v for k, v in first.items() if k not in strip}


def test_rewriting_the_config_itself_defaults_to_its_node_group(capsys, tmp_path):
    from tests.support import REPO_ROOT

    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    rc = main(["plan", "--config", str(cfg), "--write-config", str(cfg), "--json", "--top", "1"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    assert "wrote training." in err


def _rl_training(capsys, *extra: str) -> dict:
    rc = main([*BASE, "--nodes", "2", "--placement", "colocated", "--tp", "2", "--pp", "2",
               *extra, "-o", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    import json
    return json.loads(out)["candidates"][0]["training"]


def test_schedule_and_bf16_moments_shape_the_grpo_training_step(capsys):
    # was: silently ignored with --rl (not passed to plan_rl): the same memory and step time
    base = _rl_training(capsys)
    moments = _rl_training(capsys, "--bf16-moments")
    assert moments["memory_gib"]["optimizer"] == pytest.approx(
        base["memory_gib"]["optimizer"] * 8 / 12, rel=0.01)  # Adam moments 4 -> 2 bytes each
    dualpipe = _rl_training(capsys, "--schedule", "dualpipe")
    assert dualpipe["memory_gib"]["weights"] == pytest.approx(2 * base["memory_gib"]["weights"],
                                                              rel=0.01)  # two weight copies
    assert dualpipe["time"]["step"] != base["time"]["step"]

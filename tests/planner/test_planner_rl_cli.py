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


def test_pinned_engine_layout_is_used(capsys):
    import json

    rc = main([*BASE, "--max-nodes", "2", "--engine-gpus", "4", "--engine-ep", "4", "--json",
               "--max-response-len", "4096"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    for c in json.loads(out)["candidates"]:
        assert (c["engine"]["gpus"], c["engine"]["ep"]) == (4, 4)

"""A written plan fits as the launcher runs it.

`rlkit plan --write-config` writes a layout; the launcher turns the written config into Miles'
command line, where training runs dynamic batching: every micro-batch packs samples up to
``--max-tokens-per-gpu`` x cp tokens over a context-parallel group, whatever the micro-batch size
(radixark/miles@78527b9102b3 miles/backends/training_utils/data.py:490-498). So for each example config
and the built-in default, plan it (training plan and GRPO plan), write it, build the trainer's
run config and Miles' argv from the written file exactly as the launcher does, read the token cap
and the recompute back from that argv, and evaluate the written layout with one micro-batch of
cap x cp tokens (mbs 1; the longest sample alone if it is longer) on the usable GPU memory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.catalog import INSTANCE_TYPES
from infra.config import ConfigError, parse_config, read_config_file, run_config_document
from infra.planner import Layout, TrainingSetup, evaluate, get_model, get_system
from infra.planner.request import COLOCATED_MEM_FRACTION, RLSetup
from ops.cli import main
from rltrainer.contract import parse_run_config
from rltrainer.miles import miles_train_args, recompute_granularity
from tests.support import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))


def _flag(argv: list[str], flag: str) -> str | None:
    """The value argparse ends up with for ``flag`` (its last occurrence), None if absent."""
    found = None
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            found = argv[i + 1]
    return found


def _plan_and_write(capsys, source: Path | None, target: Path, rl: bool, monkeypatch) -> None:
    monkeypatch.delenv("RLKIT_CONFIG", raising=False)
    argv = ["plan", "--write-config", str(target)]
    if source is not None:
        shutil.copy(source, target)
        argv += ["--config", str(target)]
    else:  # the built-in default config, written to a new file
        argv += ["--node-group", parse_config({}).training.node_group]
    if rl:
        argv.append("--rl")
    rc = main(argv)
    _, err = capsys.readouterr()
    assert rc == 0, err


def _as_launched(target: Path):
    """The written config as the launcher runs it: (kit config, run config, Miles argv)."""
    cfg = parse_config(read_config_file(target), str(target))
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    run = parse_run_config(run_config_document(cfg, itype, bucket="my-bucket",
                                               prompt_data="/fsx/datasets/x.jsonl"))
    argv = miles_train_args(run, hf_checkpoint="/m", prompt_data="/d.jsonl")
    return cfg, itype, run, argv


@pytest.mark.parametrize("rl", [False, True], ids=["training-plan", "rl-plan"])
@pytest.mark.parametrize("source", [None, *EXAMPLES],
                         ids=["built-in-default", *(p.stem for p in EXAMPLES)])
def test_written_plan_fits_as_the_launcher_runs_it(capsys, tmp_path, monkeypatch, source, rl):
    target = tmp_path / "env.yaml"
    _plan_and_write(capsys, source, target, rl, monkeypatch)
    cfg, itype, run, argv = _as_launched(target)
    t, ro = run.parallel.training, run.parallel.rollout
    assert "--use-dynamic-batch-size" in argv
    cap = int(_flag(argv, "--max-tokens-per-gpu"))
    recompute = recompute_granularity(argv) or "none"
    world = run.parallel.training_nodes * run.parallel.gpus_per_node
    layout = Layout(tp=t.tp, pp=t.pp, cp=t.cp, ep=t.ep, etp=t.etp,
                    dp=world // (t.tp * t.pp * t.cp), mbs=1, recompute=recompute)
    longest = RLSetup.prompt_len + run.grpo.rollout_max_response_len
    colocated = ro.placement == "colocated"
    setup = TrainingSetup(seq_len=max(cap * t.cp, longest), global_batch=run.grpo.global_batch_size,
                          colocate_rollout=colocated, rollout_offload=True,
                          rollout_mem_fraction=COLOCATED_MEM_FRACTION if colocated else 0.0)
    got = evaluate(cfg.training.model, itype.name, run.parallel.training_nodes, layout, setup,
                   ep_backend=run.expert_parallel.backend)
    mem = got.memory
    assert mem.fits, (
        f"{source.name if source else 'default'}: {layout.label()} recompute {recompute} needs "
        f"{mem.peak:.1f} GiB per GPU with micro-batches of {cap} x cp {t.cp} tokens, "
        f"{itype.name} has {mem.capacity:.1f} usable")


def test_a_planned_token_cap_reaches_the_launcher(capsys, tmp_path, monkeypatch):
    """--max-tokens-per-gpu plans with another cap, writes it, and the launcher passes it."""
    target = tmp_path / "env.yaml"
    shutil.copy(REPO_ROOT / "examples" / "p5-2node.yaml", target)
    monkeypatch.delenv("RLKIT_CONFIG", raising=False)
    rc = main(["plan", "--config", str(target), "--write-config", str(target),
               "--max-tokens-per-gpu", "9216"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    cfg, _, run, argv = _as_launched(target)
    assert cfg.training.parallel.max_tokens_per_gpu == run.parallel.training.max_tokens_per_gpu
    assert _flag(argv, "--max-tokens-per-gpu") == "9216"
    # a default cap is left out of run.yaml (a default config renders the run.yaml it always did)
    default = parse_config({})
    itype = INSTANCE_TYPES[default.gpu_node_groups[default.training.node_group].instance_type]
    doc = run_config_document(default, itype, bucket="my-bucket", prompt_data="/d.jsonl")
    assert "max_tokens_per_gpu" not in doc["parallel"]["training"]
    with pytest.raises(ConfigError, match=r"training\.parallel\.max_tokens_per_gpu = 0: .*>= 1"):
        parse_config({"training": {"parallel": {"max_tokens_per_gpu": 0}}})


def test_step_time_counts_the_launcher_s_token_capped_micro_batches():
    # was: under dynamic batching the step time still ran gbs / (dp x mbs) micro-batches of mbs
    # sequences (320 of one 4,096-token sequence here), though the launcher packs 5 sequences
    # into each 20,480-token micro-batch: 64 micro-batches, as a fixed micro-batch of 5 runs
    from infra.planner import step_time
    from infra.planner.memory import micro_batch_tokens

    def run(layout, **setup):
        s = TrainingSetup(seq_len=4096, global_batch=320, **setup)
        m = get_model("qwen3-235b-a22b")
        return step_time(m, get_system("p5en.48xlarge"), layout, s, "nccl"), s

    capped, s = run(Layout(tp=8, pp=8, ep=8, dp=1), max_tokens_per_gpu=20480)
    fixed, _ = run(Layout(tp=8, pp=8, ep=8, dp=1, mbs=5))
    assert capped.micro_batches == fixed.micro_batches == 64
    assert capped.step == pytest.approx(fixed.step)
    assert capped.pp_bubble == pytest.approx(fixed.pp_bubble)
    assert micro_batch_tokens(Layout(tp=8, pp=8, ep=8, dp=1), s) == 20480  # what memory sizes


def test_a_token_capped_plan_shows_no_micro_batch_size_and_refuses_one(capsys):
    # was: the search ranked MBS1 against MBS2 (the launcher ignores it under dynamic batching,
    # and memory no longer told them apart), printed "MBS2", and took --mbs 2 as a pin
    from infra.planner import PlanRequest, plan

    result = plan(PlanRequest("qwen3-30b-a3b", "p5.48xlarge", nodes=2, top=10**9,
                              setup=TrainingSetup(max_tokens_per_gpu=20480)))
    assert all(c.layout.token_capped and c.layout.mbs == 1 for c in result.candidates)
    assert not any("MBS" in c.layout.label() for c in result.candidates)
    rc = main(["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "MBS" not in out
    assert "micro-batches packed up to 20,480 tokens per GPU (dynamic batching)" in out
    for rl in ((), ("--rl",)):
        rc = main(["plan", *rl, "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge",
                   "--nodes", "2", "--mbs", "2"])
        _, err = capsys.readouterr()
        assert rc == 2
        assert ("--mbs 2: the kit's launcher runs Miles' dynamic batching, which packs each "
                "micro-batch up to --max-tokens-per-gpu (20480) tokens per GPU and ignores the "
                "micro-batch size") in err

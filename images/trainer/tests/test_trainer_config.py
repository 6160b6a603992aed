"""Run-config validation: every problem at once, each with path, value, rule and fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from trainer_helpers import FIXTURES
from rltrainer.contract import ConfigError, load_run_config, parse_run_config, pipeline_split

QWEN = FIXTURES / "qwen3-30b-a3b.yaml"


def base() -> dict:
    return yaml.safe_load(QWEN.read_text())


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_run_config(data, "run.yaml")
    return [str(p) for p in exc.value.problems]


def test_fixture_is_valid_and_fills_defaults():
    cfg = load_run_config(QWEN)
    assert cfg.run_name == "qwen3-30b-a3b-grpo"
    assert cfg.parallel.world_size == 16
    assert cfg.parallel.data_parallel_size == 4
    assert cfg.model.megatron_flag_value("--num-experts") == "128"
    assert cfg.expert_parallel.backend == "nccl"

    minimal = base()
    del minimal["checkpoint"]["local_dir"], minimal["checkpoint"]["save_interval"]
    del minimal["data"]["input_key"], minimal["data"]["label_key"]
    del minimal["model"]["megatron_args"], minimal["expert_parallel"]
    for key in ("num_steps_per_rollout", "rollout_max_response_len", "rollout_temperature", "lr", "kl_loss_coef", "eps_clip"):
        del minimal["grpo"][key]
    cfg = parse_run_config(minimal)
    assert (cfg.checkpoint.local_dir, cfg.checkpoint.save_interval) == ("/checkpoints", 20)
    assert cfg.checkpoint.keep_local == 1  # the newest finished save; the kit sizes its file system from it
    assert cfg.checkpoint.keep_s3 == 0  # every save stays in S3 unless the user bounds it
    assert (cfg.data.input_key, cfg.data.label_key) == ("prompt", "label")
    assert cfg.model.megatron_args == ()
    assert cfg.expert_parallel.backend == "nccl"
    assert (cfg.grpo.num_steps_per_rollout, cfg.grpo.lr, cfg.grpo.eps_clip) == (1, 1e-6, 0.2)


def test_batch_invariant_violation_explains_the_numbers():
    data = base()
    data["grpo"]["global_batch_size"] = 128
    assert problems_of(data) == [
        "grpo.global_batch_size = 128: Miles needs rollout_batch_size x n_samples_per_prompt = "
        "global_batch_size x num_steps_per_rollout, but 32 x 8 = 256 and 128 x 1 = 128. "
        "Fix: set grpo.global_batch_size to 256 (32 x 8 / 1), or change rollout_batch_size, "
        "n_samples_per_prompt or num_steps_per_rollout so the two products match."
    ]


def test_batch_invariant_holds_with_several_steps_per_rollout():
    data = base()
    data["grpo"]["global_batch_size"] = 128
    data["grpo"]["num_steps_per_rollout"] = 2
    assert parse_run_config(data).grpo.global_batch_size == 128


def test_batch_invariant_with_steps_that_do_not_divide():
    data = base()
    data["grpo"]["num_steps_per_rollout"] = 3
    assert problems_of(data) == [
        "grpo.global_batch_size = 256: Miles needs rollout_batch_size x n_samples_per_prompt = "
        "global_batch_size x num_steps_per_rollout, but 32 x 8 = 256 and 256 x 3 = 768. "
        "Fix: pick a num_steps_per_rollout that divides 256 (e.g. 1) and set global_batch_size = 256 / num_steps_per_rollout."
    ]


def test_megatron_layout_rules():
    data = base()
    data["parallel"]["training"] = {"tp": 3, "pp": 1, "cp": 1, "ep": 32, "etp": 1}
    assert problems_of(data) == [
        'parallel.training = {"tp": 3, "pp": 1, "cp": 1}: Megatron needs tp x pp x cp to divide the GPU count '
        "(nodes x gpus_per_node = 16), but 3 x 1 x 1 = 3. Fix: choose tp, pp and cp whose product divides 16.",
        "parallel.training.ep = 32: Megatron needs etp x ep x pp to divide the GPU count (16), i.e. ep x etp must "
        "divide data-parallel x context-parallel x tp = 16, but 1 x 32 x 1 = 32. "
        "Fix: use an ep that divides 16 (one of 1, 2, 4, 8, 16).",
    ]


def test_expert_count_must_split_over_ep():
    data = base()
    data["parallel"]["training"]["ep"] = 16
    data["parallel"]["training"]["tp"] = 1
    margs = data["model"]["megatron_args"]
    margs[margs.index("--num-experts") + 1] = "120"
    assert problems_of(data) == [
        "parallel.training.ep = 16: Megatron places num_experts / ep experts on each rank, and model.megatron_args "
        "sets --num-experts 120, which 16 does not divide. Fix: choose an ep that divides 120."
    ]


def megatron_accepts(layers: int, pp: int, first: int, middle: int, last: int) -> bool:
    """Megatron-LM 37f9161's checks of --decoder-first/last-pipeline-num-layers, vpp 1
    (megatron/core/transformer/transformer_config.py:1462-1521): both ends hold at least one
    layer, and the middle stages split the rest evenly, holding some iff there are some."""
    rest, stages = layers - first - last, pp - 2
    if first <= 0 or last <= 0 or bool(rest) != bool(stages):
        return False
    return not stages or (rest % stages == 0 and rest // stages == middle)


def test_the_pipeline_split_rule():
    # DeepSeek-V3 / Kimi K2 (61 layers): the middle stages hold ceil(61 / pp), the ends the
    # remainder, the first the odd layer of it (the last also holds the output layer and loss)
    assert pipeline_split(61, 8).stages == (7, 8, 8, 8, 8, 8, 8, 6)
    assert pipeline_split(61, 8).megatron_args() == [
        "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "6"]
    assert pipeline_split(61, 16).stages == (3, *[4] * 14, 2)
    assert pipeline_split(61, 2).stages == (31, 30)
    assert pipeline_split(94, 8).stages == (11, *[12] * 6, 11)
    # Megatron's middle stages are equal, so a pp close to the layer count can leave more on the
    # ends than ceil(layers / pp): 48 over 14 is 6 + 12 x 3 + 6 (fullest 6, not 4)
    assert (pipeline_split(48, 14).stages, pipeline_split(48, 14).fullest) == ((6, *[3] * 12, 6), 6)
    # an even split needs no flags; a single stage holds everything
    assert pipeline_split(48, 8).stages == (6,) * 8 and pipeline_split(48, 8).megatron_args() == []
    assert pipeline_split(48, 1).stages == (48,) and pipeline_split(48, 1).megatron_args() == []
    # every stage holds at least one layer: no split of 4 layers over 8 stages
    assert pipeline_split(4, 8) is None and pipeline_split(4, 4).stages == (1, 1, 1, 1)
    for layers in range(1, 97):
        for pp in range(2, layers + 1):
            s = pipeline_split(layers, pp)
            assert sum(s.stages) == layers and len(s.stages) == pp and min(s.stages) >= 1, (layers, pp)
            assert s.even == (layers % pp == 0) and (s.megatron_args() == []) == s.even
            if not s.even:
                assert megatron_accepts(layers, pp, s.first, s.middle, s.last), (layers, pp, s)
            # no split Megatron accepts (each end >= 1, equal middle stages >= 1) has a less loaded
            # fullest stage
            middles = range(1, (layers - 2) // (pp - 2) + 1) if pp > 2 else [0]
            best = min(max(f, m, ends - f) for m in middles for ends in [layers - m * (pp - 2)]
                       for f in range(1, ends))
            assert s.fullest == best, (layers, pp, s)


def test_pipeline_size_needs_a_split_megatron_accepts():
    # the fixture's model has 48 layers on 16 GPUs
    data = base()
    data["parallel"]["training"].update(tp=1, pp=16, ep=1)
    parse_run_config(copy.deepcopy(data))  # 16 divides 48
    margs = data["model"]["megatron_args"]
    margs[margs.index("--num-layers") + 1] = "47"
    # uneven: the launcher passes --decoder-first/last-pipeline-num-layers 2 / 3... (pipeline_split)
    parse_run_config(copy.deepcopy(data))
    # more stages than layers: no stage may be empty (Megatron-LM 37f9161 transformer_config.py:1471-1472,
    # 1490-1491, 1508-1521)
    margs[margs.index("--num-layers") + 1] = "12"
    assert problems_of(copy.deepcopy(data)) == [
        "parallel.training.pp = 16: every pipeline stage must hold at least one layer (Megatron), and "
        "model.megatron_args sets --num-layers 12, fewer than 16 stages. Fix: use a pp of at most 12."
    ]
    # Megatron takes no uneven split with --account-for-*-in-pipeline-split (transformer_config.py:1397-1407),
    # which count one more layer each (arguments.py:629-633): 47 + 1 divides, 46 + 1 does not
    margs[margs.index("--num-layers") + 1] = "47"
    parse_run_config({**data, "model": {**data["model"], "megatron_args": [
        *margs, "--account-for-loss-in-pipeline-split"]}})
    margs[margs.index("--num-layers") + 1] = "46"
    assert problems_of({**data, "model": {**data["model"], "megatron_args": [
        *margs, "--account-for-loss-in-pipeline-split"]}}) == [
        "parallel.training.pp = 16: Megatron splits the layers evenly over the pipeline stages when the model "
        "arguments count the embedding or loss as a layer (--account-for-embedding/loss-in-pipeline-split: it "
        "takes no --decoder-first/last-pipeline-num-layers with them), and model.megatron_args sets "
        "--num-layers 46 (+1 for --account-for-*-in-pipeline-split: 47), which 16 does not divide. Fix: use a "
        "pp that divides 47 (one of 1, 47), or drop --account-for-*-in-pipeline-split so the launcher can "
        "split unevenly."
    ]
    # an explicit split in the model arguments is Megatron's to check
    margs[margs.index("--num-layers") + 1] = "12"
    parse_run_config({**data, "model": {**data["model"], "megatron_args": [
        *margs, "--decoder-last-pipeline-num-layers", "2"]}})


def test_global_batch_must_split_over_data_parallel_ranks():
    data = base()
    data["parallel"]["training"]["tp"] = 1  # dp = 16
    data["grpo"].update(rollout_batch_size=3, n_samples_per_prompt=8, global_batch_size=24)
    assert problems_of(data) == [
        "grpo.global_batch_size = 24: Megatron needs global_batch_size to be a multiple of the data-parallel size 16 "
        "(16 GPUs / (tp 1 x pp 1 x cp 1)). Fix: use a multiple of 16, e.g. 32, and keep the Miles batch invariant."
    ]


def test_rollout_layout_rules():
    data = base()
    data["parallel"]["rollout"] = {"gpus_per_engine": 6, "ep": 4}
    problems = problems_of(data)
    # and 6 does not divide the 32 attention heads (test_engine_size_must_fit_the_attention_heads)
    assert problems[2].startswith("parallel.rollout.gpus_per_engine = 6: SGLang splits the attention heads")
    assert problems[:2] == [
        "parallel.rollout.gpus_per_engine = 6: rollout is colocated with training on all 16 GPUs and each SGLang "
        "engine takes gpus_per_engine of them, so gpus_per_engine must divide 16. Fix: use a divisor of 16, e.g. 8.",
        "parallel.rollout.ep = 4: SGLang splits each engine's experts over ep of its 6 GPUs, so ep must divide "
        "gpus_per_engine. Fix: use a divisor of 6, e.g. 6.",
    ]


def test_engine_size_must_fit_the_attention_heads():
    """SGLang 0.5.16 qwen3_moe.py:458-468 asserts at model load that the engine's attention TP
    (gpus_per_engine: the launcher enables no dp-attention) divides the 32 heads; the run config
    must be refused before the GPUs start."""
    data = base()
    data["parallel"]["nodes"] = 8
    data["parallel"]["rollout"] = {"gpus_per_engine": 64, "ep": 64}
    assert problems_of(data) == [
        "parallel.rollout.gpus_per_engine = 64: SGLang splits the attention heads over the engine's "
        "tensor-parallel GPUs: tp must divide the 32 attention heads and its 4 KV heads must split evenly over "
        "them or be replicated evenly (tp divides 4, or 4 divides tp) (SGLang 0.5.16 qwen3_moe.py:458-468, "
        "mixtral.py:137-147, deepseek_v2.py:1603); model.megatron_args sets --num-attention-heads 32 and "
        "--num-query-groups 4, which an engine of 64 GPUs does not fit. "
        "Fix: use gpus_per_engine 1, 2, 4, 8, 16, 32 (and a divisor of it as ep)."
    ]


def test_engine_size_must_fit_the_kv_heads_under_group_query_attention():
    data = base()
    margs = data["model"]["megatron_args"]
    margs[margs.index("--num-attention-heads") + 1] = "48"
    margs[margs.index("--num-query-groups") + 1] = "12"
    problems = problems_of(data)  # 8 divides the 48 heads, but neither 12 nor 8 divides the other
    assert len(problems) == 1 and problems[0].startswith("parallel.rollout.gpus_per_engine = 8: ")
    assert problems[0].endswith("Fix: use gpus_per_engine 1, 2, 3, 4, 6, 12, 24, 48 (and a divisor of it as ep).")
    margs.remove("--group-query-attention")  # Megatron ignores --num-query-groups without it
    parse_run_config(data, "run.yaml")


def test_deepep_needs_rollout_ep_equal_to_engine_size():
    data = base()
    data["expert_parallel"]["backend"] = "deepep-nvshmem"
    data["parallel"]["rollout"]["ep"] = 4
    assert problems_of(data) == [
        "parallel.rollout.ep = 4: with expert_parallel.backend deepep-nvshmem, SGLang's DeepEP path forces the "
        "expert-parallel size to the engine size (8). Fix: set parallel.rollout.ep to 8."
    ]


def test_deepep_gin_is_refused_for_training_with_the_reason_and_the_fix():
    data = base()
    data["expert_parallel"]["backend"] = "deepep-gin"
    assert problems_of(data) == [
        'expert_parallel.backend = "deepep-gin": DeepEP V2 over NCCL GIN cannot train yet: the Megatron-LM that '
        "Miles v0.1.0 pins (37f9161) drives DeepEP V1's Buffer in its flex dispatcher "
        "(megatron/core/transformer/moe/fused_a2a.py) and does not support V2's ElasticBuffer. "
        "Fix: use `deepep-nvshmem` (DeepEP V1 over NVSHMEM/libfabric) or `nccl`; the fabric gate may still "
        "benchmark deepep-gin."
    ]


def test_deepep_needs_expert_parallelism_in_training():
    data = base()
    data["expert_parallel"]["backend"] = "deepep-nvshmem"
    data["parallel"]["training"]["ep"] = 1
    assert problems_of(data) == [
        "parallel.training.ep = 1: Megatron's flex dispatcher (DeepEP) needs expert-TP x EP > 1, but etp 1 x ep 1 = 1. "
        "Fix: raise parallel.training.ep, or use expert_parallel.backend nccl for a model without expert parallelism."
    ]


def test_every_problem_is_reported_at_once_in_order():
    data = base()
    data["run_name"] = "Qwen3_30B"
    data["model"]["hf_checkpoint"] = "models/Qwen3-30B-A3B"
    data["model"]["megatron_args"].append("--tensor-model-parallel-size=2")
    data["checkpoint"]["s3_uri"] = "my-bucket/checkpoints"
    data["checkpoint"]["save_intervall"] = 10
    del data["data"]["prompt_data"]
    data["grpo"]["lr"] = "fast"
    data["grpo"]["eps_clip"] = 1.5
    data["parallel"]["nodes"] = 0
    data["expert_parallel"]["backend"] = "deepep"
    data["extra"] = True
    with pytest.raises(ConfigError) as exc:
        parse_run_config(data, "/etc/rltrainer/run.yaml")
    assert str(exc.value) == "\n".join([
        "/etc/rltrainer/run.yaml: 11 problems:",
        "  - extra = true: unknown key (allowed here: run_name, model, checkpoint, data, grpo, parallel, "
        "expert_parallel). Fix: remove it.",
        '  - run_name = "Qwen3_30B": must be a DNS label (lowercase letters, digits and \'-\', starting and ending '
        "with a letter or digit, at most 63 characters). Fix: use e.g. `qwen3-30b-a3b-grpo`.",
        '  - model.hf_checkpoint = "models/Qwen3-30B-A3B": must be an absolute local path or an s3:// URI '
        "(Hugging Face weights). Fix: use e.g. /models/Qwen3-30B-A3B or s3://my-bucket/models/Qwen3-30B-A3B/.",
        '  - model.megatron_args[49] = "--tensor-model-parallel-size=2": the launcher sets '
        "--tensor-model-parallel-size from parallel.training.tp. Fix: remove it from megatron_args and set "
        "parallel.training.tp instead.",
        "  - checkpoint.save_intervall = 10: unknown key (allowed here: s3_uri, local_dir, save_interval, keep_local, keep_s3). "
        "Fix: remove it or rename it to `save_interval`.",
        '  - checkpoint.s3_uri = "my-bucket/checkpoints": must be an s3:// URI with a bucket and a prefix. '
        "Fix: use e.g. s3://my-bucket/checkpoints/qwen3-30b-a3b-grpo/.",
        "  - data.prompt_data = (missing): required. Fix: add `prompt_data: s3://my-bucket/datasets/dapo-math-17k.jsonl` "
        "under `data`.",
        '  - grpo.lr = "fast": must be a finite number. Fix: write a number, e.g. `lr: 1e-06`.',
        "  - grpo.eps_clip = 1.5: must be < 1. Fix: use a value below 1.",
        "  - parallel.nodes = 0: must be >= 1. Fix: use a value of at least 1.",
        '  - expert_parallel.backend = "deepep": must be one of nccl, deepep-nvshmem, deepep-gin. '
        "Fix: use `deepep-gin`.",
    ])


def test_wrong_types_and_missing_sections():
    assert problems_of({"run_name": "x"}) == [
        "model = (missing): this section is required. Fix: add a `model:` mapping with keys name, hf_checkpoint, "
        "megatron_args.",
        "checkpoint = (missing): this section is required. Fix: add a `checkpoint:` mapping with keys s3_uri, "
        "local_dir, save_interval, keep_local, keep_s3.",
        "data = (missing): this section is required. Fix: add a `data:` mapping with keys prompt_data, input_key, "
        "label_key, rm_type.",
        "grpo = (missing): this section is required. Fix: add a `grpo:` mapping with keys num_rollout, "
        "rollout_batch_size, n_samples_per_prompt, global_batch_size, num_steps_per_rollout, rollout_max_response_len, "
        "rollout_temperature, lr, kl_loss_coef, eps_clip.",
        "parallel = (missing): this section is required. Fix: add a `parallel:` mapping with keys nodes, gpus_per_node, "
        "training, rollout.",
    ]
    data = base()
    data["grpo"]["num_rollout"] = True
    data["parallel"]["training"] = [4, 1]
    assert problems_of(data) == [
        "grpo.num_rollout = true: must be an integer. Fix: write a whole number >= 1, e.g. `num_rollout: 1`.",
        "parallel.training = [4, 1]: must be a mapping. Fix: write `parallel.training:` as a mapping with keys "
        "tp, pp, cp, ep, etp, optimizer_cpu_offload, recompute, max_tokens_per_gpu.",
    ]


def test_file_errors(tmp_path: Path):
    with pytest.raises(ConfigError) as exc:
        load_run_config(tmp_path / "nope.yaml")
    assert str(exc.value) == (
        f"{tmp_path / 'nope.yaml'}: 1 problem:\n"
        f"  - (file) = \"{tmp_path / 'nope.yaml'}\": the run config file does not exist. "
        "Fix: mount the run ConfigMap at this path or pass --config with the right path."
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: [unclosed\n")
    with pytest.raises(ConfigError) as exc:
        load_run_config(bad)
    assert "(document) = \"line 2, column 1\": is not valid YAML" in str(exc.value)


def test_unreadable_files_and_repeated_keys_are_one_clear_error(tmp_path: Path):
    def error(path: Path) -> str:
        with pytest.raises(ConfigError) as exc:
            load_run_config(path)
        return str(exc.value).split("\n", 1)[1]

    (tmp_path / "dir").mkdir()
    assert error(tmp_path / "dir") == (
        f"  - (file) = \"{tmp_path / 'dir'}\": is a directory, not a run config file. Fix: pass "
        "--config with the path of the run.yaml file itself.")
    utf16 = tmp_path / "utf16.yaml"  # what PowerShell's `>` writes
    utf16.write_bytes("run_name: a\n".encode("utf-16"))
    assert error(utf16) == (f"  - (file) = \"{utf16}\": is not UTF-8 text (invalid start byte at "
                            "byte 0). Fix: save the run config as UTF-8.")
    twice = tmp_path / "twice.yaml"
    twice.write_text(QWEN.read_text() + "run_name: other\n")
    assert error(twice).startswith("  - (document) = \"line ")
    assert error(twice).endswith(": gives key 'run_name' twice (only one value can count). Fix: "
                                 "keep one of them.")
    huge = tmp_path / "huge.yaml"
    huge.write_text("run_name: " + "9" * 5000 + "\n")
    assert "holds a value that cannot be read (Exceeds the limit" in error(huge)


def test_exponent_numbers_read_as_numbers(tmp_path: Path):
    """PyYAML (YAML 1.1) reads `1e-6` as text: `lr: 1e-6` was refused with a fix, `lr: 1e-06`,
    that failed the same way. Both are numbers now; quoted text stays text."""
    data = yaml.safe_load(QWEN.read_text())
    data["grpo"]["lr"] = "LR"
    text = yaml.safe_dump(data)
    path = tmp_path / "run.yaml"
    for written in ("1e-6", "1e-06", "2E+0", ".5e-5"):
        path.write_text(text.replace("lr: LR", f"lr: {written}"))
        assert load_run_config(path).grpo.lr == float(written)
    path.write_text(text.replace("lr: LR", "lr: '1e-6'"))
    with pytest.raises(ConfigError, match="grpo.lr = \"1e-6\": must be a finite number"):
        load_run_config(path)
    assert yaml.safe_load("a: 1e-6") == {"a": "1e-6"}  # the process's own safe_load is untouched


@pytest.mark.parametrize("text", ["1e-6", "1E5", "2e+0", ".5e-5", "1e6", "-3e2"])
def test_text_that_reads_as_an_exponent_number_is_dumped_quoted(tmp_path: Path, text):
    """The loader reads 1e-6 as a number; yaml.safe_dump writes the string "1e-6" plain, so a run
    name or any other text shaped like one came back as a number. RunConfigDumper shares the
    loader's resolvers and quotes it; numbers stay numbers."""
    from rltrainer.contract import RunConfigDumper

    data = yaml.safe_load(QWEN.read_text())
    data["run_name"] = "1e-6"  # a DNS label, as the kit's run names are
    data["data"]["input_key"] = text  # any text field
    data["grpo"]["lr"] = 1e-6
    path = tmp_path / "run.yaml"
    path.write_text(yaml.dump(data, Dumper=RunConfigDumper, sort_keys=False))
    cfg = load_run_config(path)
    assert (cfg.run_name, cfg.data.input_key, cfg.grpo.lr) == ("1e-6", text, 1e-6)
    assert yaml.safe_dump("1e-6") == "1e-6\n...\n"  # the process's own SafeDumper is untouched


def test_numbers_in_megatron_args_are_accepted_as_strings():
    data = base()
    data["model"]["megatron_args"] = ["--num-layers", 48, "--norm-epsilon", 1e-6]
    cfg = parse_run_config(copy.deepcopy(data))
    assert cfg.model.megatron_args == ("--num-layers", "48", "--norm-epsilon", "1e-06")


def test_divisors_in_fix_texts_stay_fast_for_huge_gpu_counts():
    from rltrainer.contract.rules import _divisors
    assert _divisors(12) == [1, 2, 3, 4, 6, 12]
    assert _divisors(8 * 10**9)[:4] == [1, 2, 4, 5]
    assert _divisors(10**18 + 3)[:1] == [1]  # bounded scan: returns at once


def test_keep_local_is_a_whole_number_of_at_least_one():
    """Retention never deletes the newest finished save, so keeping none is refused."""
    data = base()
    data["checkpoint"]["keep_local"] = 3
    assert parse_run_config(data).checkpoint.keep_local == 3
    for bad, rule in ((0, "must be >= 1. Fix: use a value of at least 1."),
                      ("two", "must be an integer. Fix: write a whole number >= 1, e.g. `keep_local: 1`.")):
        data["checkpoint"]["keep_local"] = bad
        with pytest.raises(ConfigError) as exc:
            parse_run_config(data)
        assert [str(p) for p in exc.value.problems] == [f"checkpoint.keep_local = {json.dumps(bad)}: {rule}"]


def _pool(**rollout) -> dict:
    data = base()  # 2 nodes x 8 GPUs
    data["parallel"]["rollout"].update(rollout)
    return data


def test_rollout_pool_and_overlap_rules():
    assert problems_of(_pool(placement="colocated", nodes=1, overlap="stream", off_policy_steps=0)) == [
        "parallel.rollout.nodes = 1: a colocated rollout runs on the training GPUs and has no pool of its own. "
        "Fix: remove parallel.rollout.nodes (or set it to 0), or set parallel.rollout.placement: disaggregated.",
        "parallel.rollout.overlap = \"stream\": an overlapped rollout runs Miles' train_async.py, which refuses "
        "--colocate (train_async.py:23; --fully-async too: miles/utils/arguments.py:59). Fix: set "
        "parallel.rollout.placement: disaggregated with parallel.rollout.nodes, or overlap: none.",
        "parallel.rollout.off_policy_steps = 0: overlap stream runs generation at least one step ahead. Fix: set "
        "off_policy_steps to 1 or more (Miles --update-weights-interval / --max-weight-staleness).",
    ]
    assert problems_of(_pool(placement="disaggregated", nodes=2)) == [
        "parallel.rollout.nodes = 2: the rollout pool is part of the run's 2 node(s) (parallel.nodes), and at "
        "least one must train. Fix: use 1, or raise parallel.nodes.",
    ]
    assert problems_of(_pool(placement="apart", overlap="none", off_policy_steps=1)) == [
        "parallel.rollout.placement = \"apart\": must be one of colocated, disaggregated. Fix: use `colocated`.",
    ]


def test_a_disaggregated_pool_leaves_megatron_the_other_nodes():
    # 1 training node of 8 GPUs: tp 4 x ep 8 still fits, the engines divide the pool's 8 GPUs
    cfg = parse_run_config(_pool(placement="disaggregated", nodes=1, overlap="batch", off_policy_steps=2))
    assert (cfg.parallel.training_nodes, cfg.parallel.world_size, cfg.parallel.rollout.entry_point) == (
        1, 8, "train_async.py")
    assert problems_of(_pool(placement="disaggregated", nodes=1, gpus_per_engine=16, ep=16)) == [
        "parallel.rollout.gpus_per_engine = 16: rollout has its own 8 GPUs (parallel.rollout.nodes 1 x 8) and each "
        "SGLang engine takes gpus_per_engine of them, so gpus_per_engine must divide 8. Fix: use a divisor of 8, "
        "e.g. 8.",
    ]


def test_recompute_is_one_of_three_and_full_when_absent():
    assert parse_run_config(base(), "run.yaml").parallel.training.recompute == "full"
    data = base()
    data["parallel"]["training"]["recompute"] = "selective"
    assert parse_run_config(data, "run.yaml").parallel.training.recompute == "selective"
    data["parallel"]["training"]["recompute"] = "partial"
    assert problems_of(data) == [
        "parallel.training.recompute = \"partial\": must be one of none, selective, full. Fix: use `full`."]

"""Contract: the launcher's Miles command is one Miles v0.1.0 accepts, for every example.

For each example config the kit renders the run config (manifests), the launcher turns it
into ``train.py`` arguments (rltrainer), and a child process parses them with the parser
Miles' train.py builds, assembled from the pinned sources in ../shared/upstream: Miles
v0.1.0, its Megatron-LM 37f9161 and SGLang 0.5.16 (tests/support/miles_offline.py says exactly what
is real there and what is stubbed). The model flags must be exactly what the real
``model_args()`` of the Miles model script returns, and nothing later may change them,
except the dispatcher type the expert-parallel backend owns.

The same parse runs inside the image at build time (``rltrainer launch --dry-run
--check-args``, Dockerfile), against the Miles the image really contains.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from infra.config import load_config
from infra.catalog.models import MODEL_CATALOG
from manifests.context import build_context
from manifests.outputs import placeholder_outputs
from rltrainer.contract import parse_run_config
from rltrainer.miles import (
    MILES_MODEL_SCRIPTS,
    MILES_VERSION,
    build_train_command,
    resolve_model_args,
)

from tests.support.miles_parser import (BACKEND_OWNED_DESTS, MEGATRON_DIR, MILES_DIR, UPSTREAM,
                                        example_case, parse_offline, require_sources)
from tests.support import REPO_ROOT

EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


def test_missing_sources_fail_in_ci_and_skip_elsewhere(tmp_path, monkeypatch):
    gone = tmp_path / "miles-v0.1.0" / "miles" / "utils" / "arguments.py"
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"the pinned upstream sources are missing: {gone}"):
        require_sources((gone,))
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="put Miles v0.1.0, Megatron-LM 37f9161 and SGLang 0.5.16"):
        require_sources((gone,))


def broken_flag_cases(good: dict) -> list[dict]:
    """The default example's command with one fault each: the offline parse must refuse each."""
    args = good["train_args"]
    return [
        {"name": "unknown", "train_args": args + ["--sglang-moe-a2a-backend-typo", "deepep"]},
        {"name": "choice", "train_args": args + ["--moe-flex-dispatcher-backend", "deepepp"]},
        {"name": "sglang-choice", "train_args": args + ["--sglang-moe-a2a-backend", "deep_ep"]},
        {"name": "deprecated", "train_args": args + ["--sglang-stream-output"]},
        {"name": "int", "train_args": args + ["--tensor-model-parallel-size", "four"]},
        {"name": "model", "train_args": args + ["--num-experts", "64"], "model_script": good["model_script"],
         "owned_dests": BACKEND_OWNED_DESTS},
    ]


IMAGE_EXAMPLES = sorted((REPO_ROOT / "images" / "trainer" / "examples").glob("*.yaml"))


def image_build_cases(broken: Path) -> list[dict]:
    """What the Dockerfile's last step runs (``rltrainer launch --dry-run --check-args``) on the
    bundled examples, and on ``broken``: one of them with a misspelt Megatron flag."""
    broken.write_text(IMAGE_EXAMPLES[1].read_text().replace("megatron_args: []",
                                                          "megatron_args: [--moe-router-topk-typo, '8']"))
    cases = [{"name": p.stem, "image_backend": p.stem.removeprefix("qwen3-30b-a3b-"),
              "launch": ["--dry-run", "--check-args", "--config", str(p), "--miles-dir", str(MILES_DIR),
                         "--python", sys.executable]} for p in IMAGE_EXAMPLES]
    cases.append({"name": "broken", "launch": ["--dry-run", "--check-args", "--config", str(broken),
                                               "--miles-dir", str(MILES_DIR), "--python", sys.executable]})
    return cases


@pytest.fixture(scope="module")
def offline(upstream, tmp_path_factory) -> dict[str, dict[str, dict]]:
    """Every case of this module through one offline parser process (building Miles' parser
    imports the pinned sources: a process per test spent most of its time there), by group:
    ``examples`` (per example: its findings, or the error that kept it from a command),
    ``broken`` (the default example's command with one fault each), ``image`` (the image build's
    check); a group whose cases could not be built holds ``setup_error`` instead."""
    groups: dict[str, list[dict]] = {"examples": [], "broken": [], "image": []}
    reports: dict[str, dict[str, dict]] = {"examples": {}, "broken": {}, "image": {}}
    for name in EXAMPLES:
        try:
            groups["examples"].append(example_case(name))
        except Exception as exc:  # reported by that example's test, not every test
            reports["examples"][name] = {"name": name, "setup_error": f"{type(exc).__name__}: {exc}"}
    for group, build in (("broken", lambda: broken_flag_cases(example_case("default"))),
                         ("image", lambda: image_build_cases(tmp_path_factory.mktemp("image") / "broken.yaml"))):
        try:
            groups[group] = build()
        except Exception as exc:  # reported by that group's test
            reports[group]["setup_error"] = {"name": group, "setup_error": f"{type(exc).__name__}: {exc}"}
    cases = [{**case, "name": f"{group}/{case['name']}"} for group, items in groups.items() for case in items]
    for result in (parse_offline(cases)["results"] if cases else []):
        group, name = result["name"].split("/", 1)
        reports[group][name] = {**result, "name": name}
    return reports


def results_of(offline: dict, group: str) -> dict[str, dict]:
    reports = offline[group]
    assert "setup_error" not in reports, reports.get("setup_error")
    return reports


def report_for(offline: dict, example: str) -> dict:
    report = offline["examples"][example]
    assert "setup_error" not in report, report.get("setup_error")
    return report


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_command_parses_with_miles_own_parser(offline, example):
    report = report_for(offline, example)
    assert report["flags"] > 2000  # Megatron's, Miles' and SGLang's: the parser really was built
    assert report["error"] is None, f"{example}: Miles v0.1.0 refuses the launcher's command: {report['error']}"


@pytest.mark.parametrize("example", EXAMPLES)
def test_model_flags_are_exactly_what_model_args_returns(offline, example):
    report = report_for(offline, example)
    assert report["model_args"], "the example names no model with a Miles model script"
    assert "--num-experts" in report["model_args"]  # the real script ran, not an empty stand-in
    assert report["model_args_in_argv"], "model_args() does not appear verbatim in the command"
    assert report["model_flags_changed"] == []


def test_the_check_fails_on_a_broken_flag_a_bad_choice_and_a_deprecated_flag(offline):
    results = results_of(offline, "broken")
    assert results["unknown"]["error"] == "unrecognized arguments: --sglang-moe-a2a-backend-typo deepep"
    assert results["choice"]["error"] == ("argument --moe-flex-dispatcher-backend: invalid choice: 'deepepp' "
                                          "(choose from 'deepep', 'hybridep')")
    assert results["sglang-choice"]["error"].startswith(
        "argument --sglang-moe-a2a-backend: invalid choice: 'deep_ep' (choose from 'none', 'deepep',")
    assert results["deprecated"]["error"] == ("--sglang-stream-output is deprecated in SGLang 0.5.16; "
                                              "use --incremental-streaming-output")
    assert results["int"]["error"] == "argument --tensor-model-parallel-size: invalid int value: 'four'"
    assert results["model"]["model_flags_changed"] == ["--num-experts: model_args() 128, argv 64"]


# Flags whose value type lives in a Megatron module the pinned sources lack: the name is
# checked here, the value only by the image build (Megatron-LM 37f9161 megatron/training/
# arguments.py: --attention-backend's type is the AttnBackend enum of transformer/enums.py).
VALUE_CHECKED_IN_THE_IMAGE_ONLY = {"--attention-backend"}


def test_the_flags_the_launcher_relies_on_are_enforced_not_stubbed(offline):
    reports = [r for r in offline["examples"].values() if "setup_error" not in r]
    assert reports
    unenforced = {flag for r in reports for flag in r["unenforced"]}
    used = {a for r in reports for a in r["train_args"] if a.startswith("--")}
    assert used & unenforced == VALUE_CHECKED_IN_THE_IMAGE_ONLY


def test_the_image_build_check_passes_on_the_bundled_examples_and_fails_on_a_broken_one(offline):
    """What the Dockerfile's last step runs: ``rltrainer launch --dry-run --check-args``."""
    assert [p.stem for p in IMAGE_EXAMPLES] == ["qwen3-30b-a3b-deepep-nvshmem", "qwen3-30b-a3b-nccl"]
    results = results_of(offline, "image")
    for example in IMAGE_EXAMPLES:
        assert (results[example.stem]["exit"], results[example.stem]["stderr"]) == (
            0, "rltrainer launch: Miles' own parser accepts every argument\n")
    assert (results["broken"]["exit"], results["broken"]["stderr"]) == (
        2, "rltrainer launch: Miles' argument parser refuses the command: unrecognized arguments: "
           "--moe-router-topk-typo 8\n")


def test_kit_models_map_to_real_miles_model_scripts(upstream):
    for key, script in MILES_MODEL_SCRIPTS.items():
        assert key in MODEL_CATALOG, key
        assert (MILES_DIR / "scripts" / "models" / f"{script}.py").is_file(), script
    assert not list((MILES_DIR / "scripts" / "models").glob("*.sh"))  # Miles #1910: no .sh any more
    # Catalog models without a Miles v0.1.0 script must carry megatron_args; say which ones.
    assert sorted(set(MODEL_CATALOG) - set(MILES_MODEL_SCRIPTS)) == ["mixtral-8x22b", "mixtral-8x7b"]


def test_the_pinned_megatron_flex_dispatcher_is_deepep_v1_only(upstream):
    """Why deepep-gin cannot train: Megatron's flex dispatcher imports DeepEP V1's Buffer."""
    moe = MEGATRON_DIR / "megatron" / "core" / "transformer" / "moe"
    fused = (moe / "fused_a2a.py").read_text()
    assert "from deep_ep import Buffer" in fused
    assert not [p.name for p in moe.glob("*.py") if "ElasticBuffer" in p.read_text()]
    assert re.search(r"^class Buffer\b", (UPSTREAM / "deepep-567632d" / "deep_ep" / "buffer.py").read_text(), re.M)


def test_image_sources_and_tests_pin_the_same_miles(upstream):
    dockerfile = (REPO_ROOT / "images" / "trainer" / "Dockerfile").read_text()
    assert f"ARG MILES_IMAGE=radixark/miles:{MILES_VERSION}" in dockerfile
    lock = json.loads((MILES_DIR / "release-lock.json").read_text())
    assert lock["release_branch"] == f"release/{MILES_VERSION}"
    assert lock["megatron_commit"].startswith(MEGATRON_DIR.name.rsplit("-", 1)[1])
    miles_dockerfile = (MILES_DIR / "docker" / "Dockerfile").read_text()
    assert "ARG SGLANG_IMAGE_TAG=v0.5.16" in miles_dockerfile  # the SGLang whose server_args we read


def test_cpu_adam_offload_and_the_reward_model_parse_with_miles_own_parser(upstream, tmp_path):
    """training.parallel.optimizer_cpu_offload (Miles v0.1.0 docs/models/qwen/qwen3-moe.md,
    "Optimizer": --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d
    --use-precision-aware-optimizer) and training.reward_model, through the kit's render and the
    launcher, against Megatron's and Miles' real argument definitions; a misspelt offload flag fails."""
    import yaml

    data = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    data.setdefault("training", {}).setdefault("parallel", {})["optimizer_cpu_offload"] = True
    data["training"]["reward_model"] = "boxed_math"
    path = tmp_path / "offload.yaml"
    path.write_text(yaml.safe_dump(data))
    kit = load_config(path)
    ctx = build_context(kit, placeholder_outputs(kit))
    cfg = parse_run_config(ctx.run_config, "offload run config")
    model_args, _ = resolve_model_args(cfg, str(MILES_DIR), sys.executable)
    cmd = build_train_command(cfg, hf_checkpoint="/fsx/models/hf", prompt_data="/fsx/datasets/p.jsonl",
                              miles_dir=str(MILES_DIR), python=sys.executable, model_args=model_args)
    args = cmd.argv[cmd.argv.index(f"{MILES_DIR}/train.py") + 1:]
    offload = ["--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer"]
    assert all(f in args for f in offload) and args[args.index("--rm-type") + 1] == "boxed_math"
    typo = [a.replace("--overlap-cpu-optimizer-d2h-h2d", "--overlap-cpu-optimizer-d2h") for a in args]
    results = {r["name"]: r for r in parse_offline([
        {"name": "offload", "train_args": args}, {"name": "typo", "train_args": typo}])["results"]}
    assert results["offload"]["error"] is None, results["offload"]["error"]
    assert not set(offload + ["--rm-type"]) & set(results["offload"]["unenforced"])
    assert results["typo"]["error"] is not None and "--overlap-cpu-optimizer-d2h" in results["typo"]["error"]


def test_an_uneven_pipeline_split_passes_megatrons_own_validation(upstream, tmp_path):
    """DeepSeek-V3's 61 layers over pp 8, through the kit's render and the launcher, with the real
    deepseek-v3 model_args(): Miles' parser, then Megatron-LM 37f9161's own validate_args and
    TransformerConfig (tests/support/miles_offline.py ``megatron_validation``) accept the split the
    launcher passes (7 + 6 x 8 + 6). Without it Megatron refuses pp 8 (arguments.py:623-636), and
    a split whose middle stages cannot share the rest (8 + 45 + 8) or with an empty end fails in
    TransformerConfig (transformer_config.py:1471-1521)."""
    import yaml

    data = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    data["training"] = {"model": "deepseek-v3", "hf_checkpoint": "/fsx/models/DeepSeek-V3",
                        "parallel": {"tp": 1, "pp": 8, "ep": 2}}
    data["storage"] = {"shared_filesystem": {"capacity_gib": 24000}}
    path = tmp_path / "deepseek-pp8.yaml"
    path.write_text(yaml.safe_dump(data))
    kit = load_config(path)
    ctx = build_context(kit, placeholder_outputs(kit))
    cfg = parse_run_config(ctx.run_config, "deepseek-v3 pp 8 run config")
    model_args, _ = resolve_model_args(cfg, str(MILES_DIR), sys.executable)
    assert model_args[model_args.index("--num-layers") + 1] == "61"
    cmd = build_train_command(cfg, hf_checkpoint="/fsx/models/hf", prompt_data="/fsx/datasets/p.jsonl",
                              miles_dir=str(MILES_DIR), python=sys.executable, model_args=model_args)
    args = cmd.argv[cmd.argv.index(f"{MILES_DIR}/train.py") + 1:]
    i = args.index("--pipeline-model-parallel-size")
    assert args[i:i + 6] == ["--pipeline-model-parallel-size", "8", "--decoder-first-pipeline-num-layers", "7",
                             "--decoder-last-pipeline-num-layers", "6"]

    def with_split(first: str | None, last: str | None) -> list[str]:
        out = args[:i + 2] + args[i + 6:]
        return out + ([] if first is None else ["--decoder-first-pipeline-num-layers", first]) \
            + ([] if last is None else ["--decoder-last-pipeline-num-layers", last])

    cases = [{"name": "launcher", "train_args": args, "model_script": "deepseek-v3"},
             {"name": "no split", "train_args": with_split(None, None)},
             {"name": "8 + 45 + 8", "train_args": with_split("8", "8")},
             {"name": "empty last", "train_args": with_split("7", "0")},
             {"name": "first only", "train_args": with_split("5", None)}]  # 5 + 7 x 8
    results = {r["name"]: r for r in parse_offline([{**c, "megatron_validation": True} for c in cases])["results"]}
    assert {name: (r["error"], r["megatron_validation"]) for name, r in results.items()} == {
        "launcher": (None, None),
        "no split": (None, "AssertionError: Number of layers should be divisible by the pipeline-model-parallel size"),
        "8 + 45 + 8": (None, "ValueError: number of layers at middle stage: 45 must be divisible bythe middle "
                             "pipeline model parallel size 6"),
        "empty last": (None, "ValueError: num_layers_in_last_pipeline_stage must be larger than 0"),
        "first only": (None, None),
    }
    assert results["launcher"]["model_args_in_argv"] and results["launcher"]["model_flags_changed"] == []


def test_a_selective_recompute_in_megatron_args_passes_megatrons_own_validation(upstream):
    """model.megatron_args choosing selective recompute (either spelling) gets none of the launcher's
    full-recompute defaults: Megatron-LM 37f9161 turns --recompute-activations into selective
    (arguments.py:430-431) and refuses a recompute method with selective (arguments.py:963-966), and
    Miles v0.1.0 runs that validation at startup (miles/utils/arguments.py:2711). A full granularity
    without a method still gets the launcher's uniform, one layer, which TransformerConfig needs
    (transformer_config.py:1269-1280). Each command goes through Miles' parser, then Megatron's own
    validate_args and TransformerConfig (tests/support/miles_offline.py ``megatron_validation``)."""
    kit = load_config(REPO_ROOT / "examples" / "default.yaml")
    run_config = build_context(kit, placeholder_outputs(kit)).run_config
    model_args, _ = resolve_model_args(parse_run_config(run_config, "default run config"), str(MILES_DIR),
                                       sys.executable)
    user_choices = {
        "granularity selective": ["--recompute-granularity", "selective"],
        "granularity=selective": ["--recompute-granularity=selective"],
        "recompute-activations": ["--recompute-activations"],
        "granularity full": ["--recompute-granularity", "full"],
        "none given": [],
        # The user's own contradiction is Megatron's to refuse, and this harness does run it.
        "selective with a method": ["--recompute-granularity", "selective", "--recompute-method", "block"],
    }
    cases, recompute = [], {}
    for name, extra in user_choices.items():
        cfg = parse_run_config({**run_config, "model": {**run_config["model"], "megatron_args": [*model_args, *extra]}},
                               f"{name} run config")
        cmd = build_train_command(cfg, hf_checkpoint="/fsx/models/hf", prompt_data="/fsx/datasets/p.jsonl",
                                  miles_dir=str(MILES_DIR), python=sys.executable)
        args = cmd.argv[cmd.argv.index(f"{MILES_DIR}/train.py") + 1:]
        recompute[name] = [a for a in args[len(model_args):] if a.startswith("--recompute")]
        cases.append({"name": name, "train_args": args, "megatron_validation": True})
    results = {r["name"]: (r["error"], r["megatron_validation"]) for r in parse_offline(cases)["results"]}
    refused = "AssertionError: recompute method is not yet supported for selective recomputing granularity"
    assert results == {**{name: (None, None) for name in user_choices}, "selective with a method": (None, refused)}
    assert recompute == {
        "granularity selective": ["--recompute-granularity"],
        "granularity=selective": ["--recompute-granularity=selective"],
        "recompute-activations": ["--recompute-activations"],
        "granularity full": ["--recompute-granularity", "--recompute-method", "--recompute-num-layers"],
        "none given": ["--recompute-granularity", "--recompute-method", "--recompute-num-layers"],
        "selective with a method": ["--recompute-granularity", "--recompute-method"],
    }


def test_each_planned_recompute_renders_a_command_megatron_accepts(upstream, tmp_path):
    """training.parallel.recompute, from the kit config to Megatron: what rlkit plan --write-config
    writes is what the launcher renders, and each choice passes Miles' parser and Megatron-LM
    37f9161's own validate_args and TransformerConfig, for a model with grouped-GEMM experts
    (qwen3-30b-a3b) and one with multi-latent attention (deepseek-v3). Before, the planner's choice
    never reached the run: every run trained under full recompute, whatever the plan assumed."""
    import yaml

    cases, flags = [], {}
    for model, extra in (("qwen3-30b-a3b", {}), ("deepseek-v3", {
            "hf_checkpoint": "/fsx/models/DeepSeek-V3", "parallel": {"tp": 1, "pp": 8, "ep": 2}})):
        for recompute in ("none", "selective", "full"):
            data = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
            training = {"model": model, **extra}
            training["parallel"] = {**training.get("parallel", {}), "recompute": recompute}
            data["training"] = training
            data["storage"] = {"shared_filesystem": {"capacity_gib": 24000}}
            path = tmp_path / f"{model}-{recompute}.yaml"
            path.write_text(yaml.safe_dump(data))
            kit = load_config(path)
            cfg = parse_run_config(build_context(kit, placeholder_outputs(kit)).run_config, path.name)
            model_args, _ = resolve_model_args(cfg, str(MILES_DIR), sys.executable)
            cmd = build_train_command(cfg, hf_checkpoint="/fsx/models/hf", prompt_data="/fsx/datasets/p.jsonl",
                                      miles_dir=str(MILES_DIR), python=sys.executable, model_args=model_args)
            args = cmd.argv[cmd.argv.index(f"{MILES_DIR}/train.py") + 1:]
            flags[model, recompute] = _recompute_flags(args[len(model_args):])
            cases.append({"name": f"{model} {recompute}", "train_args": args, "megatron_validation": True})
    results = {r["name"]: (r["error"], r["megatron_validation"]) for r in parse_offline(cases)["results"]}
    assert results == {c["name"]: (None, None) for c in cases}
    full = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    assert flags == {
        ("qwen3-30b-a3b", "none"): [],
        ("qwen3-30b-a3b", "selective"): ["--recompute-granularity", "selective", "--recompute-modules",
                                         "layernorm", "moe_act"],
        ("qwen3-30b-a3b", "full"): full,
        ("deepseek-v3", "none"): [],
        ("deepseek-v3", "selective"): ["--recompute-granularity", "selective", "--recompute-modules",
                                       "layernorm", "moe_act", "mla_up_proj"],
        ("deepseek-v3", "full"): full,
    }


def _recompute_flags(args: list[str]) -> list[str]:
    """The --recompute-* flags of a command line, each with its values."""
    out, taking = [], False
    for arg in args:
        if arg.startswith("--"):
            taking = arg.startswith("--recompute")
        if taking:
            out.append(arg)
    return out

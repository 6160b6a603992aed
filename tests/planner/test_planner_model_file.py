"""`rlkit plan --model-file`: a file that cannot describe a MoE model is one clear error, fast."""

from __future__ import annotations

import time

import pytest

from ops.cli import main

TINY = ("key: tiny-moe\nnum_hidden_layers: 4\nhidden_size: 1024\nvocab_size: 32000\n"
        "num_attention_heads: 16\nnum_key_value_heads: 4\nhead_dim: 64\nn_routed_experts: 16\n"
        "num_experts_per_tok: 2\nmoe_intermediate_size: 512\n")


def plan_error(capsys, path) -> str:
    started = time.perf_counter()
    rc = main(["plan", "--model-file", str(path), "--instance", "p5.48xlarge", "--nodes", "1"])
    _, err = capsys.readouterr()
    assert time.perf_counter() - started < 1.0
    assert rc == 2, err
    assert err.count("\n") == 1 and "bug in rlkit" not in err, err
    return err


def test_a_file_that_is_not_utf8_is_one_clear_error(capsys, tmp_path):
    # was: UnicodeDecodeError, "This is a bug in rlkit"
    f = tmp_path / "m.yaml"
    f.write_bytes(TINY.encode("utf-16"))
    err = plan_error(capsys, f)
    assert f"model file '{f}' is not UTF-8 text (byte 0xff at offset 0)" in err
    assert "save it as UTF-8" in err


def test_a_huge_expert_count_is_refused_at_once(capsys, tmp_path):
    # was: a divisor loop up to the expert count, over 30 s for 10^9 experts
    f = tmp_path / "m.yaml"
    f.write_text(TINY.replace("n_routed_experts: 16", "n_routed_experts: 1000000000"))
    err = plan_error(capsys, f)
    assert "n_routed_experts 1000000000: Input should be less than or equal to 16384" in err


def test_more_leading_dense_layers_than_layers_is_refused(capsys, tmp_path):
    # was: accepted, with a negative count of MoE layers
    f = tmp_path / "m.yaml"
    f.write_text(TINY + "first_k_dense_replace: 5\nintermediate_size: 4096\n")
    err = plan_error(capsys, f)
    assert ("first_k_dense_replace (dense_layers) 5 must be below num_hidden_layers 4: the layers "
            "after the leading dense ones are the MoE layers, and a MoE model needs one; use at "
            "most 3") in err


@pytest.mark.parametrize("field", ["num_hidden_layers", "num_attention_heads", "hidden_size",
                                   "vocab_size", "moe_intermediate_size"])
def test_every_size_has_an_upper_bound(capsys, tmp_path, field):
    import re
    f = tmp_path / "m.yaml"
    f.write_text(re.sub(rf"^{field}: \d+$", f"{field}: 10000000000", TINY, flags=re.M))
    assert f"{field} 10000000000: Input should be less than or equal to" in plan_error(capsys, f)


def test_the_largest_model_the_bounds_allow_plans_within_a_second(tmp_path):
    from infra.planner import PlannerError, PlanRequest, load_model_file, plan
    from infra.planner.models import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS
    f = tmp_path / "m.yaml"
    f.write_text(TINY.replace("num_hidden_layers: 4", f"num_hidden_layers: {MAX_LAYERS}")
                 .replace("num_attention_heads: 16", f"num_attention_heads: {MAX_HEADS}")
                 .replace("n_routed_experts: 16", f"n_routed_experts: {MAX_EXPERTS}"))
    started = time.perf_counter()
    try:
        plan(PlanRequest(load_model_file(f), "p5.48xlarge", max_nodes=32))
    except PlannerError:
        pass  # it may not fit; it must answer
    assert time.perf_counter() - started < 1.0

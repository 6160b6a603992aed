"""A stand-in Miles checkout whose start-of-run logic is Miles v0.1.0's own code.

``build_checkout`` writes ``<dest>/miles/utils/arguments.py`` with the real
``--start-rollout-id`` definition and the real bridge/non-bridge ``--load`` branch of
``miles_validate_args``, both cut verbatim out of ../shared/upstream/miles-v0.1.0 (so a
different Miles gives different behaviour here), and a ``train.py`` that does what Miles'
driver does with them (``miles/ray/placement_group.py``: take the start from the loaded
checkpoint only when it is None, then load the data cursor of ``start - 1``; ``train.py``:
save the model, tracker last, then the cursor), with torch_dist saves made beforehand.
"""

from __future__ import annotations

import ast
import textwrap
import warnings
from pathlib import Path

from trainer_helpers import pinned_source


def upstream_source(rel: str) -> str:
    return pinned_source("miles-v0.1.0", rel, "Miles v0.1.0")


def function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def bridge_branch(arguments_src: str) -> str:
    """The ``if args.megatron_to_hf_mode == "bridge": ... else: ...`` statement of miles_validate_args."""
    tree = ast.parse(arguments_src)
    for node in ast.walk(function(tree, "miles_validate_args")):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and ast.unparse(node.test) == "args.megatron_to_hf_mode == 'bridge'"):
            return " " * node.col_offset + ast.get_source_segment(arguments_src, node)  # as indented there
    raise AssertionError("miles_validate_args has no `if args.megatron_to_hf_mode == \"bridge\"` branch any more")


def start_rollout_id_argument(arguments_src: str) -> str:
    """The ``parser.add_argument("--start-rollout-id", ...)`` call, verbatim."""
    tree = ast.parse(arguments_src)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "--start-rollout-id"):
            return ast.get_source_segment(arguments_src, node)
    raise AssertionError("Miles defines no --start-rollout-id")


ARGUMENTS_TEMPLATE = '''\
"""Built by the rltrainer tests from Miles v0.1.0's miles/utils/arguments.py (two parts verbatim)."""
import argparse
import os


def miles_validate_args(args):
{branch}


def parse_args(add_custom_arguments=None):
    parser = argparse.ArgumentParser()
    {start_rollout_id}
    for flag in ("--load", "--save", "--ref-load", "--hf-checkpoint", "--megatron-to-hf-mode"):
        parser.add_argument(flag)
    for flag in ("--save-interval", "--num-rollout", "--rollout-batch-size"):
        parser.add_argument(flag, type=int)
    args, _ = parser.parse_known_args()
    args.ref_ckpt_step = None
    # Miles' parse_args calls miles_validate_args by its module-level name, as here.
    miles_validate_args(args)
    return args
'''

TRAIN_PY = '''\
"""Stand-in for Miles' train.py driver; its arguments come from Miles' own validation code."""
import json, os, pathlib, pickle, shutil, sys, time, zipfile

from miles.utils.arguments import parse_args


def model_save(save, rollout_id, partial=False):
    it_dir = save / f"iter_{rollout_id:07d}"
    if partial:  # killed mid-save: a shard, no .metadata
        it_dir.mkdir(parents=True, exist_ok=True)
        (it_dir / "__9_0.distcp").write_bytes(os.urandom(4096))
        return
    # A real torch_dist save, made by the test beforehand (build_checkout): the shards, then
    # .metadata last, as torch.distributed.checkpoint writes them. No torch import here.
    made = pathlib.Path(__file__).parent / "_saves" / it_dir.name
    it_dir.mkdir(parents=True, exist_ok=True)
    for f in sorted(made.iterdir(), key=lambda f: f.name == ".metadata"):
        shutil.copyfile(f, it_dir / (f.name + ".tmp"))
        os.replace(it_dir / (f.name + ".tmp"), it_dir / f.name)
    (it_dir / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    (it_dir / "common.pt").write_bytes(b"common" + bytes([rollout_id]))
    tracker = save / "latest_checkpointed_iteration.txt"  # Megatron: the tracker after the save
    tracker.with_suffix(".tmp").write_text(str(rollout_id))
    os.replace(tracker.with_suffix(".tmp"), tracker)


if __name__ == "__main__":
    args = parse_args()
    save = pathlib.Path(args.save)
    load = pathlib.Path(args.load)
    tracker = load / "latest_checkpointed_iteration.txt"
    loaded = int(tracker.read_text()) if tracker.is_file() else 0
    if args.start_rollout_id is None:  # placement_group.create_training_models
        args.start_rollout_id = loaded + 1
    cursor = load / f"rollout/global_dataset_state_dict_{args.start_rollout_id - 1}.pt"
    offset = 0
    if cursor.is_file():  # Miles: torch.load; a dict of ints needs no torch to read back
        with zipfile.ZipFile(cursor) as z:
            offset = pickle.loads(z.read("archive/data.pkl"))["sample_offset"]
    with open(os.environ["FAKE_MILES_LOG"], "a") as log:
        log.write(json.dumps({"start": args.start_rollout_id, "loaded": loaded, "offset": offset,
                              "load": str(load), "argv": sys.argv[1:], "pid": os.getpid()}) + "\\n")
    hang_at = int(os.environ.get("FAKE_MILES_HANG_AT", "-1"))
    for rollout_id in range(args.start_rollout_id, args.num_rollout):
        offset += args.rollout_batch_size  # the prompts this rollout consumed
        if (rollout_id + 1) % args.save_interval == 0:
            if rollout_id == hang_at:
                model_save(save, rollout_id, partial=True)
                pathlib.Path(os.environ["FAKE_MILES_LOG"] + ".hung").write_text(str(os.getpid()))
                time.sleep(3600)
            model_save(save, rollout_id)
            (save / "rollout").mkdir(exist_ok=True)  # then rollout_manager.save: the data cursor
            # Miles: torch.save, a zip archive (the launcher checks for a whole one); a dict of
            # ints is the same pickle in it without torch
            cursor = save / f"rollout/global_dataset_state_dict_{rollout_id}.pt"
            with zipfile.ZipFile(cursor.with_suffix(".tmp"), "w") as z:
                z.writestr("archive/data.pkl", pickle.dumps({"sample_offset": offset}, protocol=2))
            os.replace(cursor.with_suffix(".tmp"), cursor)
            time.sleep(0.2)
'''


def build_checkout(dest: Path, saves: tuple[int, ...] = ()) -> Path:
    """A Miles checkout at ``dest`` (train.py, miles/utils/arguments.py) built from the pinned
    sources, with a real torch_dist save for each rollout id in ``saves`` for train.py to copy
    (made here, once, so that no train.py run imports torch: seconds of CPU each)."""
    for rollout_id in saves:
        import torch
        import torch.distributed.checkpoint as dcp

        gen = torch.Generator().manual_seed(rollout_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.randn(256, generator=gen)},
                     checkpoint_id=str(dest / "_saves" / f"iter_{rollout_id:07d}"))
    src = upstream_source("miles/utils/arguments.py")
    branch = textwrap.indent(textwrap.dedent(bridge_branch(src)), "    ")
    start = start_rollout_id_argument(src)  # continuation lines sit inside its parentheses
    (dest / "miles" / "utils").mkdir(parents=True, exist_ok=True)
    (dest / "miles" / "__init__.py").write_text("")
    (dest / "miles" / "utils" / "__init__.py").write_text("")
    (dest / "miles" / "utils" / "arguments.py").write_text(ARGUMENTS_TEMPLATE.format(branch=branch, start_rollout_id=start))
    (dest / "train.py").write_text(TRAIN_PY)
    return dest

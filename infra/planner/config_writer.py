"""Write a chosen layout into a kit config YAML file so the rendered manifests use it.

Only the planner's keys under ``training`` are set (``model``, ``node_group``, ``nodes``,
``parallel``, with every memory-relevant knob the plan assumed: ``recompute`` and the micro-batch
token cap ``max_tokens_per_gpu``, and ``expert_parallel.backend``; from an RL plan also
``rollout``, with its placement, pool and overlap, and ``grpo``); every other key of the file is
kept as it was.
Only the top-level ``training:`` block is rewritten, so the rest of the file keeps its text and
comments (comments inside that block are lost: PyYAML does not keep them).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import yaml

from infra.config import (
    ConfigError,
    parse_config,
    parse_config_text,
    read_config_file,
    training_ep_backend_problems,
)
from infra.catalog.models import MODEL_CATALOG
from infra.config.training_model import TrainingConfig, model_hf_checkpoint
from infra.planner.errors import PlannerError, field as named
from infra.planner.layout import INTERLEAVING_RULE
from infra.planner.search import Candidate


_TOP_KEY = re.compile(r"^[^\s#-]")


def _replace_training_block(original: str, data: dict) -> str:
    """The original text with only its top-level ``training:`` block replaced (or appended).
    Falls back to dumping the whole mapping if the splice would not parse back to ``data``."""
    block = yaml.safe_dump({"training": data["training"]}, sort_keys=False,
                           default_flow_style=False)
    lines = original.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^training\s*:", ln)), None)
    if start is None:
        sep = "" if not original or original.endswith("\n") else "\n"
        text = original + sep + block
    else:
        end = next((j for j in range(start + 1, len(lines)) if _TOP_KEY.match(lines[j])),
                   len(lines))
        while end > start + 1 and lines[end - 1].lstrip().startswith("#"):
            end -= 1  # a comment just above the next key belongs to that key
        text = "".join(lines[:start]) + block + "".join(lines[end:])
    try:
        if parse_config_text(text, "the written config") == data:  # as the kit will read it
            return text
    except ConfigError:
        pass
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def training_section(candidate: Candidate, model_key: str, node_group: str) -> dict:
    """The ``training`` keys the planner owns, for ``candidate``."""
    L = candidate.layout
    return {
        "model": model_key,
        "node_group": node_group,
        "nodes": candidate.nodes,
        "parallel": {"tp": L.tp, "pp": L.pp, "cp": L.cp, "ep": L.ep, "etp": L.etp,
                     # the kit config spells "no interleaving" as null (write_config refuses
                     # vpp > 1, which the launcher does not run)
                     "vpp": L.vpp if L.vpp > 1 else None,
                     # what the plan's memory and step time assumed (the launcher renders
                     # both): what is launched is what was planned
                     "recompute": L.recompute,
                     "max_tokens_per_gpu": candidate.memory.max_tokens_per_gpu},
        "expert_parallel": {"backend": candidate.backend.backend},
    }


_DEFAULT_MODEL = TrainingConfig.model_fields["model"].default
_DEFAULT_CHECKPOINT = TrainingConfig.model_fields["hf_checkpoint"].default


def _checkpoint_for(training: dict, model_key: str, path: Path, new_file: bool) -> str | None:
    """The ``training.hf_checkpoint`` a plan for ``model_key`` needs when the file's
    ``training.model`` is another model (its checkpoint holds that model's weights): the same
    location with the new model's folder when it ends in the old one's (``/fsx/models/``,
    ``s3://<bucket>/models/``), else the kit's default for the new model. None when the model
    stays. A model the catalog has no weights location for is refused: the old weights would
    load into it."""
    old_model = training.get("model", _DEFAULT_MODEL)
    if old_model == model_key:
        return None
    old = training.get("hf_checkpoint", _DEFAULT_CHECKPOINT)
    default = model_hf_checkpoint(model_key)
    if default is None:
        if model_key not in MODEL_CATALOG:  # a --model-file model: the config refuses it
            fix = (f"the kit trains catalog models only: add {model_key} to MODEL_CATALOG in "
                   "infra/catalog/models.py (its config.json values and Hugging Face source), "
                   "then rerun")
        elif new_file:
            fix = (f"start {path} from a catalog model's plan, then set training.model: "
                   f"{model_key} and training.hf_checkpoint to its Hugging Face weights by hand")
        else:
            fix = (f"set training.model: {model_key} and training.hf_checkpoint to its Hugging "
                   f"Face weights in {path} first, then rerun")
        raise PlannerError(
            f"not writing {path}: training.model would change from {old_model} to {model_key}, "
            f"but training.hf_checkpoint ({old}) holds {old_model}'s weights and the kit knows no "
            f"weights location for {model_key}; {fix}")
    old_dir = model_hf_checkpoint(old_model)
    old_name = old_dir.rsplit("/", 1)[1] if old_dir else None
    stem = old.rstrip("/")
    if old_name and stem.endswith("/" + old_name):
        return stem[:-len(old_name)] + default.rsplit("/", 1)[1] + old[len(stem):]
    return default


# What the kit's launcher (images/trainer/src/rltrainer/miles.py) runs, for the plan options it
# has no config field for: BF16 training (it passes Megatron no FP8 flag), FP32 Adam moments (it
# never passes --exp-avg-dtype, default fp32: megatron-lm 37f9161
# megatron/training/arguments.py:2960), plain 1F1B with the expert all-to-all exposed (no overlap
# or DualPipe flag) and the baseline software release (infra/catalog/releases.py). A plan made
# under another value sizes memory and time for a run the launcher does not make.
_LAUNCHER_RUNS = (
    ("precision", "bf16", "trains in BF16 (it passes Megatron no FP8 flag)"),
    ("optimizer_bf16_moments", False, "keeps Adam moments in FP32 (it never passes "
                                      "--exp-avg-dtype, whose default is fp32: megatron-lm "
                                      "37f9161 megatron/training/arguments.py:2960)"),
    ("schedule", "1f1b", "runs Megatron's 1F1B schedule with the expert all-to-all exposed (it "
                         "passes no all-to-all overlap or DualPipe flag)"),
    ("release", "baseline", "runs the baseline release (mb-26.06 is Megatron-Bridge's 26.06 "
                            "recipe, whose switches it does not set)"),
)


def launcher_problem(path: str | Path, **options) -> str | None:
    """Why the launcher cannot run a plan made with ``options`` (``precision``,
    ``optimizer_bf16_moments``, ``schedule``, ``release``; one sentence naming all that differ),
    or None. Writing such a plan is refused rather than re-planned as the launcher runs it: the
    plan printed would not be the one written."""
    wrong = [(named(k) if isinstance(v, bool) else f"{named(k)} {v}", why)
             for k, runs, why in _LAUNCHER_RUNS
             if k in options and (v := options[k]) != runs]
    if not wrong:
        return None
    said = "; ".join(f"{opt}, but the launcher {why}" for opt, why in wrong)
    opts = ", ".join(opt for opt, _ in wrong)
    return (f"not writing {path}: {said}. The layout planned with "
            f"{'it' if len(wrong) == 1 else 'them'} would not run as predicted (memory and step "
            f"time); re-plan without {opts} to write the config, or drop "
            f"{named('write_config')} to see this plan")


# training.rollout keys that say how rollout runs (placement, pool, overlap); an on-policy
# colocated plan removes them, so the file says what the defaults say, as before they existed
ROLLOUT_MODE_KEYS = ("placement", "nodes", "overlap", "off_policy_steps")


def write_config(path: str | Path, candidate: Candidate, model_key: str, instance_type: str,
                 node_group: str, rollout: dict | None = None, grpo: dict | None = None,
                 nodes: int | None = None, new_file_text: str | None = None,
                 notes: list[str] | None = None) -> dict:
    """Merge the plan into the config file at ``path``; return the new file content as a dict.

    ``new_file_text`` starts the file when ``path`` does not exist yet (a new config): the plan is
    merged into that text, and the file is created only when the result validates, so a refused
    plan leaves nothing behind.

    A plan for another model than the file's also moves ``training.hf_checkpoint`` to that model's
    weights (``_checkpoint_for``); what it set is appended to ``notes``.

    ``rollout`` (``gpus_per_engine``, ``ep`` and, for a disaggregated or overlapped plan,
    ``placement``, ``nodes``, ``overlap``, ``off_policy_steps``) and ``grpo`` (batch-shape keys)
    come from an RL plan and are merged into ``training.rollout`` / ``training.grpo`` when given;
    a ``rollout`` without the mode keys removes them (colocated, on-policy). ``nodes`` is the
    run's node count when it is more than the training candidate's (a rollout pool of its own).

    Refuses, with a PlannerError, when the node group is missing from ``gpu_node_groups``, runs
    a different instance type, or is too small for the planned node count.
    """
    path = Path(path)
    creating = new_file_text is not None and not os.path.lexists(path)
    try:  # the same strict reading as every other config consumer (no aliases, duplicates...)
        if creating:
            original, data = new_file_text, parse_config_text(new_file_text, str(path))
        else:
            data = read_config_file(path)
            original = path.read_text(encoding="utf-8")
    except ConfigError as err:
        raise PlannerError(f"not writing {path}: {err}") from None
    groups = data.get("gpu_node_groups") or {}
    if not isinstance(groups, dict) or node_group not in groups:
        known = ", ".join(groups) if isinstance(groups, dict) and groups else "none"
        raise PlannerError(f"node group {node_group!r} is not in gpu_node_groups of {path} "
                           f"(it has: {known}); add it or pass --node-group with one of those")
    group = groups[node_group] or {}
    group_type = group.get("instance_type")
    if group_type != instance_type:
        raise PlannerError(f"node group {node_group!r} in {path} runs {group_type}, but the plan "
                           f"is for {instance_type}; plan for {group_type} or pick another group")
    max_size = group.get("max_size")
    nodes = candidate.nodes if nodes is None else nodes
    if isinstance(max_size, int) and nodes > max_size:
        raise PlannerError(f"the plan needs {nodes} nodes but node group {node_group!r} "
                           f"allows at most {max_size} (max_size); raise max_size or plan with "
                           f"--max-nodes {max_size}")

    training = data.get("training")
    if training is None:
        training = data["training"] = {}
    if not isinstance(training, dict):
        raise PlannerError(f"'training' in {path} must be a mapping")
    kept = training.get("rollout")
    if rollout is None and isinstance(kept, dict) and kept.get("placement") == "disaggregated":
        # a training plan puts every node of the run to training; the file gives some to rollout
        raise PlannerError(
            f"not writing {path}: its training.rollout.placement is disaggregated (a rollout pool "
            f"of {kept.get('nodes')} node(s)), but a training plan sizes the layout for every node; "
            "plan with --rl to write the GRPO step, or set training.rollout.placement: colocated "
            "(and remove training.rollout.nodes) first")
    if not candidate.memory.max_tokens_per_gpu:
        raise PlannerError(
            f"not writing {path}: the plan sized fixed micro-batches (TrainingSetup."
            "max_tokens_per_gpu 0), but the launcher runs Miles' dynamic batching, whose "
            "micro-batches hold up to parallel.training.max_tokens_per_gpu tokens per GPU; plan "
            "with TrainingSetup(max_tokens_per_gpu=...) (rlkit plan does)")
    if candidate.layout.vpp > 1:
        raise PlannerError(f"not writing {path}: the layout interleaves its pipeline (vpp "
                           f"{candidate.layout.vpp}) and {INTERLEAVING_RULE}; plan without "
                           "interleaving (PlanRequest.interleaving False, the default)")
    new = training_section(candidate, model_key, node_group)
    checkpoint = _checkpoint_for(training, model_key, path, creating)
    training["model"] = new["model"]
    if checkpoint is not None:
        old = training.get("hf_checkpoint", _DEFAULT_CHECKPOINT)
        training["hf_checkpoint"] = checkpoint
        if notes is not None:
            notes.append(f"set training.hf_checkpoint to {checkpoint}, where the kit keeps "
                         f"{model_key}'s weights (it was {old}, the previous model's); put the "
                         "weights there, or edit it")
    training["node_group"] = new["node_group"]
    training["nodes"] = nodes
    parallel = training.get("parallel")
    if not isinstance(parallel, dict):
        parallel = training["parallel"] = {}
    parallel.update(new["parallel"])
    ep = training.get("expert_parallel")
    if not isinstance(ep, dict):
        ep = training["expert_parallel"] = {}
    ep["backend"] = new["expert_parallel"]["backend"]
    if ep["backend"] != "deepep-gin":
        ep.pop("gin_mode", None)  # only meaningful for deepep-gin
    for key, values in (("rollout", rollout), ("grpo", grpo)):
        if values:
            section = training.get(key)
            if not isinstance(section, dict):
                section = training[key] = {}
            if key == "rollout":
                for mode_key in ROLLOUT_MODE_KEYS:
                    section.pop(mode_key, None)
            section.update(values)

    text = _replace_training_block(original, data)
    try:  # never write a config that fails validation
        written = parse_config(parse_config_text(text, str(path)), str(path))
    except ConfigError as err:
        raise PlannerError(f"not writing {path}: the result would not be a valid config:\n{err}"
                           ) from None
    if notes is not None:  # valid, and gate-able, but `rlkit launch` refuses to train with it
        notes += [f"rlkit launch will refuse this config: {p}"
                  for p in training_ep_backend_problems(written)]
    # Write through a symlink: replace the file it points at, not the link itself.
    target = Path(os.path.realpath(path))
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)  # atomic: readers never see half a file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return data

"""The rollout engine a training plan shares its GPUs with when its config runs rollout colocated.

The kit's launcher always runs a GRPO step: with ``training.rollout.placement`` colocated (the
default) SGLang engines of ``training.rollout.gpus_per_engine`` GPUs take turns with training on
the same GPUs (Miles ``--colocate``, ``mem_fraction_static`` 0.7; rltrainer/miles.py). A training
plan written into such a config (or planned from its run) is therefore planned beside that
engine (``TrainingSetup.colocate_rollout``), and the engine is checked with the GRPO planner's
own rule (``rl.engine_fits_heads``, ``rl.engine_weights_fit``): a file whose engine cannot hold
the model's weights in its share gets the smallest engine that can, and the note says so.
"""

from __future__ import annotations

from pathlib import Path

from infra.config import ConfigError, read_config_file
from infra.config.training_model import RolloutConfig
from infra.planner.errors import PlannerError
from infra.planner.hardware import GIB, System
from infra.planner.models import MoEModel
from infra.planner.request import COLOCATED_MEM_FRACTION, RLSetup
from infra.planner.memory import ENGINE_SIZES
from infra.planner.rl import engine_fits_heads, engine_weights_fit

DEFAULT_ENGINE_GPUS = RolloutConfig.model_fields["gpus_per_engine"].default
DEFAULT_ENGINE_EP = RolloutConfig.model_fields["ep"].default


def config_rollout(path: str | Path) -> dict:
    """``training.rollout`` of the config file at ``path`` as written ({} when the file does not
    exist yet: a new config runs the defaults, colocated)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = read_config_file(path)
    except ConfigError as err:
        raise PlannerError(f"not writing {path}: {err}") from None
    training = data.get("training")
    rollout = training.get("rollout") if isinstance(training, dict) else None
    return rollout if isinstance(rollout, dict) else {}


def is_colocated(rollout: dict) -> bool:
    return rollout.get("placement", "colocated") == "colocated"


def engine_problem(model: MoEModel, system: System, gpus: int) -> str | None:
    """Why a colocated engine of ``gpus`` GPUs cannot run ``model`` (the GRPO planner's rule), or
    None."""
    if not engine_fits_heads(model, gpus):
        return (f"SGLang cannot split the {model.num_heads} attention heads of {model.key} over "
                f"{gpus} GPUs (rltrainer.contract.heads)")
    if not engine_weights_fit(model, system, RLSetup(), "colocated", gpus):
        weights = 2.0 * (model.total_params + model.mtp_params) / gpus / GIB
        share = COLOCATED_MEM_FRACTION * system.gpu_memory_gib
        return (f"an engine of {gpus} GPU(s) holds {weights:.0f} GiB of {model.key}'s BF16 weights "
                f"per GPU, more than 90% of its colocated memory share ({share:.0f} GiB of "
                f"{system.name}'s {system.gpu_memory_gib:.1f} usable), so no KV cache fits")
    return None


def colocated_engine(model: MoEModel, system: System, rollout: dict,
                     where: str) -> tuple[int, str | None]:
    """GPUs per engine to plan beside: the config's ``gpus_per_engine`` when the rule accepts
    it, else the smallest engine size that it accepts, with a note naming the change. Raises
    PlannerError when no engine size fits."""
    kept = rollout.get("gpus_per_engine", DEFAULT_ENGINE_GPUS)
    problem = engine_problem(model, system, kept)
    if problem is None:
        return kept, None
    for gpus in ENGINE_SIZES:
        if engine_problem(model, system, gpus) is None:
            return gpus, (f"training.rollout.gpus_per_engine {kept} in {where}: {problem}; "
                          f"planned beside engines of {gpus} GPUs and wrote that")
    raise PlannerError(
        f"training.rollout.gpus_per_engine {kept} in {where}: {problem}, and no engine of "
        f"{', '.join(map(str, ENGINE_SIZES))} GPUs fits either; plan a disaggregated GRPO step "
        "(--rl --placement disaggregated), whose engines have their GPUs to themselves")


def engine_ep(model: MoEModel, gpus: int, backend: str, rollout: dict) -> int:
    """Expert-parallel size of the engine: the config's when the engine keeps its size and the ep
    still holds (divides the engine and the experts; equals the engine with DeepEP, which SGLang
    forces), else the GRPO planner's
    choice (``rl.engine_layouts``): the whole engine, or 1 when the experts do not divide."""
    ep = rollout.get("ep", DEFAULT_ENGINE_EP)
    deepep = backend.startswith("deepep")
    same = rollout.get("gpus_per_engine", DEFAULT_ENGINE_GPUS) == gpus
    if same and gpus % ep == 0 and model.num_experts % ep == 0 and (ep == gpus or not deepep):
        return ep
    return gpus if deepep or model.num_experts % gpus == 0 else 1

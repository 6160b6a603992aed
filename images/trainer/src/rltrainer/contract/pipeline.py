"""How the model's layers are split over the pipeline stages: one rule for the run-config
validator, the launcher (``rltrainer.miles``) and the kit's planner (infra/trainer_contract.py).

What Megatron-LM 37f9161 (radixark/Megatron-LM, the commit Miles v0.1.0 pins) runs:

- without an explicit split, pp must divide ``num_layers`` ("Number of layers should be divisible
  by the pipeline-model-parallel size", megatron/training/arguments.py:623-636);
- ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  (arguments.py:2315-2322, handed to ``TransformerConfig`` at arguments.py:1417-1418) set the
  layers of the first and last stage. ``TransformerConfig.__post_init__``
  (megatron/core/transformer/transformer_config.py:1462-1521) wants each above 0 and the other
  layers split evenly over the pp - 2 middle stages, with middle layers if and only if there are
  middle stages. So an uneven split has equal middle stages and free ends;
- Megatron takes neither flag together with ``--account-for-embedding/loss-in-pipeline-split``
  (transformer_config.py:1397-1407) or ``--pipeline-model-parallel-layout`` (:1410-1427), and with
  virtual stages every stage's count must divide by vpp (:1474-1484, 1493-1503, 1525-1537); the
  kit runs vpp 1.

Miles v0.1.0 hands the two flags to the model it builds in bridge mode
(miles/backends/megatron_utils/model_provider.py:84-87, ``_apply_bridge_runtime_config``) and
refuses them with pp 1 (miles/utils/arguments.py:2719-2725). It never reads
``--pipeline-model-parallel-layout`` there, so that finer-grained flag is not used.

The rule (``pipeline_split``): of the splits Megatron accepts, the one whose fullest stage holds the
fewest layers (a pipeline step waits for its slowest stage), and of those the one with the most
layers on the middle stages, so that the ends take the remainder: the first stage also holds the
embedding and the last the output layer and the loss (Megatron's own
``--account-for-embedding/loss-in-pipeline-split`` count each as a layer, transformer_config.py:
107-113). The first stage takes the odd layer of the remainder, since the last stage's output
layer and loss cost more compute than the first's embedding lookup. DeepSeek-V3's 61 layers over
8 stages: 7 + 6 x 8 + 6. When pp divides the layers this is the even split, and no flag is passed.
Every stage holds at least one layer, so there is no split over more stages than layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .problems import Problem
from .schema import TrainingParallel, flag_value

FIRST_STAGE_FLAG = "--decoder-first-pipeline-num-layers"
LAST_STAGE_FLAG = "--decoder-last-pipeline-num-layers"
# Flags that give Megatron an explicit split of the layers over the stages; with one of them in
# the model arguments Megatron checks that split itself, and the launcher adds none.
EXPLICIT_PIPELINE_SPLIT_FLAGS = (
    "--pipeline-model-parallel-layout",
    FIRST_STAGE_FLAG,
    LAST_STAGE_FLAG,
    "--num-virtual-stages-per-pipeline-rank",
)
# Each counts as one more layer in an even split (arguments.py:629-633), and rules out an uneven one
# (transformer_config.py:1397-1407).
PIPELINE_SPLIT_EXTRA_FLAGS = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")


@dataclass(frozen=True)
class PipelineSplit:
    """``layers`` decoder layers over ``pp`` stages: ``first`` and ``last`` on the end stages,
    ``middle`` on each of the pp - 2 others (0 when there are none; one stage is both ends)."""

    layers: int
    pp: int
    first: int
    middle: int
    last: int

    @property
    def stages(self) -> tuple[int, ...]:
        if self.pp == 1:
            return (self.layers,)
        return (self.first, *([self.middle] * (self.pp - 2)), self.last)

    @property
    def fullest(self) -> int:
        """Layers on the most loaded stage."""
        return max(self.first, self.middle, self.last)

    @property
    def even(self) -> bool:
        return self.layers % self.pp == 0

    def megatron_args(self) -> list[str]:
        """The flags that give Megatron this split; none for an even split, which it makes itself."""
        if self.even:
            return []
        return [FIRST_STAGE_FLAG, str(self.first), LAST_STAGE_FLAG, str(self.last)]

    def describe(self) -> str:
        """'7 + 6 x 8 + 6' (first + middle stages x layers + last), '31 + 30', '8 x 6'."""
        if self.even:
            return f"{self.pp} x {self.layers // self.pp}"
        if self.pp == 2:
            return f"{self.first} + {self.last}"
        return f"{self.first} + {self.pp - 2} x {self.middle} + {self.last}"


@lru_cache(maxsize=4096)
def pipeline_split(layers: int, pp: int) -> PipelineSplit | None:
    """The split of ``layers`` over ``pp`` stages the launcher gives Megatron (module docstring);
    None when there is none (pp above the layers, or either below 1)."""
    if layers < 1 or pp < 1 or pp > layers:
        return None
    if pp == 1:
        return PipelineSplit(layers, 1, layers, 0, layers)
    if layers % pp == 0:
        share = layers // pp
        return PipelineSplit(layers, pp, share, share if pp > 2 else 0, share)
    if pp == 2:
        return PipelineSplit(layers, 2, (layers + 1) // 2, 0, layers // 2)
    best: tuple[tuple[int, int], PipelineSplit] | None = None
    for middle in range(1, (layers - 2) // (pp - 2) + 1):  # both ends keep at least one layer
        ends = layers - middle * (pp - 2)
        split = PipelineSplit(layers, pp, (ends + 1) // 2, middle, ends // 2)
        key = (split.fullest, -middle)
        if best is None or key < best[0]:
            best = (key, split)
    assert best is not None  # pp <= layers: one layer on each middle stage leaves both ends one
    return best[1]


def pipeline_split_problem(pp: int, num_layers: int, source: str, path: str = "parallel.training.pp") -> Problem | None:
    """Why no split of ``num_layers`` over ``pp`` stages exists (None when one does): every stage
    holds at least one layer (Megatron-LM 37f9161 transformer_config.py:1471-1472 and 1490-1491
    for the ends, 1508-1521 for the middle stages; without a split, arguments.py:623-636).
    ``source`` says where ``num_layers`` comes from, as a phrase ("model.megatron_args sets
    --num-layers 48")."""
    if pp <= 1 or num_layers < 1 or pipeline_split(num_layers, pp) is not None:
        return None
    return Problem(
        path,
        pp,
        f"every pipeline stage must hold at least one layer (Megatron), and {source}, fewer than {pp} stages",
        f"use a pp of at most {num_layers}",
    )


def _layers(model_args: tuple[str, ...] | list[str]) -> tuple[int | None, set[str]]:
    raw = flag_value(model_args, "--num-layers")
    flags = {a.split("=", 1)[0] for a in model_args}
    return (int(raw) if raw is not None and raw.isdigit() else None), flags


def pipeline_split_problems(t: TrainingParallel, model_args: tuple[str, ...] | list[str], where: str) -> list[Problem]:
    """The pipeline-split problem of ``t.pp`` for the --num-layers that ``model_args`` set: none when
    they set no layer count or give Megatron an explicit split (it checks that itself). With
    --account-for-*-in-pipeline-split Megatron takes no uneven split, so pp must divide the layers
    plus one for each of them (arguments.py:629-636)."""
    pp = t.pp
    layers, flags = _layers(model_args)
    if layers is None or flags.intersection(EXPLICIT_PIPELINE_SPLIT_FLAGS):
        return []
    source = f"{where} sets --num-layers {layers}"
    extra = len(flags.intersection(PIPELINE_SPLIT_EXTRA_FLAGS))
    if extra and pp > 1 and (layers + extra) % pp:
        total = layers + extra
        fits = [d for d in range(1, total + 1) if total % d == 0][:24]
        return [Problem(
            "parallel.training.pp",
            pp,
            "Megatron splits the layers evenly over the pipeline stages when the model arguments count the "
            "embedding or loss as a layer (--account-for-embedding/loss-in-pipeline-split: it takes no "
            "--decoder-first/last-pipeline-num-layers with them), and "
            f"{source} (+{extra} for --account-for-*-in-pipeline-split: {total}), which {pp} does not divide",
            f"use a pp that divides {total} (one of {', '.join(map(str, fits))}), or drop "
            "--account-for-*-in-pipeline-split so the launcher can split unevenly",
        )]
    problem = pipeline_split_problem(pp, layers + extra, source)
    return [problem] if problem else []


def model_pipeline_split(pp: int, model_args: tuple[str, ...] | list[str]) -> PipelineSplit | None:
    """The uneven split the launcher passes for ``model_args`` (``PipelineSplit.megatron_args``),
    None when it passes none: pp 1, an even split, no --num-layers in the model arguments, a split
    of their own or --account-for-*-in-pipeline-split there, or no split at all (the validator
    refuses that pp)."""
    layers, flags = _layers(model_args)
    if pp <= 1 or layers is None or flags.intersection(EXPLICIT_PIPELINE_SPLIT_FLAGS + PIPELINE_SPLIT_EXTRA_FLAGS):
        return None
    split = pipeline_split(layers, pp)
    return split if split is not None and not split.even else None

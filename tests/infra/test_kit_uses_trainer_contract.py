"""The kit and the trainer share one run-config contract, owned by the trainer (rltrainer.contract).

The kit reaches it through infra/trainer_contract.py only, and keeps no copy of what it holds:
no other kit module imports ``rltrainer``, spells the trainer's env names, run-config path or
metrics namespace, or lists the expert-parallel backends itself.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from infra import trainer_contract
from tests.support import REPO_ROOT

KIT_DIRS = ("infra", "stacks", "manifests", "ops")
THE_ONE_PLACE = "infra/trainer_contract.py"


def kit_sources() -> list[Path]:
    files = [REPO_ROOT / "app.py"]
    for d in KIT_DIRS:
        files += sorted((REPO_ROOT / d).rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def test_only_infra_trainer_contract_imports_the_trainer():
    importers = set()
    for path in kit_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n == "rltrainer" or n.startswith("rltrainer.") for n in names):
                importers.add(rel(path))
    assert importers == {THE_ONE_PLACE}


def test_no_kit_module_spells_the_trainers_names():
    """A copy of a contract value in kit code would drift silently; the kit imports the name."""
    spelled = {trainer_contract.RAYJOB_ENV, trainer_contract.RUN_CONFIG_DIR, trainer_contract.RUN_CONFIG_PATH,
               trainer_contract.METRICS_NAMESPACE, trainer_contract.ENVIRONMENT_ENV}
    backend_lists = {tuple(trainer_contract.EP_BACKENDS), tuple(trainer_contract.TRAINING_EP_BACKENDS)}
    copies = []
    for path in kit_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    any(s in node.value for s in spelled):
                copies.append(f"{rel(path)}:{node.lineno}: {node.value!r}")
            elif isinstance(node, (ast.Tuple, ast.List)) and all(
                    isinstance(e, ast.Constant) for e in node.elts) and \
                    tuple(e.value for e in node.elts) in backend_lists:
                copies.append(f"{rel(path)}:{node.lineno}: the expert-parallel backend list")
    for template in sorted((REPO_ROOT / "manifests" / "templates").glob("*.j2")):
        copies += [f"{rel(template)}: {s!r}" for s in spelled if s in template.read_text()]
    assert copies == []


def test_the_kit_declares_the_trainer_package_it_imports():
    kit = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    trainer = tomllib.loads((REPO_ROOT / "images" / "trainer" / "pyproject.toml").read_text())["project"]
    assert trainer["name"] in kit["dependencies"]
    # What the contract needs, the trainer declares (images/trainer/tests/test_trainer_contract.py
    # checks that PyYAML and the standard library are all it imports).
    assert any(d.lower().startswith("pyyaml") for d in trainer["dependencies"])
    assert "-e images/trainer" in (REPO_ROOT / "requirements.txt").read_text().splitlines()


def test_the_kit_configs_choices_are_the_trainers():
    """training.parallel.recompute, training.rollout.placement and .overlap: the kit config offers
    exactly the values the trainer accepts, and the trainer's default is the kit's (run_config.py
    leaves a default out of run.yaml)."""
    import typing

    from infra.config.training_model import ParallelConfig, RolloutConfig
    from rltrainer.contract import schema

    for model, key, values, trainer_default in (
            (ParallelConfig, "recompute", schema.RECOMPUTES, schema.TrainingParallel.recompute),
            (RolloutConfig, "placement", schema.PLACEMENTS, schema.RolloutParallel.placement),
            (RolloutConfig, "overlap", schema.OVERLAPS, schema.RolloutParallel.overlap)):
        field = model.model_fields[key]
        assert set(typing.get_args(field.annotation)) == set(values), key
        assert field.default == trainer_default, key

"""Support code shared by the test modules (artifact locator, fakes, paths). Not collected as
tests. Test modules import it as ``tests.support`` (pyproject.toml puts the repository root on
the path), wherever they sit under tests/."""

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where present: faster

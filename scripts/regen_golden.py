"""Regenerate tests/golden/: the rendered manifests of every example config.

    python scripts/regen_golden.py

Each examples/<name>.yaml is rendered with placeholder stack outputs (no AWS access) into
tests/golden/<name>/, replacing what was there; golden directories of removed examples are
deleted. tests/manifests/test_manifests_render.py compares fresh renders with these files, so a change to
a template, the context or an example shows up as a reviewable diff.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from infra.config import load_config  # noqa: E402
from manifests import build_context, placeholder_outputs, render, write  # noqa: E402

GOLDEN = REPO_ROOT / "tests" / "golden"


def main() -> int:
    examples = sorted((REPO_ROOT / "examples").glob("*.yaml"))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for stale in sorted(GOLDEN.iterdir()):
        if stale.is_dir() and stale.name not in {e.stem for e in examples}:
            shutil.rmtree(stale)
            print(f"removed {stale.relative_to(REPO_ROOT)} (no such example)")
    for example in examples:
        cfg = load_config(example)
        files = render(build_context(cfg, placeholder_outputs(cfg)))
        target = GOLDEN / example.stem
        if target.exists():
            shutil.rmtree(target)
        write(files, target)
        print(f"{target.relative_to(REPO_ROOT)}: {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Synth benchmark: wall time per stack and template sizes for a config (default: built-in).

    python benchmarks/synth.py [--config examples/p5-2node.yaml] [--repeat 3]

"build" is the time to construct a stack's constructs in Python/jsii; "synth" is app.synth() for
the whole app (CloudFormation rendering, asset manifests); "cold total" includes starting the
jsii runtime and importing aws_cdk, which is what `python app.py` pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_VALIDATION", "false")

import aws_cdk  # noqa: E402,F401  (import cost is part of the cold total)

from infra.config import load_config  # noqa: E402
from stacks import kit  # noqa: E402

IMPORTED = time.perf_counter()


def run_once(config, outdir: str) -> tuple[dict[str, float], float, dict[str, int], dict[str, int]]:
    """Build and synth once; return per-stack build times, synth time, sizes, resource counts."""
    build_times: dict[str, float] = {}
    original_init = {}
    for cls in (kit.NetworkStack, kit.DataStack, kit.ClusterStack, kit.GpuStack):
        original_init[cls] = cls.__init__

        def timed(self, scope, id, *args, __orig=cls.__init__, **kwargs):
            start = time.perf_counter()
            __orig(self, scope, id, *args, **kwargs)
            build_times[id] = time.perf_counter() - start

        cls.__init__ = timed
    try:
        app = kit.make_app(outdir=outdir)
        kit.build_stacks(app, config)
        start = time.perf_counter()
        assembly = app.synth()
        synth_time = time.perf_counter() - start
    finally:
        for cls, init in original_init.items():
            cls.__init__ = init
    sizes, counts = {}, {}
    for stack in assembly.stacks:
        sizes[stack.stack_name] = Path(outdir, stack.template_file).stat().st_size
        counts[stack.stack_name] = len(stack.template.get("Resources", {}))
    return build_times, synth_time, sizes, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="config file (default: the built-in default)")
    parser.add_argument("--repeat", type=int, default=3, help="warm repetitions (default 3)")
    args = parser.parse_args()
    config = load_config(args.config)

    runs = []
    for i in range(max(args.repeat, 1)):
        with tempfile.TemporaryDirectory() as outdir:
            runs.append(run_once(config, outdir))
        if i == 0:
            cold_total = time.perf_counter() - T0
    build_times, _, sizes, counts = runs[-1]
    print(f"config: {args.config or 'built-in default'}  repetitions: {len(runs)}")
    print(f"{'stack':<28}{'build s (median)':>18}{'template KiB':>14}{'resources':>11}")
    for name in sizes:
        median = statistics.median(r[0][name] for r in runs)
        print(f"{name:<28}{median:>18.3f}{sizes[name] / 1024:>14.1f}{counts[name]:>11}")
    synth_median = statistics.median(r[1] for r in runs)
    print(f"{'app.synth() (all stacks)':<28}{synth_median:>18.3f}"
          f"{sum(sizes.values()) / 1024:>14.1f}{sum(counts.values()):>11}")
    print(f"import aws_cdk + jsii start: {IMPORTED - T0:.2f} s; cold total (first run): "
          f"{cold_total:.2f} s; warm build+synth median: "
          f"{statistics.median(sum(r[0].values()) + r[1] for r in runs):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

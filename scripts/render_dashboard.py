"""Draw the run dashboard of an example config as a PNG, from its synthesized JSON.

    .venv/bin/python scripts/render_dashboard.py [examples/p5-2node.yaml] [docs/img/run-dashboard.png]

The layout, titles and queries are the dashboard body CDK synthesizes for the config (no AWS
call). The curves are illustrative, not measurements: CloudWatch draws the real ones.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ["CDK_VALIDATION"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def dashboard_body(config_path: Path) -> dict:
    from infra.config import load_config
    from stacks.kit import build_stacks, make_app

    cfg = load_config(config_path)
    with tempfile.TemporaryDirectory() as out:
        app = make_app(outdir=out)
        build_stacks(app, cfg)
        template = app.synth().get_stack_by_name(cfg.stack_names["cluster"]).template
    body = next(r for r in template["Resources"].values()
                if r["Type"] == "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return json.loads("".join(p if isinstance(p, str) else cfg.region for p in parts))


# Plausible shapes per panel, by title keyword (illustration only).
_SHAPES = [
    ("utilisation", lambda t: 88 + 0 * t, 3), ("memory", lambda t: 74 + 0 * t, 1),
    ("power", lambda t: 610 + 0 * t, 25), ("EFA bytes", lambda t: 2.1e10 + 0 * t, 1.5e9),
    ("dropped", lambda t: 0 * t, 0), ("Ready", lambda t: 1 + 0 * t, 0),
    ("Failed", lambda t: 0 * t, 0), ("replacements", lambda t: (abs(t - 3.5) < 0.03) * 1.0, 0),
    ("restarts", lambda t: (t > 4.5) * 1.0, 0),
    ("Reward", lambda t: 0.2 + 0.4 * (1 - np.exp(-t / 2)), 0.02),
    ("Loss", lambda t: 0.05 * np.exp(-t / 3) + 0.01, 0.003),
    ("throughput", lambda t: 1400 + 0 * t, 60), ("Step time", lambda t: 300 + 0 * t, 12),
]


def _illustrative(title: str, t, rng, i: int):
    for key, shape, noise in _SHAPES:
        if key in title:
            offset = 1 + (0.02 * i if noise else 0)  # tell the nodes apart on noisy panels
            return np.clip(shape(t) * offset + noise * rng.standard_normal(t.size), 0, None)
    return rng.uniform(0.3, 0.9) + 0.05 * rng.standard_normal(t.size)


def draw(body: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widgets = body["widgets"]
    rows = max(w["y"] + w["height"] for w in widgets)
    fig = plt.figure(figsize=(16, rows * 0.42), dpi=72)
    rng = np.random.default_rng(7)
    t = np.linspace(0, 6, 120)  # hours, the dashboard's default 6 h window
    for w in widgets:
        # Dashboard grid: 24 columns; y grows downwards.
        ax = fig.add_axes([w["x"] / 24 + 0.006, 1 - (w["y"] + w["height"]) / rows + 0.03,
                           w["width"] / 24 - 0.012, w["height"] / rows - 0.06])
        props = w["properties"]
        if w["type"] == "text":
            ax.axis("off")
            ax.text(0, 0.5, props["markdown"].replace("# ", "").replace("`", ""), fontsize=10,
                    va="center", wrap=True)
            continue
        ax.set_title(props.get("title", ""), fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        if w["type"] == "log" and props.get("view") == "table":
            ax.axis("off")
            ax.text(0, 0.9, "@timestamp            node                         by", fontsize=7,
                    family="monospace")
            ax.text(0, 0.75, "(rows: Node objects deleted, e.g. by node auto-repair)", fontsize=7,
                    family="monospace", color="grey")
            continue
        series = max(1, len(props.get("metrics", [])))
        nodes = 2 if "InstanceId,NodeName" in json.dumps(props) else 1
        title = props.get("title", "")
        for i in range(series * nodes):
            ax.plot(t, _illustrative(title, t, rng, i), lw=1)
        ax.set_xticks([0, 2, 4, 6], ["-6h", "-4h", "-2h", "now"])
    fig.text(0.5, 0.005, "Layout and titles from the synthesized dashboard JSON; curves are "
             "illustrative.", ha="center", fontsize=8, color="grey")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    config = Path(argv[0]) if argv else root / "examples" / "p5-2node.yaml"
    out = Path(argv[1]) if len(argv) > 1 else root / "docs" / "img" / "run-dashboard.png"
    draw(dashboard_body(config), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

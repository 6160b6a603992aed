"""`rlkit plan --plot`: cost against node count and the chosen layout's step-time breakdown.

Input is plain numbers (a ``PlotData``), so a test can draw a fixed plan; matplotlib is imported
only here and only when a plot is asked for (Agg backend: no display needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.planner.errors import PlannerError


@dataclass(frozen=True)
class PlotData:
    title: str
    nodes: tuple[int, ...]  # node counts, ascending
    dollars_per_million_tokens: tuple[float, ...]  # best layout at each count
    chosen_nodes: int
    chosen_label: str
    breakdown: tuple[tuple[str, float], ...]  # (phase, seconds) of the chosen layout's step


def from_rl_plan(result) -> PlotData:
    """PlotData of an ``RLPlan`` (best layout per node count; rollout / sync / train)."""
    pts = [(c.nodes, c.dollars_per_million_tokens) for c in result.best_per_nodes
           if c.dollars_per_million_tokens is not None]
    b = result.best
    return PlotData(
        title=f"GRPO {result.model.name} on {result.system.name}",
        nodes=tuple(n for n, _ in pts), dollars_per_million_tokens=tuple(v for _, v in pts),
        chosen_nodes=b.nodes,
        chosen_label=f"{b.placement}, {b.engine.label()}, {b.time.mode}, bound by {b.time.bound}",
        breakdown=(("rollout", b.time.rollout), ("weight sync", b.time.sync),
                   ("training", b.time.train)))


def from_training_plan(result, per_nodes) -> PlotData:
    """PlotData of a training ``PlanResult``; ``per_nodes`` = best candidate per node count."""
    pts = [(c.nodes, c.cost.dollars_per_million_tokens) for c in per_nodes
           if c.cost.dollars_per_million_tokens is not None]
    b, t = result.best, result.best.time
    return PlotData(
        title=f"{result.model.name} training on {result.system.name}",
        nodes=tuple(n for n, _ in pts), dollars_per_million_tokens=tuple(v for _, v in pts),
        chosen_nodes=b.nodes, chosen_label=b.layout.label(),
        breakdown=(("compute", t.compute), ("tensor-parallel", t.tp_comm),
                   ("all-to-all", t.ep_comm_exposed), ("bubble", t.pp_bubble),
                   ("pipeline p2p", t.pp_comm_exposed), ("data-parallel", t.dp_comm_exposed),
                   ("optimizer", t.optimizer)))


def draw(data: PlotData, path: str | Path) -> Path:
    """Write a two-panel PNG to ``path``; PlannerError if there is no price to plot."""
    if not data.nodes:
        raise PlannerError("nothing to plot: no layout has a price; pass --price-per-hour")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.suffix.lower() != ".png":  # matplotlib would refuse it, or add .png itself
        raise PlannerError(f"plot {str(path)!r}: the plot is a PNG image; name a .png file")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4),
                                      gridspec_kw={"width_ratios": (3, 2)})
    left.plot(data.nodes, data.dollars_per_million_tokens, marker="o")
    if data.chosen_nodes in data.nodes:
        i = data.nodes.index(data.chosen_nodes)
        left.scatter([data.chosen_nodes], [data.dollars_per_million_tokens[i]], s=120,
                     facecolors="none", edgecolors="red", zorder=3, label="chosen")
        left.legend()
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("nodes")
    left.set_ylabel("USD per million trained tokens")
    left.set_title("best layout at each node count")
    left.grid(alpha=0.3)
    names = [n for n, _ in data.breakdown]
    secs = [s for _, s in data.breakdown]
    bottom = 0.0
    for name, s in zip(names, secs):
        right.bar(["step"], [s], bottom=bottom, width=0.5, label=f"{name} {s:.1f} s")
        bottom += s
    right.set_ylabel("seconds per step")
    right.set_title(f"chosen: {data.chosen_nodes} node(s), {data.chosen_label}", fontsize=9)
    right.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(data.title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise PlannerError(f"cannot write plot {str(path)!r}: {err.strerror}") from None
    finally:
        plt.close(fig)
    return path

"""The study's cost-frontier figure: accuracy against seconds that trained and against FLOPs,
one line per arm through its budgets, with the seeds each mean rests on in its title and on any
point that rests on fewer."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from pipeline.study.grid import REFERENCE_ARM, REFERENCE_BUDGET


def seeds_shown(seeds: tuple[int, ...], rows: pd.DataFrame) -> str:
    """The grid's seeds with a finished cell that has its accuracy, and those with none: the
    seeds a figure's means rest on (a seed dropped or failed everywhere is named as missing)."""
    trained = set(rows.loc[rows["acc"].notna(), "seed"]) if len(rows) else set()
    shown = ",".join(str(s) for s in seeds if s in trained) or "none"
    missing = [str(s) for s in seeds if s not in trained]
    return shown + (f" (not in the means: {','.join(missing)})" if missing else "")


def point_labels(points: pd.DataFrame, most: int) -> list[str]:
    """Each point's budget, with its number of seeds where that is fewer than the figure's most
    (a study or join still missing cells: its lines join means over different seeds)."""
    return [f"{b} (n={n})" if n < most else str(b) for b, n in zip(points["budget"], points["n"])]


# Where each arm's point labels sit, in points from the point, by the arm's order: arms matched
# on the same budget land on the same spot (on FLOPs, one arm's "seconds" beside another's
# "flops:1"), and one offset for all of them drew their labels over each other.
LABEL_OFFSETS = ((4, -10), (4, 5), (4, -20), (4, 15))
# Points near one spot but not on it (two arms' seconds cells a quarter of a point apart) can
# still bring labels together whatever the offsets: such a label takes the nearest free place
# beside its own point, just above or just below it first, then a line further each way.
LABEL_PLACES = tuple((4, dy) for line in range(6) for dy in (5 + 9 * line, -10 - 9 * line))


def figure(points: pd.DataFrame, path: Path, title: str, metric: str) -> Path:
    """The frontier figure, drawn and written to ``path``."""
    fig = draw(points, title, metric)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw(points: pd.DataFrame, title: str, metric: str) -> plt.Figure:
    """Accuracy against seconds that trained and against FLOPs (a multiple of the reference
    run's), one line per arm through its budgets, 95% intervals as bars."""
    ref = points[(points.arm == REFERENCE_ARM) & (points.budget == REFERENCE_BUDGET)]
    ref_flops = float(ref["flops"].iloc[0]) if len(ref) else 1.0
    most = int(points["n"].max()) if len(points) else 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    for ax, key, scale, xlabel in (
        (axes[0], "trained_s", 1.0, "seconds that trained (s)"),
        (axes[1], "flops", 1.0 / ref_flops, "training FLOPs, multiple of static's at --epochs"),
    ):
        for k, (arm, group) in enumerate(points.groupby("arm", sort=False)):
            group = group.sort_values(key)
            ys = 100 * group["acc"]
            err = (100 * (group["acc_ci_high"] - group["acc"])).fillna(0.0)
            ax.errorbar(scale * group[key], ys, yerr=err, marker="o", capsize=3, color=f"C{k}", label=arm)
            offset = LABEL_OFFSETS[k % len(LABEL_OFFSETS)]
            for x, y, budget in zip(scale * group[key], ys, point_labels(group, most)):
                ax.annotate(
                    budget, (x, y), textcoords="offset points", xytext=offset, fontsize=7, color=f"C{k}"
                )
        ax.set(xlabel=xlabel, ylabel=f"{metric} (%), mean over seeds")
        ax.grid(alpha=0.3)
    # Whole axes, not a zoom on the points: cells matched on seconds differ by a second or two,
    # and a zoomed axis drew that as the figure's whole width.
    axes[0].set_xlim(left=0, right=1.05 * max(1.0, float(points["trained_s"].max())))
    axes[1].set_xscale("log")
    flops = (points["flops"] / ref_flops).fillna(1.0)
    axes[1].set_xlim(min(0.5, 0.8 * flops.min()), max(2.0, 1.25 * flops.max()))
    multiple = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x")
    axes[1].xaxis.set_major_formatter(multiple)
    axes[1].xaxis.set_minor_formatter(multiple)
    axes[1].tick_params(axis="x", which="minor", labelsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=max(1, len(labels)), frameon=False)
    fig.suptitle(title, fontsize=10)
    labels_apart(fig)
    return fig


def labels_apart(fig: plt.Figure) -> None:
    """Each axes' point labels, in the order drawn, moved to the nearest of ``LABEL_PLACES``
    where it covers no label already placed (left where it was drawn if none is free): where
    labels fall is only known once the figure is laid out."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        placed = []
        for text in ax.texts:
            drawn = text.xyann
            for place in (drawn, *LABEL_PLACES, drawn):
                text.xyann = place
                box = text.get_window_extent(renderer)
                if not any(box.overlaps(other) for other in placed):
                    break
            placed.append(box)

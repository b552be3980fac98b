"""Figures of the evaluate report, comparing variants over seeds (``pipeline/run/plots.py`` draws the
figures of one run); matplotlib with the Agg backend, nothing shown on screen.

Each figure takes the report's groups of runs (``pipeline.report.groups.Group``, one per
variant and final architecture) and what it draws from them; deciding which runs belong
together, and which compare, stays with the report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from pipeline.report.stats import summary
from pipeline.run import plots


class Runs(Protocol):
    """What the figures read of a group of runs (``pipeline.report.groups.Group``)."""

    label: str
    runs: pd.DataFrame  # one row per run: run_id and its final metrics
    target: float  # target validation accuracy for time-to-target; NaN when there is none

    def has(self, metric: str) -> bool: ...

    def per_unit(self, metric: str) -> pd.Series: ...


def tier_accuracy(
    comp: pd.DataFrame, groups: list[Runs], tier_names: dict[str, str], colours: dict, path: Path
) -> None:
    """Mean test accuracy per tier and variant with its 95% interval, from the report's comparison
    table ``comp``; ``tier_names``: metric -> tier, those the table lacks left out."""
    tiers = [m for m in tier_names if (comp["metric"] == m).any()]
    fig, ax = plt.subplots(figsize=(max(7.0, 3.0 + len(tiers) * (0.5 + 0.35 * len(groups))), 4.5))
    width = 0.8 / max(1, len(groups))
    lows = []
    for i, g in enumerate(groups):
        rows = comp[(comp["group"] == g.label) & comp["metric"].isin(tiers)]
        xs = [tiers.index(m) - 0.4 + width * (i + 0.5) for m in rows["metric"]]
        if not xs:
            continue
        ax.bar(xs, rows["mean"], width, color=colours[g.label], label=g.label)
        has_ci = np.isfinite(rows["ci_low"].to_numpy(dtype=float))
        for x, (_, r), ok in zip(xs, rows.iterrows(), has_ci):
            if ok:
                ax.errorbar(
                    x,
                    r["mean"],
                    yerr=[[r["mean"] - r["ci_low"]], [r["ci_high"] - r["mean"]]],
                    color="black",
                    capsize=3,
                    linewidth=1,
                )
                lows.append(r["ci_low"])
            else:  # one seed: no interval to draw, and the bar should not look like it has one
                ax.annotate(f"n={r['n']}", (x, r["mean"]), ha="center", va="bottom", fontsize=7)
                lows.append(r["mean"])
    if lows:
        # Differences of a point or two vanish on an axis from 0; say where it starts instead.
        bottom = max(0.0, float(np.nanmin(lows)) - 0.05)
        ax.set_ylim(bottom, 1.0)
        ax.set_ylabel(f"test accuracy (axis starts at {bottom:.2f})")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no test accuracy logged", ha="center", transform=ax.transAxes)
    ax.set_xticks(range(len(tiers)), [tier_names[m] for m in tiers])
    ax.set_title("test accuracy per tier: mean over seeds, 95% CI")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def accuracy_vs_wallclock(groups: list[Runs], curves: dict, colours: dict, path: Path) -> None:
    """Final test accuracy against training time, one point per run; and each run's validation
    accuracy against its cumulative training time (``curves``: run id -> history with both
    columns), with each target as a dashed line."""
    fig, (ax_run, ax_curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    targets = {}
    for g in groups:
        c = colours[g.label]
        if g.has("test/acc") and "time/total_s" in g.runs.columns:
            ax_run.scatter(g.runs["time/total_s"], g.runs["test/acc"], color=c, label=g.label)
        labelled = False
        for run_id in g.runs["run_id"]:
            h = curves.get(run_id)
            if h is not None:
                h = h.sort_values("time/cumulative_s")
                ax_curve.plot(
                    h["time/cumulative_s"],
                    h["val/acc"],
                    "-",
                    color=c,
                    alpha=0.7,
                    linewidth=1,
                    label=None if labelled else g.label,
                )
                labelled = True
        if math.isfinite(g.target):
            targets[round(g.target, 6)] = g.target
    for target in targets.values():
        ax_curve.axhline(target, color="grey", linestyle="--", linewidth=1)
    ax_run.set(xlabel="wall-clock training time (s)", ylabel="final test accuracy", title="one point per run")
    ax_curve.set(
        xlabel="cumulative training time (s)",
        ylabel="validation accuracy",
        title="validation accuracy against time (dashed: target)",
    )
    for ax in (ax_run, ax_curve):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    _save(fig, path)


def mean_learning_curves(
    groups: list[Runs], histories: dict, events: dict, colours: dict, path: Path
) -> None:
    """Mean validation accuracy per epoch of each variant, under a timeline of what changed
    (growth events, curriculum stages; the same for every seed of a variant)."""
    marks: dict[tuple, None] = {}
    for g in groups:
        first = next((r for r in g.runs["run_id"] if r in histories), None)
        if first is not None:
            for mark in plots.schedule_marks(
                events.get(first, []), None, histories[first].to_dict("records")
            ):
                marks[mark] = None
    fig, axes = plt.subplots(
        2 if marks else 1,
        1,
        figsize=(10, 6.5 if marks else 4.5),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [1.1, 3] if marks else [1], "hspace": 0.1},
    )
    ax = axes[-1, 0]
    drawn, last_epoch = False, 1
    for g in groups:
        frames = [
            histories[r]
            for r in g.runs["run_id"]
            if r in histories and {"epoch", "val/acc"} <= set(histories[r].columns)
        ]
        if frames:
            mean = pd.concat(frames).groupby("epoch")["val/acc"].mean()
            # Epochs drawn 1-based, as in plots.learning_curves.
            ax.plot(
                mean.index + 1,
                mean.values,
                "o-",
                color=colours[g.label],
                markersize=3,
                label=f"{g.label} (n={len(frames)})",
            )
            drawn, last_epoch = True, max(last_epoch, int(mean.index.max()) + 1)
    for kind, epoch, _label in marks:
        style = plots.MARKS[kind]
        # A change before epoch e happens between the points of epochs e and e+1.
        ax.axvline(epoch + 0.5, color=style["color"], linestyle=style["linestyle"], linewidth=1)
    if not drawn:
        ax.text(0.5, 0.5, "no history.csv logged", ha="center", transform=ax.transAxes)
    ax.set(xlabel="epoch", ylabel="validation accuracy (fraction correct)")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if drawn:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), title="variant (seeds)")
    if marks:
        plots.timeline(axes[0, 0], list(marks), last_epoch)
    fig.suptitle("validation accuracy per epoch, mean over seeds")
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend beside the axes stays in the file
    plt.close(fig)


def cost_frontier(lines: list[tuple[str, list[Runs]]], path: Path) -> None:
    """Test accuracy against wall-clock and FLOPs per variant across training lengths: one line
    per (variant, groups of that variant at each length); nothing is drawn without lines."""
    if not lines:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    panels = (
        (axes[0], "time/total_s", "training wall-clock (s)"),
        (axes[1], "train/flops_cumulative", "training FLOPs"),
    )
    mean = lambda g, metric: float(np.nanmean(g.per_unit(metric)))
    for i, (variant, line) in enumerate(lines):
        by_cost = sorted(line, key=lambda g: mean(g, "train/flops_cumulative"))
        accs = [summary(g.per_unit("test/acc").dropna()) for g in by_cost]
        ys = [100 * a["mean"] for a in accs]
        err = [100 * (a["ci_high"] - a["mean"]) if np.isfinite(a["ci_high"]) else 0.0 for a in accs]
        for ax, metric, label in panels:
            xs = [mean(g, metric) for g in by_cost]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=variant)
            ax.set_xlabel(label)
            ax.set_ylabel("test accuracy (%), mean and 95% CI")
            ax.grid(alpha=0.3)
    axes[1].set_xscale("log")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Test accuracy against training cost, per variant across training lengths")
    fig.savefig(path, dpi=110)  # laid out by constrained_layout: tight_layout would undo it, and warn
    plt.close(fig)


NOISE_CURVES = (
    ("noise/train_acc_flipped_noisy", "flipped training labels memorised (%)"),
    ("noise/trained_flipped_share", "flipped share of the examples trained (%)"),
)


def noise_curves(groups: list[Runs], histories: dict, colours: dict, path: Path) -> None:
    """Per epoch, mean over seeds: how many flipped training labels the network has memorised,
    and how much of what it trained on was flipped (how the curriculum holds noise back or feeds
    it). Drawn only when some run trained on noisy labels."""
    columns = {"epoch", *(metric for metric, _ in NOISE_CURVES)}
    noisy = lambda r: r in histories and columns <= set(histories[r].columns)
    curves = {g.label: [histories[r] for r in g.runs["run_id"] if noisy(r)] for g in groups}
    curves = {label: frames for label, frames in curves.items() if frames}
    if not curves:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, (metric, title) in zip(axes, NOISE_CURVES):
        for label, frames in curves.items():
            mean = pd.concat(frames).groupby("epoch")[metric].mean()
            ax.plot(mean.index + 1, 100 * mean.values, "o-", markersize=3, color=colours[label],
                    label=f"{label} (n={len(frames)})")  # fmt: skip
        ax.set(xlabel="epoch", ylabel=title, title=title.replace(" (%)", "") + ", mean over seeds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.suptitle("Label noise: memorisation and the share of noisy labels trained, per epoch")
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 3) + 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def exit_curves(groups: list[Runs], curves: dict[str, dict], colours: dict, path: Path) -> None:
    """Test accuracy against mean FLOPs per example as the shared threshold goes from 0 (every
    example leaves at the first exit) to 1 (none leaves early): one line per run, its calibrated
    point (filled) and the whole network (open square)."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    fulls = []
    for g in groups:
        for i, run_id in enumerate(r for r in g.runs["run_id"] if r in curves):
            curve = curves[run_id]
            points = sorted(curve["curve"], key=lambda p: p["flops"])
            first = i == 0
            label = lambda what: f"{g.label}: {what}" if first else None  # noqa: B023 (used at once)
            colour = colours[g.label]
            flops = [p["flops"] / 1e6 for p in points]
            ax.plot(flops, [100 * p["acc"] for p in points], "-", lw=1.2, alpha=0.75, color=colour,
                    label=label("thresholds 0 to 1"))  # fmt: skip
            ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], "o", ms=7, color=colour,
                    markeredgecolor="k", label=label("calibrated thresholds"))  # fmt: skip
            ax.plot(curve["flops_full"] / 1e6, 100 * curve["acc_full"], "s", ms=7, color=colour,
                    markerfacecolor="white", label=label("whole network"))  # fmt: skip
            fulls.append(100 * curve["acc_full"])
    if fulls:  # near 0 every example leaves at the first exit, far below: show the trade-off
        ax.set_ylim(min(fulls) - 3, max(fulls) + 0.8)
    ax.set(xlabel="mean forward FLOPs per test example (millions)", ylabel="test accuracy (%)")
    ax.set_title("Early exits: test accuracy against FLOPs over confidence thresholds, per run")
    ax.grid(alpha=0.3)
    # Below the axes, two columns, so long variant names never cover the curves or run off.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""scripts/bench_frontier.py's figure: test accuracy against training wall-clock and FLOPs."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot(frontier: dict, reference: dict, path: Path, title: str, runs: list[dict] = ()) -> None:
    """Test accuracy against seconds and against FLOPs: static's line, and dynamic's through all
    its points (its budgets in FLOPs, its 12 epochs, static-12's seconds) with a marker for how
    each was given; legend below. The seconds are those that trained where every row of ``runs``
    has them (``wall_s`` beside), the epoch loop's where none has."""
    clocks = {"wall_s" in r for r in runs}
    clock = "training wall-clock"
    if clocks == {True}:
        clock = "seconds that trained"
    elif clocks == {True, False}:
        clock = "seconds (that trained; the epoch loop's in older rows)"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    static, dynamic = "#1f77b4", "#d62728"
    markers = {
        "static": ("o", "static (FLOPs budgets)"),
        "dynamic": ("o", "dynamic (FLOPs budgets)"),
        "dynamic-12ep": ("s", "dynamic, 12 epochs"),
        "dynamic-same-time": ("D", "dynamic, static-12's seconds"),
    }
    # FLOPs as a multiple of static-12's, on a log axis ticked at the benchmark's budgets.
    per = {"train_s": 1.0, "flops": 1.0 / reference["flops"]["mean"]}
    for ax, key, label in (
        (axes[0], "train_s", f"{clock} (s)"),
        (axes[1], "flops", "training FLOPs, multiple of static-12's"),
    ):
        dynamic_points = sorted(
            (p for arm, points in frontier.items() if arm != "static" for p in points),
            key=lambda p: p[key]["mean"],
        )
        for points, colour in ((frontier["static"], static), (dynamic_points, dynamic)):
            xs, ys = (
                [per[key] * p[key]["mean"] for p in points],
                [100 * p["test_acc"]["mean"] for p in points],
            )
            ax.plot(xs, ys, color=colour)
        for arm, points in frontier.items():
            if not points:
                continue
            marker, name = markers[arm]
            ax.errorbar(
                [per[key] * p[key]["mean"] for p in points],
                [100 * p["test_acc"]["mean"] for p in points],
                yerr=[100 * (p["test_acc"]["ci_high"] - p["test_acc"]["mean"]) for p in points],
                marker=marker,
                ls="none",
                capsize=3,
                color=static if arm == "static" else dynamic,
                label=name,
            )
        ax.axhline(100 * reference["test_acc"]["mean"], color="grey", ls=":", lw=1, label="static-12 mean")
        ax.axvline(per[key] * reference[key]["mean"], color="grey", ls="--", lw=1, label="static-12 cost")
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%), mean and 95% CI")
        ax.grid(alpha=0.3)
    axes[1].set_xscale("log")
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].set_xticks(ticks := [0.125, 0.25, 0.5, 1, 1.5], [f"{t:g}" for t in ticks])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)

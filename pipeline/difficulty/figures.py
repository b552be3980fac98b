"""The figures of a scores run: score histograms with the tier cut points, the easiest and
hardest examples of each class, and examples per class and tier."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from pipeline.data.sources import RawData
from pipeline.data.tiers import TIER_NAMES, TierCuts
from pipeline.difficulty.scores_table import SPLITS, score_column

matplotlib.use("Agg")  # figures are files only, as in pipeline/run/plots.py
import matplotlib.pyplot as plt

# What each score measures, for the histograms' x axes.
SCORE_AXIS = {
    "loss": "cross-fitted loss (nats; higher: harder)",
    "el2n": "EL2N: L2 norm of the error vector (higher: harder)",
    "input": "input complexity (bytes after zlib compression)",
}


def histogram_figure(
    table: pd.DataFrame,
    names: tuple[str, ...],
    cuts: TierCuts,
    classes: list[str],
    path: Path,
    title: str = "difficulty scores",
) -> Path:
    """Training-split histograms: one panel per scorer, then the tier scorer per class with
    its cut points."""
    train = table[table["split"] == "train"]
    groups = sorted(cuts.cuts)
    n_panels = len(names) + len(groups)
    cols = 5
    rows = math.ceil(n_panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    axes = axes.flatten()
    for ax, scorer in zip(axes, names):
        ax.hist(train[score_column(scorer)], bins=60, color="steelblue", histtype="stepfilled")
        if scorer == cuts.scorer and not cuts.per_class:
            for c in cuts.cuts[-1]:
                ax.axvline(c, color="crimson", linestyle="--", linewidth=1)
        ax.set_title(f"{scorer} (train)", fontsize=9)
        ax.set_xlabel(SCORE_AXIS.get(scorer, f"{scorer} score"), fontsize=7)
        ax.set_ylabel("training examples" + (" (log)" if scorer in ("loss", "el2n") else ""), fontsize=7)
        if scorer in ("loss", "el2n"):
            ax.set_yscale("log")
    column = score_column(cuts.scorer)
    for ax, group in zip(axes[len(names) :], groups):
        part = train if group == -1 else train[train["label"] == group]
        ax.hist(part[column], bins=40, color="grey", histtype="stepfilled")
        for c in cuts.cuts[group]:
            if math.isfinite(c):
                ax.axvline(c, color="crimson", linestyle="--", linewidth=1)
        ax.set_title(f"{cuts.scorer}: {'all' if group == -1 else classes[group]}", fontsize=9)
        ax.set_xlabel(SCORE_AXIS.get(cuts.scorer, f"{cuts.scorer} score"), fontsize=7)
        ax.set_ylabel("training examples (log)", fontsize=7)
        ax.set_yscale("log")
    for ax in axes[n_panels:]:
        ax.axis("off")
    fig.suptitle(f"{title}; training split; dashed: tier cut points", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def extremes_figure(
    table: pd.DataFrame, scorer: str, raw: RawData, classes: list[str], path: Path, per_side: int = 8
) -> Path:
    """Per class, the ``per_side`` easiest (left) and hardest (right) training examples, as one
    mosaic image (one axes: fast to draw), each tile labelled with its score."""
    train = table[table["split"] == "train"]
    column = score_column(scorer)
    c, h, w = raw.train_x.shape[1:]
    gap, label_h = 2, 9  # pixels between tiles; room under each tile for its score
    cols = 2 * per_side
    mosaic = np.full(((h + label_h) * len(classes), (w + gap) * cols + 3 * gap, c), 255, dtype=np.uint8)
    fig, ax = plt.subplots(figsize=(cols * 0.75 + 1.5, len(classes) * 0.9 + 0.6))
    for label in range(len(classes)):
        part = train[train["label"] == label].sort_values([column, "index"])
        picks = [*part.head(per_side).itertuples(), *part.tail(per_side).itertuples()]
        for col, row in enumerate(picks[:cols]):
            y0 = label * (h + label_h)
            x0 = col * (w + gap) + (3 * gap if col >= per_side else 0)  # a wider gap between sides
            mosaic[y0 : y0 + h, x0 : x0 + w] = raw.train_x[int(row.index)].permute(1, 2, 0).numpy()
            score = getattr(row, column)
            ax.text(x0 + w / 2, y0 + h + 0.5, f"{score:.2g}", fontsize=5, ha="center", va="top")
    ax.imshow(mosaic.squeeze(-1) if c == 1 else mosaic, cmap="gray", interpolation="nearest")
    ax.set_yticks([i * (h + label_h) + h / 2 for i in range(len(classes))], classes, fontsize=7)
    ax.set_xticks([])
    ax.set_title(f"easiest (left) and hardest (right) training examples by {scorer}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tier_count_figure(counts: pd.DataFrame, path: Path) -> Path:
    """The tier-by-class count table of each split as an annotated heat map."""
    split_names = [s for s in SPLITS if s in counts.index.get_level_values("split")]
    fig, axes = plt.subplots(1, len(split_names), figsize=(3.6 * len(split_names), 4.0), squeeze=False)
    for ax, name in zip(axes[0], split_names):
        part = counts.loc[name]
        matrix = part.to_numpy()
        shares = matrix / matrix.sum(1, keepdims=True).clip(min=1)  # (classes, tiers)
        ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        for (r, c), value in np.ndenumerate(matrix):
            ax.text(c, r, str(value), ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(TIER_NAMES)), TIER_NAMES, fontsize=7)
        ax.set_yticks(range(len(part)), part.index.get_level_values("class"), fontsize=7)
        ax.set_title(f"{name}: examples per class and tier", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

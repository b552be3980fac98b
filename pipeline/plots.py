"""Figures logged as artifacts; matplotlib with the Agg backend, nothing shown on screen."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def learning_curves(
    history: list[dict], path: Path, events: list[dict] | None = None, title: str = ""
) -> Path:
    """Loss and accuracy per epoch, train and validation, with growth events as vertical lines."""
    epochs = [h["epoch"] + 1 for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(epochs, [h["train/loss"] for h in history], "o-", label="train")
    ax_loss.plot(epochs, [h["val/loss"] for h in history], "o-", label="validation")
    ax_acc.plot(epochs, [h["train/acc"] for h in history], "o-", label="train")
    ax_acc.plot(epochs, [h["val/acc"] for h in history], "o-", label="validation")
    for tier in ("easy", "medium", "hard"):
        key = f"val/acc_{tier}"
        if any(key in h for h in history):
            ax_acc.plot(epochs, [h.get(key, float("nan")) for h in history], "--", label=f"val {tier}")
    for event in events or []:
        for ax in (ax_loss, ax_acc):
            # An event at epoch e happens before epoch e runs, i.e. between points e and e+1.
            ax.axvline(event["epoch"] + 0.5, color="grey", linestyle=":", linewidth=1)
        ax_acc.annotate(
            event.get("label", event.get("op", "")),
            (event["epoch"] + 0.5, 0.02),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=7,
            color="grey",
        )
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

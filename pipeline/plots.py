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


LAYER_COLOURS = {
    "conv": "#4c72b0",
    "pool": "#8c8c8c",
    "dropout": "#dd8452",
    "fc": "#55a868",
    "batchnorm": "#c44e52",
    "residual": "#8172b3",
    "head": "#222222",
}


def architecture_evolution(trace: dict, path: Path, title: str = "") -> Path:
    """How the network grew: parameters and FLOPs per epoch, and the layer stack of each stage."""
    epochs = [e["epoch"] + 1 for e in trace["epochs"]]
    stages: list[tuple[int, str]] = []  # (first epoch, spec key) of each distinct architecture
    for e in trace["epochs"]:
        if not stages or stages[-1][1] != e["spec"]:
            stages.append((e["epoch"] + 1, e["spec"]))
    fig, (ax_size, ax_stack) = plt.subplots(
        1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, max(1.2, 0.45 * len(stages))]}
    )
    ax_size.step(epochs, [e["params"] for e in trace["epochs"]], where="post", label="parameters")
    ax_flops = ax_size.twinx()
    ax_flops.step(
        epochs,
        [e["flops_forward"] for e in trace["epochs"]],
        where="post",
        color="C1",
        label="forward FLOPs / example",
    )
    ax_size.set(xlabel="epoch", ylabel="parameters", title="size")
    ax_flops.set_ylabel("forward FLOPs / example")
    ax_size.legend(loc="upper left", fontsize=8)
    ax_flops.legend(loc="lower right", fontsize=8)
    for col, (first_epoch, key) in enumerate(stages):
        layers = [*trace["specs"][key]["layers"], {"id": "head", "type": "head"}]
        for row, layer in enumerate(layers):
            ax_stack.add_patch(
                plt.Rectangle(
                    (col + 0.05, -row - 0.9),
                    0.9,
                    0.8,
                    color=LAYER_COLOURS.get(layer["type"], "grey"),
                    alpha=0.8,
                )
            )
            ax_stack.text(
                col + 0.5, -row - 0.5, layer["id"], ha="center", va="center", fontsize=7, color="white"
            )
        ax_stack.text(col + 0.5, 0.3, f"epoch {first_epoch}", ha="center", fontsize=8)
    depth = max(len(trace["specs"][key]["layers"]) + 1 for _, key in stages)
    ax_stack.set_xlim(0, len(stages))
    ax_stack.set_ylim(-depth - 0.2, 0.8)
    ax_stack.axis("off")
    ax_stack.set_title("layers of each stage (input at the top)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""Figures logged as artifacts; matplotlib with the Agg backend, nothing shown on screen."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from models.spec import ArchSpec, infer_shapes
from pipeline.data.tiers import TIER_NAMES

# Stages of the tiers curriculum (pipeline/curriculum/strategies.py, TierStages.stage), as the timeline
# names them.
STAGE_NAMES = {0: "easy only", 1: "easy+medium", 2: "all tiers", 3: "easy retired"}
MARKS = {  # what the timeline and the vertical lines show, each in its own style and lane
    "growth": {"color": "0.35", "linestyle": ":", "lane": 2},
    "curriculum": {"color": "tab:cyan", "linestyle": "--", "lane": 1},
    "pruning": {"color": "tab:red", "linestyle": "-.", "lane": 0},
}
TIER_COLOURS = dict(zip(TIER_NAMES, ("tab:green", "tab:brown", "tab:purple")))


def schedule_marks(
    events: list[dict] | None, plan: dict | None, history: list[dict] | None = None
) -> list[tuple[str, int, str]]:
    """(kind, epoch, label) of everything that changes what a run trains on or with: growth
    events (those of one epoch joined), tiers-curriculum stage changes and the start of pruning.
    ``epoch`` is the 0-based epoch before which the change happens."""
    marks: list[tuple[str, int, str]] = []
    by_epoch: dict[int, list[str]] = {}
    for event in events or []:
        by_epoch.setdefault(int(event["epoch"]), []).append(str(event.get("label", event.get("op", ""))))
    marks += [("growth", epoch, "\n".join(labels)) for epoch, labels in sorted(by_epoch.items())]
    table = (plan or {}).get("curriculum_schedule") or []
    if not table and history:  # a report has each run's history, not its plan
        table = [{"epoch": h["epoch"], "stage": h.get("curriculum/stage")} for h in history]
    previous = None
    for row in table:
        stage = row.get("stage")
        if stage is None or stage != stage:  # absent, or NaN in a history without a curriculum
            continue
        if previous is not None and stage != previous:
            marks.append(("curriculum", int(row["epoch"]), STAGE_NAMES.get(int(stage), f"stage {stage}")))
        previous = stage
    pruning = (plan or {}).get("pruning")
    if pruning:
        marks.append(("pruning", int(pruning["start"]), f"pruning {pruning['rate']:g} starts"))
    elif history:
        pruned = [h["epoch"] for h in history if (h.get("curriculum/pruned_share") or 0) > 0]
        if pruned:
            marks.append(("pruning", int(min(pruned)), "pruning starts"))
    return marks


def learning_curves(
    history: list[dict],
    path: Path,
    events: list[dict] | None = None,
    title: str = "",
    plan: dict | None = None,
) -> Path:
    """Loss and accuracy per epoch, train and validation, one above the other on a shared epoch
    axis; above them a timeline of growth events, curriculum stage changes and the start of
    pruning, each also a vertical line through both panels."""
    epochs = [h["epoch"] + 1 for h in history]
    marks = schedule_marks(events, plan)
    fig, axes = plt.subplots(
        3 if marks else 2,
        1,
        figsize=(10, 9 if marks else 7),
        sharex=True,
        gridspec_kw={"height_ratios": [1.1, 2, 2] if marks else [2, 2], "hspace": 0.12},
    )
    ax_loss, ax_acc = axes[-2], axes[-1]
    ax_loss.plot(epochs, [h["train/loss"] for h in history], "o-", color="C0", label="train")
    ax_loss.plot(epochs, [h["val/loss"] for h in history], "o-", color="C1", label="validation")
    ax_acc.plot(epochs, [h["train/acc"] for h in history], "o-", color="C0", label="train")
    ax_acc.plot(epochs, [h["val/acc"] for h in history], "o-", color="C1", label="validation")
    for tier, colour in TIER_COLOURS.items():
        key = f"val/acc_{tier}"
        if any(key in h for h in history):
            values = [h.get(key, float("nan")) for h in history]
            ax_acc.plot(epochs, values, "--", color=colour, label=f"validation, {tier} tier")
    for kind, epoch, _label in marks:
        style = MARKS[kind]
        for ax in (ax_loss, ax_acc):
            # A change before epoch e (0-based) falls between the points of epochs e and e+1.
            ax.axvline(epoch + 0.5, color=style["color"], linestyle=style["linestyle"], linewidth=1)
    ax_loss.set(ylabel="cross-entropy loss (nats)")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (fraction correct)")
    for ax, what in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.grid(alpha=0.3)
        ax.set_xlim(0.5, max(epochs) + 0.5)
        # Beside the axes, never over the curves.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), title=what, title_fontsize=8)
    if marks:
        timeline(axes[0], marks, max(epochs))
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def timeline(ax, marks: list[tuple[str, int, str]], last_epoch: int) -> None:
    """One lane per kind of change; labels in a lane alternate height so neighbours never meet."""
    lanes = {kind: 0 for kind in MARKS}
    for kind, epoch, label in marks:
        style = MARKS[kind]
        x, y = epoch + 0.5, style["lane"]
        ax.plot([x], [y], marker="v", color=style["color"], markersize=6)
        ax.annotate(
            label,
            (x, y),
            xytext=(4, -6 if lanes[kind] % 2 == 0 else 7),
            textcoords="offset points",
            fontsize=7,
            color=style["color"],
            va="center",
        )
        lanes[kind] += 1
    ax.set_xlim(0.5, last_epoch + 0.5)
    ax.set_ylim(-0.6, 2.6)
    ax.set_yticks([MARKS[k]["lane"] for k in MARKS], [f"{k}" for k in MARKS], fontsize=8)
    ax.grid(axis="x", alpha=0.2)
    ax.set_title("what changed before each epoch (the lines below mark the same)", fontsize=9)


LAYER_COLOURS = {
    "conv": "#4c72b0",
    "pool": "#8c8c8c",
    "dropout": "#dd8452",
    "fc": "#55a868",
    "batchnorm": "#c44e52",
    "residual": "#8172b3",
    "convbn": "#64b5cd",
    "resblock": "#937860",
    "gap": "#b0b0b0",
    "head": "#222222",
}


def architecture_evolution(trace: dict, path: Path, title: str = "") -> Path:
    """How the network grew: parameters and FLOPs per epoch, and the layer stack of each stage."""
    epochs = [e["epoch"] + 1 for e in trace["epochs"]]
    stages: list[tuple[int, str]] = []  # (first epoch, spec key) of each distinct architecture
    for e in trace["epochs"]:
        if not stages or stages[-1][1] != e["spec"]:
            stages.append((e["epoch"] + 1, e["spec"]))
    fig = plt.figure(figsize=(13, 5))
    grid = fig.add_gridspec(2, 2, width_ratios=[1, max(1.2, 0.45 * len(stages))], hspace=0.15)
    # Parameters and FLOPs change at the same epochs: on twin axes one line hid the other, so
    # each has its own panel.
    ax_params = fig.add_subplot(grid[0, 0])
    ax_flops = fig.add_subplot(grid[1, 0], sharex=ax_params)
    ax_stack = fig.add_subplot(grid[:, 1])
    ax_params.step(epochs, [e["params"] for e in trace["epochs"]], where="post", color="C0", marker="o")
    ax_flops.step(epochs, [e["flops_forward"] for e in trace["epochs"]], where="post", color="C1", marker="o")
    ax_params.set(ylabel="parameters", title="size of the network per epoch")
    ax_flops.set(xlabel="epoch", ylabel="forward FLOPs / example")
    ax_params.tick_params(axis="x", labelbottom=False)
    for ax in (ax_params, ax_flops):
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    for col, (first_epoch, key) in enumerate(stages):
        layers = [*trace["specs"][key]["layers"], {"id": "head", "type": "head"}]
        # each box names its layer and the width it puts out, so a widened stage shows
        widths = [shape[0] for shape in infer_shapes(ArchSpec.from_dict(trace["specs"][key]))[1:]]
        widths.append(trace["specs"][key]["num_classes"])
        for row, (layer, width) in enumerate(zip(layers, widths)):
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
                col + 0.5,
                -row - 0.5,
                f"{layer['id']} · {width}",
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
        ax_stack.text(col + 0.5, 0.3, f"epoch {first_epoch}", ha="center", fontsize=8)
    depth = max(len(trace["specs"][key]["layers"]) + 1 for _, key in stages)
    ax_stack.set_xlim(0, len(stages))
    ax_stack.set_ylim(-depth - 0.2, 0.8)
    ax_stack.axis("off")
    ax_stack.set_title("layers of each stage (input at the top)")
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


EXAMPLES_PER_CELL = 5


def exit_examples(model, test, tiers, data, path: Path, title: str = "") -> Path:
    """Which test examples leave where: per difficulty tier (rows) and exit (columns), the share
    of the tier that leaves there and a few of those examples with their predicted class
    (red: wrong). ``model`` carries its thresholds; ``test`` is on the model's device."""
    import torch

    with torch.no_grad():
        logits, taken = model.adaptive(test.x)
    taken, predicted, y = taken.cpu(), logits.argmax(1).cpu(), test.y.cpu()
    names = [*model.spec.exit_ids(), "head"]
    rows = [("all", torch.ones(len(y), dtype=torch.bool))]
    if tiers is not None:
        rows = [(name, tiers.cpu() == t) for t, name in enumerate(TIER_COLOURS)]
    images = test.x.cpu().float()[:, 0]  # (N, H, W), first channel
    fig, axes = plt.subplots(
        len(rows),
        len(names),
        figsize=(2.6 * len(names) * EXAMPLES_PER_CELL / 3, 2.1 * len(rows)),
        squeeze=False,
    )
    for r, (tier, mask) in enumerate(rows):
        for c, name in enumerate(names):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            leaving = torch.nonzero(mask & (taken == c)).flatten()
            share = len(leaving) / max(1, int(mask.sum()))
            whole = "the tier" if tiers is not None else "the split"
            ax.set_title(f"{tier} → {name}: {100 * share:.0f}% of {whole}", fontsize=9)
            if c == 0:
                ax.set_ylabel(f"{tier} tier", fontsize=10)
            picks = leaving[:EXAMPLES_PER_CELL]
            if len(picks) == 0:
                ax.text(
                    0.5, 0.5, "none leave here", ha="center", va="center", fontsize=9, transform=ax.transAxes
                )
                continue
            strip = torch.cat([images[i] for i in picks], dim=1)  # (H, k * W)
            ax.imshow(strip.numpy(), cmap="gray_r", aspect="equal")
            width = images.shape[2]
            for j, i in enumerate(picks):
                wrong = bool(predicted[i] != y[i])
                ax.text(
                    (j + 0.5) * width, images.shape[1] + 1, data.classes[int(predicted[i])].split("/")[0],
                    ha="center", va="top", fontsize=6.5, color="tab:red" if wrong else "0.2",
                )  # fmt: skip
    fig.suptitle(
        f"{title or 'Where test examples leave'}\n(the prediction under each example; red: wrong)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

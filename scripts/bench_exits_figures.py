"""scripts/bench_exits.py's figures: test accuracy against FLOPs per exits arm and seed, and
where each threshold choice lands; their paths beside the JSON."""

from __future__ import annotations

from pathlib import Path


def plot_curves(results: dict, path: Path) -> None:
    """Test accuracy against mean FLOPs per example over shared thresholds, per exits arm and
    seed, with each run's calibrated point and its full network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {"dynamic+exits": "tab:blue", "static+exits": "tab:orange"}
    for arm, colour in colours.items():
        for i, seed in enumerate(sorted(results, key=int)):
            curve = results[seed].get(arm, {}).get("curve")
            if not curve:
                continue
            points = sorted(curve["curve"], key=lambda p: p["flops"])
            full = curve["flops_full"] / 1e6
            label = arm if i == 0 else None
            ax.plot([p["flops"] / 1e6 for p in points], [100 * p["acc"] for p in points], "-", color=colour,
                    alpha=0.7, lw=1.2, label=f"{arm}: thresholds 0 to 1" if label else None)  # fmt: skip
            ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], "o", color=colour, ms=7,
                    markeredgecolor="k", label=f"{arm}: calibrated" if label else None)  # fmt: skip
            ax.plot(full, 100 * curve["acc_full"], "s", color=colour, ms=7, markerfacecolor="white",
                    label=f"{arm}: full network" if label else None)  # fmt: skip
    ax.set_xlabel("mean forward FLOPs per test example (millions)")
    ax.set_ylabel("test accuracy (%)")
    # Thresholds near 0 send everything out at the first exit, far below: the view is the
    # region around the full networks, where the trade-off is decided.
    fulls = [
        100 * results[s][a]["curve"]["acc_full"]
        for s in results
        for a in colours
        if results[s].get(a, {}).get("curve")
    ]
    if fulls:
        ax.set_ylim(min(fulls) - 3, max(fulls) + 0.8)
    ax.grid(alpha=0.3)
    seeds = ", ".join(sorted(results, key=int))
    ax.set_title(f"Early exits on Fashion-MNIST test: accuracy against FLOPs (seeds {seeds})", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_calibrations(results: dict, path: Path) -> None:
    """Per exits arm: test accuracy against mean FLOPs over shared thresholds under each
    confidence measure (one line per seed), and where each calibration variant lands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [
        a
        for a in ("dynamic+exits", "static+exits")
        if any(results[s].get(a, {}).get("calibrations") for s in results)
    ]
    fig, axes = plt.subplots(1, len(arms), figsize=(7 * len(arms), 5), squeeze=False)
    colours = {"maxprob": "tab:blue", "entropy": "tab:green"}
    markers = {
        **{"coarse": "s", "fine": "o", "loss0": "^", "bound": "*"},
        **{"tiers": "P", "ptiers": "X", "harddeep": "v"},
    }
    for ax, arm in zip(axes[0], arms):
        labelled: set = set()
        drawn: set = set()
        fulls = []
        for seed in sorted(results, key=int):
            done = results[seed].get(arm, {}).get("calibrations", {})
            for variant, entry in done.items():
                if not entry.get("curve"):
                    continue
                measure, grid = variant.split("-")[:2]
                if variant.endswith(("-loss0", "-bound", "-tiers", "-ptiers", "-harddeep")):
                    grid = variant.rsplit("-", 1)[1]
                curve = entry["curve"]
                fulls.append(100 * curve["acc_full"])
                # each seed's test curve over shared thresholds (every variant on a measure has it)
                if (seed, measure) not in drawn:
                    drawn.add((seed, measure))
                    points = sorted(curve["curve"], key=lambda p: p["flops"])
                    label = f"{measure}: shared thresholds" if measure not in labelled else None
                    labelled.add(measure)
                    ax.plot([p["flops"] / 1e6 for p in points], [100 * p["acc"] for p in points], "-",
                            color=colours[measure], alpha=0.6, lw=1.1, label=label)  # fmt: skip
                label = f"{variant}: calibrated" if variant not in labelled else None
                labelled.add(variant)
                ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], markers[grid],
                        color=colours[measure], ms=12 if grid == "bound" else 7, markeredgecolor="k",
                        label=label)  # fmt: skip
                ax.plot(curve["flops_full"] / 1e6, 100 * curve["acc_full"], "D", color="grey", ms=6,
                        label=None if "full" in labelled else "full network (each seed)")  # fmt: skip
                labelled.add("full")
        if fulls:
            ax.set_ylim(min(fulls) - 2, max(fulls) + 0.6)
        ax.set_xlabel("mean forward FLOPs per test example (millions)")
        ax.set_ylabel("test accuracy (%)")
        seeds = ", ".join(sorted(results, key=int))
        ax.set_title(f"{arm}, Fashion-MNIST test (seeds {seeds})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(
        "Early exits: max softmax vs entropy; coarse shared vs fine per-exit thresholds;\n"
        "o/s: loss on validation within 0.2 points; ^: within 0; *: its 95% upper bound within 0.2;\n"
        "P: that bound on every tier too; X: the loss on every tier; v: the bound, half the hard tier deep",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_path(output: Path, name: str) -> Path:
    """``name``.png beside the JSON; an output named other than the defaults adds its own tail
    (bench_exits_calibration_bound.json: accuracy_vs_flops_calibrations_bound.png), so outputs
    on the same runs never overwrite each other's figures."""
    tail = output.stem.removeprefix("bench_exits").removeprefix("_calibration").lstrip("_")
    return output.with_name(f"{name}_{tail}.png" if tail else f"{name}.png")

"""Figure: where the growing network wins. Each recipe's paired difference, dynamic - static at
the same cost, against that cost, from ``scripts/bench_frontier.py`` outputs.

    .venv/bin/python scripts/plot_growth_advantage.py \\
        --frontier "Fashion-MNIST, the diet and identity start of its time=docs/results/frontier_full.json" \\
        --frontier "Fashion-MNIST, erasing, decay 1e-3=docs/results/frontier_erase_wd_10seeds.json" \\
        --frontier "CIFAR-10, today's default (random start)=\\
docs/results/cifar10/frontier_random_init_unseen/frontier.json" \\
        --output docs/results/growth_advantage.png

The frontier plots show both arms' accuracy; this one shows only what the study asks, the gap
and its 95% interval, so recipes with different accuracy levels share one axis. The x position
is the static run's cost as a multiple of static-12's training FLOPs, and the marker says how
the two runs were matched:

- circle, output (d): both given the same FLOPs budget;
- square, output (f): the grown network at 12 epochs against static at the cheapest budget that
  spent no fewer FLOPs (static at 1/2; the grown run spends about 0.82x of it);
- diamond, output (b): the grown network given each seed's static-12 training seconds, against
  static-12 (equal wall-clock, on the machine that ran them).

Nothing is trained: every figure is read from the files, paired by seed there.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HOW = {
    "budget": ("o", "same FLOPs budget, (d)"),
    "12 epochs": ("s", "grown 12-epoch run vs static at about its cost, (f)"),
    "seconds": ("D", "grown run given static-12's seconds, (b)"),
}


def advantage_points(result: dict) -> list[dict]:
    """Each matched pair in one frontier.json: the static run's cost (multiple of static-12's
    FLOPs), how the pair was matched, the seeds, and dynamic - static in points with its CI."""
    n = len(result["seeds"])
    points = [
        {"cost": float(share), "how": "budget", "n": n, **d["test_points"]}
        for share, d in result["d_at_equal_budget"].items()
    ]
    against = result.get("f_equal_epochs_against_static_at_its_cost")
    if against is not None:
        points.append(
            {"cost": against["static_fraction"], "how": "12 epochs", "n": n, **against["test_points"]}
        )
    if result["b_dynamic_flops_share"] == "same-time":
        points.append(
            {"cost": 1.0, "how": "seconds", "n": n, **result["b_test_points_at_static_12_wallclock"]}
        )
    return sorted(points, key=lambda p: p["cost"])


def plot(lines: list[tuple[str, list[dict]]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.8), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # Recipes side by side around each cost, so their intervals do not hide each other.
    spread = 1.04 ** (len(lines) - 1)
    for i, (label, points) in enumerate(lines):
        shift = 1.04**i / spread**0.5
        colour = colours[i % len(colours)]
        xs = [p["cost"] * shift for p in points]
        ax.plot(xs, [p["mean_diff"] for p in points], color=colour, linewidth=1, alpha=0.5)
        for x, p in zip(xs, points):
            marker = HOW[p["how"]][0]
            low, high = p["mean_diff"] - p["ci_low"], p["ci_high"] - p["mean_diff"]
            ax.errorbar(x, p["mean_diff"], yerr=[[low], [high]], fmt=marker, color=colour, capsize=3)
        seeds = sorted({p["n"] for p in points})
        ax.plot([], [], color=colour, label=f"{label} ({'/'.join(map(str, seeds))} seeds)")
    for marker, text in HOW.values():
        ax.plot([], [], marker, color="grey", label=text)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ticks = sorted({p["cost"] for _, points in lines for p in points})
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("static run's cost, multiple of static-12's training FLOPs")
    ax.set_ylabel("dynamic - static, test accuracy points\n(paired by seed, mean and 95% CI)")
    ax.set_title("Where the growing network wins: above 0")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # off the data
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


@click.command()
@click.option(
    "--frontier",
    "frontiers",
    multiple=True,
    required=True,
    help="LABEL=PATH of a bench_frontier.py frontier.json; one line per option",
)
@click.option("--output", default="reports/growth_advantage.png", show_default=True)
def main(frontiers: tuple[str, ...], output: str) -> None:
    lines = []
    for spec in frontiers:
        label, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            raise click.BadParameter(
                f"{spec!r}: give LABEL=PATH of an existing frontier.json", param_hint="--frontier"
            )
        try:
            result = json.loads(Path(path).read_text())
            if not result.get("complete", True):
                raise click.BadParameter(
                    f"{path}: a benchmark that has not finished", param_hint="--frontier"
                )
            lines.append((label, advantage_points(result)))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            raise click.BadParameter(f"{path}: not a bench_frontier.py frontier.json ({error!r})") from None
        for p in lines[-1][1]:
            print(
                f"{label}: at {p['cost']:g}x ({HOW[p['how']][1]}): {p['mean_diff']:+.2f} points "
                f"(95% CI {p['ci_low']:+.2f} to {p['ci_high']:+.2f}), {p['n']} seeds"
            )
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    plot(lines, Path(output))


if __name__ == "__main__":
    main()

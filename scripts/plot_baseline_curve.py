"""Figure: a static baseline's accuracy against minutes (as airbench reports its runs), one
line per recipe through its run lengths, with the target and the time limit drawn in.

    .venv/bin/python scripts/plot_baseline_curve.py docs/results/resnet/curve.json \\
        --output docs/results/resnet/curve.png

The JSON lists the points: ``{"recipe": ..., "epochs": ..., "minutes": ..., "acc": ...}`` each
(and a ``"split"`` it was measured on; a point's optional ``"label_offset": [dx, dy]``, in
points, moves its label off a neighbour); minutes are a whole run's on the machine the file names.
Nothing is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


@click.command()
@click.argument("points_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--output", required=True, help="the PNG to write")
def main(points_file: str, output: str) -> None:
    doc = json.loads(Path(points_file).read_text())
    fig, ax = plt.subplots(figsize=(8, 6.2), constrained_layout=True)
    recipes = list(dict.fromkeys(p["recipe"] for p in doc["points"]))
    for k, recipe in enumerate(recipes):
        points = sorted((p for p in doc["points"] if p["recipe"] == recipe), key=lambda p: p["minutes"])
        xs, ys = [p["minutes"] for p in points], [100 * p["acc"] for p in points]
        ax.plot(xs, ys, marker="o", color=f"C{k}", label=recipe)
        for p, x, y in zip(points, xs, ys):
            offset = tuple(p.get("label_offset", (5, -12)))  # points; a crowded point's label moves
            ax.annotate(f"{p['epochs']} ep", (x, y), textcoords="offset points", xytext=offset, fontsize=8)
    ax.axhline(100 * doc["target"], color="grey", ls="--", lw=1)
    ax.axvline(doc["limit_minutes"], color="grey", ls=":", lw=1)
    note = {"textcoords": "offset points", "fontsize": 8, "color": "grey"}
    target = 100 * doc["target"]
    ax.annotate(
        f"target {target:.0f}%", (0.01, target), xycoords=("axes fraction", "data"), xytext=(0, 4), **note
    )
    limit = doc["limit_minutes"]
    ax.annotate(f"{limit} min", (limit, 0.96), xycoords=("data", "axes fraction"), xytext=(4, 0), **note)
    ax.set_xlim(0, 1.15 * max(limit, *(p["minutes"] for p in doc["points"])))
    ax.set_ylim(top=max(target, *(100 * p["acc"] for p in doc["points"])) + 0.8)  # room for the labels
    ax.set(xlabel="minutes for the whole run", ylabel=f"{doc['split']} accuracy (%)", title=doc["title"])
    ax.grid(alpha=0.3)
    # below the axes: inside, it hides a line wherever the points fall
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=8)
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

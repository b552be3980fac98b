"""Several levers' frontiers side by side: each lever's dynamic arm against the first lever's
(the reference), against static at about its FLOPs and against static-12, paired by seed.

    .venv/bin/python scripts/bench_frontier_levers.py \\
        docs/results/cifar10/frontier_after/frontier.json \\
        docs/results/cifar10/frontier_growth/frontier.json \\
        --output docs/results/cifar10/diet.md

Each ``frontier.json`` is one lever's (``bench_frontier.py --lever``), or several joined by ``+``
(one lever's seeds trained apart: they must have trained the same options, older files' read as
they ran, ``bench_levers.before``; the first names the lever); the static arms are taken
from the file that trained them (a lever with the same recipe reuses them, so their run ids
agree). The dynamic arm compared is each file's 12-epoch run (``dynamic-12ep``); static at about
its FLOPs is the static arm at ``--static-fraction`` of static-12's FLOPs (0.7: 8 whole epochs
on the default network). Test accuracy through evaluate; differences in points with 95% t
intervals over the seeds both arms have. Prints a Markdown page and writes it to ``--output``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import fmean

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline.report.stats import paired_test
from scripts.bench_common import points
from scripts.bench_levers import DYNAMIC_BEFORE, before

DYNAMIC_ARM = "dynamic-12ep"
TIERS = ("easy", "medium", "hard")


def _arm(runs: list[dict], arm: str, fraction: float | None = None) -> dict[int, dict]:
    """Seed -> run of ``arm`` (at ``fraction`` of static-12's FLOPs, where given)."""
    return {
        r["seed"]: r
        for r in runs
        if r["arm"] == arm and (fraction is None or abs(r["fraction"] - fraction) < 1e-9)
    }


def _paired(a: dict[int, dict], b: dict[int, dict], key=lambda r: r["test_acc"]) -> str:
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return "n/a"
    test = points(paired_test([key(a[s]) for s in seeds], [key(b[s]) for s in seeds]))
    return f"{test['mean_diff']:+.2f} ({test['ci_low']:+.2f} to {test['ci_high']:+.2f}), n={len(seeds)}"


def _trained(entry: dict) -> tuple:
    """What a file's lever trained: its options with the start of its new layers filled in, and
    the dynamic choices older files predate; the name alone where a file has no options."""
    if "options" not in entry:
        return (entry["name"],)
    ran = before(entry)
    recipe, diet, growth, dynamic = entry["options"]
    growth = {**growth, "growth_init": ran["growth_init"]}
    return recipe, diet, growth, dynamic, [ran[k] for k in DYNAMIC_BEFORE]


def load(argument: str) -> dict:
    """One lever's results from ``a.json`` or ``a.json+b.json+...``: the runs of all, the rest of
    the first; files that trained different options, or two runs of one cell, are an error."""
    parts = [json.loads(Path(path).read_text()) for path in argument.split("+")]
    for path, part in zip(argument.split("+")[1:], parts[1:]):
        if _trained(part["lever"]) != _trained(parts[0]["lever"]):
            name = part["lever"]["name"]
            raise click.UsageError(f"{path}: lever {name} trained other options than the first file's")
    cells: dict[tuple, str] = {}
    for run in (r for part in parts for r in part["runs"]):
        cell = (run["seed"], run["arm"], run["fraction"])
        if cells.setdefault(cell, run.get("run_id", "")) != run.get("run_id", ""):
            raise click.UsageError(f"{argument}: seed {cell[0]} {cell[1]} at {cell[2]:g} is in two files")
    return {**parts[0], "runs": [r for part in parts for r in part["runs"]]}


@click.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--static-fraction", default=0.7, show_default=True, help="static at about the dynamic FLOPs")
@click.option("--output", default="", help="write the Markdown page here too")
def main(files: tuple[str, ...], static_fraction: float, output: str) -> None:
    results = [load(f) for f in files]
    static_runs = [r for result in results for r in result["runs"] if r["arm"] == "static"]
    static_12 = _arm(static_runs, "static", 1.0)
    static_at = _arm(static_runs, "static", static_fraction)
    reference = _arm(results[0]["runs"], DYNAMIC_ARM)
    flops_12 = results[0]["static_12_flops"]
    lines = [
        "| lever | seeds | test accuracy, % (mean) | health | growth dip, points (median) "
        f"| FLOPs, x static-12 | − {results[0]['lever']['name']} "
        f"| − static at {static_fraction:g} of its FLOPs | − static-12 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    tier_lines = ["| lever | " + " | ".join(f"{t} − static-12" for t in TIERS) + " |", "|---|---|---|---|"]
    for index, result in enumerate(results):
        dynamic = _arm(result["runs"], DYNAMIC_ARM)
        if not dynamic:
            continue
        name = result["lever"]["name"]
        seeds = sorted(dynamic)
        accs = [100 * dynamic[s]["test_acc"] for s in seeds]
        health = [dynamic[s]["health"] for s in seeds]
        dips = sorted(100 * dynamic[s]["growth_dip"] for s in seeds if dynamic[s]["growth_dip"] is not None)
        dip = f"{dips[len(dips) // 2]:+.1f}" if dips else "n/a"
        flops = fmean(dynamic[s]["flops"] for s in seeds) / flops_12
        ok = f"{health.count('ok')} of {len(health)} ok"
        against_reference = "(reference)" if index == 0 else _paired(dynamic, reference)
        lines.append(
            f"| {name} | {seeds[0]}-{seeds[-1]} | {' / '.join(f'{a:.2f}' for a in accs)} ({fmean(accs):.2f}) "
            f"| {ok} | {dip} | {flops:.3f} | {against_reference} | {_paired(dynamic, static_at)} | "
            f"{_paired(dynamic, static_12)} |"
        )
        tier_lines.append(
            f"| {name} | "
            + " | ".join(_paired(dynamic, static_12, key=lambda r, t=t: r["test_tiers"][t]) for t in TIERS)
            + " |"
        )
    page = "\n".join(
        [*lines, "", "Per difficulty tier, test accuracy against static-12 (points):", "", *tier_lines]
    )
    click.echo(page)
    if output:
        Path(output).write_text(page + "\n")


if __name__ == "__main__":
    main()

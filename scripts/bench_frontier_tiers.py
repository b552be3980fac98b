"""The frontier per difficulty tier: where on the test split each arm and budget gains or loses
against static-12 (scripts/bench_frontier.py's output (e)).

A budget can leave overall accuracy flat while it moves accuracy between tiers: the long
dynamic runs, fed mostly medium and hard examples, gain on the hard tier and lose on the
medium one. The overall paired difference hides that; this table shows it.
"""

from __future__ import annotations

from pipeline.report.stats import paired_test, summary

TIERS = ("easy", "medium", "hard")


def test_by_tier(metrics: dict) -> dict | None:
    """A run's test accuracy per tier and its test loss, as evaluate logged them on the run;
    None when evaluate had no difficulty scores to split the test set by."""
    if not all(f"test/acc_{tier}" in metrics for tier in TIERS):
        return None
    return {**{tier: metrics[f"test/acc_{tier}"] for tier in TIERS}, "loss": metrics["test/loss"]}


def by_tier(runs: list[dict]) -> dict[str, dict]:
    """Each arm and budget whose runs all carry tiers, as do their seeds' static-12 runs: per
    tier the paired difference with static-12 in points (95% CI), and the mean test loss."""
    reference = {r["seed"]: r.get("test_tiers") for r in runs if (r["arm"], r["fraction"]) == ("static", 1.0)}
    cells: dict[tuple[str, float], list[dict]] = {}
    for r in runs:
        cells.setdefault((r["arm"], r["fraction"]), []).append(r)
    table = {}
    for (arm, fraction), rows in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rows = sorted(rows, key=lambda r: r["seed"])
        tiered = all(r.get("test_tiers") and reference.get(r["seed"]) for r in rows)
        if (arm, fraction) == ("static", 1.0) or not tiered:  # not static-12 against itself
            continue
        entry = {"arm": arm, "fraction": fraction, "seeds": [r["seed"] for r in rows]}
        for tier in TIERS:
            test = paired_test(
                [r["test_tiers"][tier] for r in rows], [reference[r["seed"]][tier] for r in rows]
            )
            entry[tier] = {"accuracy": summary([r["test_tiers"][tier] for r in rows])["mean"]} | {
                k: 100 * test[k] for k in ("mean_diff", "ci_low", "ci_high")
            }
        entry["test_loss"] = summary([r["test_tiers"]["loss"] for r in rows])["mean"]
        table[f"{arm}@{fraction:g}"] = entry
    return table


def _label(entry: dict) -> str:
    special = {"dynamic-12ep": "dynamic at 12 epochs", "dynamic-same-time": "dynamic at static-12's seconds"}
    return special.get(entry["arm"], f"{entry['arm']} at {entry['fraction']:g}x static-12's FLOPs")


def print_tiers(table: dict[str, dict]) -> None:
    for entry in table.values():
        parts = ", ".join(
            f"{tier} {entry[tier]['mean_diff']:+.2f} ({entry[tier]['ci_low']:+.2f} to "
            f"{entry[tier]['ci_high']:+.2f})"
            for tier in TIERS
        )
        print(
            f"(e) {_label(entry)}, against static-12 per tier, points: {parts}; "
            f"test loss {entry['test_loss']:.3f}"
        )

"""The study's report, read from stored runs, gives the measurements page's Fashion-MNIST table
for seeds 160-164 digit for digit: the frontier file keeps every run's test accuracy, seconds
that trained and FLOPs, and those runs are the study's cells under other names."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pipeline.study import grid, report

FRONTIER = Path(__file__).resolve().parents[1] / "docs" / "results" / "seconds_full_fresh" / "frontier.json"

# The benchmark's arm and share of static-12's FLOPs -> the study's cell (arm, budget)
CELLS = {
    ("static", 1.0): ("static", "epochs"),
    ("static", 0.25): ("static", "flops:0.25"),
    ("dynamic-12ep", 1.0): ("dynamic", "epochs"),
    ("dynamic", 0.25): ("dynamic", "flops:0.25"),
    ("dynamic-same-time", 1.0): ("dynamic", "seconds"),
}


def stored_rows() -> pd.DataFrame:
    rows = []
    for run in json.loads(FRONTIER.read_text())["runs"]:
        arm, budget = CELLS[(run["arm"], run["fraction"])]
        rows.append(
            {
                "cell": f"{arm}@{budget}#{run['seed']}",
                "arm": arm,
                "budget": budget,
                "seed": run["seed"],
                "run_id": run["run_id"],
                "acc": run["test_acc"],
                "trained_s": run["train_s"],
                "flops": run["flops"],
                "health": run["health"],
                **{f"acc_{tier}": run["test_tiers"][tier] for tier in ("easy", "medium", "hard")},
            }
        )
    return pd.DataFrame(rows)


def test_the_study_report_reproduces_the_fashion_mnist_table_of_seeds_160_to_164():
    arms = grid.parse_arms("static,dynamic")
    budgets = tuple(grid.parse_budget(b) for b in ("epochs", "flops:0.25", "seconds"))
    rows = stored_rows()
    assert len(rows) == 25 and set(rows.seed) == {160, 161, 162, 163, 164}
    table = report.compare(rows, grid.comparisons(arms, budgets), "exploratory").set_index("comparison")

    def said(name: str) -> tuple[str, str, str, str, str]:
        line = table.loc[name]
        return (
            f"{line.diff_points:+.2f}",
            f"{line.ci_low_points:+.2f}",
            f"{line.ci_high_points:+.2f}",
            f"{line.seconds_ratio:.2f}",
            f"{line.flops_ratio:.2f}",
        )

    # docs/measurements.md, "Equal seconds on full Fashion-MNIST": points (95% CI), seconds, FLOPs
    assert said("dynamic@flops:0.25 vs static@flops:0.25") == ("+0.37", "+0.15", "+0.59", "0.95", "0.86")
    assert said("dynamic@epochs vs static@epochs") == ("-0.00", "-0.33", "+0.33", "0.67", "0.61")
    assert said("dynamic@seconds vs static@epochs") == ("+0.16", "-0.02", "+0.34", "0.99", "0.89")
    # five of five seeds ahead at a quarter budget; Holm over the three lines keeps it below 0.05
    quarter = table.loc["dynamic@flops:0.25 vs static@flops:0.25"]
    assert quarter.ahead == 5 and quarter.p_holm < 0.05 and quarter.verdict == "arm ahead"
    assert report.health(rows)["dynamic@seconds"] == {"ok": 4, "dipped": 1}

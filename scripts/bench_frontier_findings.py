"""scripts/bench_frontier.py's printed findings, (a) to (f), read from its frontier.json."""

from __future__ import annotations

import math

from scripts.bench_frontier_tiers import print_tiers


def health_counts(runs: list[dict]) -> dict[str, dict[str, int]]:
    """Per arm and budget, how many runs ended with each health verdict (collapsed, dipped, ok;
    runs trained before verdicts existed count as "unjudged"): said before any mean."""
    counts: dict[str, dict[str, int]] = {}
    for r in runs:
        cell = counts.setdefault(f"{r['arm']}@{r['fraction']:g}", {})
        verdict = r.get("health") or "unjudged"
        cell[verdict] = cell.get(verdict, 0) + 1
    return counts


def print_findings(result: dict) -> None:
    """One line per finding; the JSON holds each one's full statistics. Health first: a mean
    over a collapsed run's seed is no result."""
    if "health" in result:
        cells = [
            f"{cell}: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
            for cell, counts in result["health"].items()
        ]
        print("health (runs per verdict, before any mean): " + "; ".join(cells))
    target = next(p for p in result["frontier"]["static"] if p["fraction"] == 1.0)["test_acc"]["mean"]
    at_share = result["b_dynamic_flops_share"]
    b, c = result["b_test_points_at_static_12_wallclock"], result["c_test_points_at_equal_epochs"]
    if math.isfinite(result["a_wallclock_ratio_to_match_static_12"]):
        print(
            f"(a) dynamic reaches static-12's mean test accuracy ({100 * target:.2f}%) at "
            f"{result['a_wallclock_ratio_to_match_static_12']:.2f}x its wall-clock "
            f"({result['a_flops_ratio_to_match_static_12']:.2f}x its FLOPs)"
        )
    else:
        print(
            f"(a) dynamic does not reach static-12's mean test accuracy ({100 * target:.2f}%) at any budget"
        )
    if b is None:
        print("(b) not measured: no dynamic run near static-12's cost (--no-same-time, no dynamic budgets)")
    else:
        how = "its own seconds" if at_share == "same-time" else f"{at_share:g}x its FLOPs"
        print(
            f"(b) at static-12's wall-clock (dynamic at {how}, {result['b_wallclock_ratio']['mean']:.2f}x "
            f"its time): dynamic - static = {b['mean_diff']:+.2f} points (95% CI {b['ci_low']:+.2f} to "
            f"{b['ci_high']:+.2f})"
        )
    print(
        f"(c) at 12 epochs: dynamic - static = {c['mean_diff']:+.2f} points "
        f"(95% CI {c['ci_low']:+.2f} to {c['ci_high']:+.2f}) in "
        f"{result['c_wallclock_ratio_at_equal_epochs']['mean']:.2f}x the wall-clock"
    )
    for share, v in result["d_at_equal_budget"].items():
        d = v["test_points"]
        print(
            f"(d) at {float(share):g}x static-12's FLOPs: dynamic - static = {d['mean_diff']:+.2f} points "
            f"(95% CI {d['ci_low']:+.2f} to {d['ci_high']:+.2f}) in {v['wallclock_ratio']['mean']:.2f}x "
            f"static's wall-clock and {v['flops_ratio']['mean']:.2f}x its FLOPs at that budget"
        )
    print_tiers(result["e_by_tier_against_static_12"])
    against_cost = result["f_equal_epochs_against_static_at_its_cost"]
    if against_cost is None:
        print("(f) not measured: no static budget below static-12's with the 12-epoch dynamic run's FLOPs")
    else:
        diff, share = against_cost["test_points"], against_cost["static_fraction"]
        print(
            f"(f) dynamic at 12 epochs against static at {share:g}x static-12's FLOPs: "
            f"{diff['mean_diff']:+.2f} points (95% CI {diff['ci_low']:+.2f} to {diff['ci_high']:+.2f}) in "
            f"{against_cost['wallclock_ratio']['mean']:.2f}x static's wall-clock and "
            f"{against_cost['flops_ratio']['mean']:.2f}x its FLOPs"
        )

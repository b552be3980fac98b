"""The numbers of a report: each group against its static baseline, metric by metric, paired by
seed (``comparison.csv``, ``paired.csv``), and each curriculum against its random-order control.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pipeline.report.groups import Group
from pipeline.report.metrics import METRICS, TIERS, TIME_TO_TARGET, fmt
from pipeline.report.stats import holm, paired_test, summary

# fmt: off
COMPARISON_COLUMNS = [
    "group", "setting", "variant", "entry_point", "final_spec_id", "metric", "n", "mean", "std", "ci_low",
    "ci_high", "baseline", "pairing", "n_pairs", "mean_diff", "diff_ci_low", "diff_ci_high", "t_stat", "p_t",
    "p_wilcoxon", "p_holm", "within_noise", "ratio_to_baseline", "paired_ratio", "ratio_ci_low",
    "ratio_ci_high", "target_acc", "note",
]
PAIRED_COLUMNS = [
    "group", "baseline", "metric", "seed", "run_ids", "baseline_run_ids", "value", "baseline_value", "diff",
]
# fmt: on


def comparison_rows(groups: list[Group]) -> tuple[list[dict], list[dict]]:
    """The rows of ``comparison.csv`` (per group and metric: summary over seeds and the paired
    test against the baseline) and of ``paired.csv`` (per matched seed: both values)."""
    comparison, paired = [], []
    for g in groups:
        for metric in METRICS:
            if metric == TIME_TO_TARGET:
                if not (math.isfinite(g.target) and g.curves):
                    continue  # no target (no baseline) or no history to read it from
            elif not g.has(metric):
                continue  # e.g. a tier this variant never logged
            values = g.per_unit(metric)
            row = {
                "group": g.label,
                "setting": g.setting_label,
                "variant": g.variant,
                "entry_point": g.entry_point,
                "final_spec_id": g.spec_id,
                "metric": metric,
                **summary(values),
                "baseline": "",
                "pairing": "",
                "n_pairs": 0,
                "target_acc": math.nan,
                "note": "",
            }
            notes = []
            if metric == TIME_TO_TARGET:
                row["target_acc"] = g.target
                notes.append(
                    f"target {fmt('acc', g.target)} ({g.target_note}); reached by "
                    f"{int(values.notna().sum())} of {len(values)} seeds"
                )
            if g.is_baseline:
                notes.append("baseline")
            elif g.baseline is None:
                notes.append(f"no matched static baseline: {g.unmatched}")
            else:
                base_values = g.baseline.per_unit(metric)
                both = _by_seed(values, base_values)
                test = paired_test(both["a"], both["b"])
                base_mean = summary(base_values)["mean"]
                row.update(
                    baseline=g.baseline.label,
                    pairing=_pairing(g),
                    n_pairs=test["n"],
                    mean_diff=test["mean_diff"],
                    diff_ci_low=test["ci_low"],
                    diff_ci_high=test["ci_high"],
                    t_stat=test["t_stat"],
                    p_t=test["p_t"],
                    p_wilcoxon=test["p_wilcoxon"],
                    within_noise=test["within_noise"],
                    ratio_to_baseline=row["mean"] / base_mean if base_mean else math.nan,
                    **_paired_ratio(both["a"], both["b"]),
                )
                if test["n"] < 2:
                    notes.append(f"{test['n']} matched seed(s): no test possible with n < 2")
                for unit, (a, b) in both.iterrows():
                    paired.append(
                        {
                            "group": g.label,
                            "baseline": g.baseline.label,
                            "metric": metric,
                            "seed": int(unit.split()[1]),
                            "run_ids": _run_ids(g, unit),
                            "baseline_run_ids": _run_ids(g.baseline, unit),
                            "value": a,
                            "baseline_value": b,
                            "diff": a - b,
                        }
                    )
            row["note"] = "; ".join(notes)
            comparison.append(row)
    _correct_accuracy_tests(comparison)
    return comparison, paired


def _correct_accuracy_tests(comparison: list[dict]) -> None:
    """``p_holm``: each test-accuracy comparison's paired t p, Holm-adjusted over every such
    comparison of the report (all variants, overall and per tier): a report of three variants
    and four tiers makes twelve tests, and one of them at p = 0.02 is no finding."""
    family = [
        r for r in comparison
        if r["metric"] in TIERS and r["baseline"] and r["n_pairs"] >= 2
        and r["diff_ci_low"] != r["diff_ci_high"]  # a deterministic difference is no test
    ]  # fmt: skip
    for row, adjusted in zip(family, holm([r["p_t"] for r in family])):
        row["p_holm"] = adjusted
    for row in comparison:
        row.setdefault("p_holm", math.nan)


def _pairing(g: Group) -> str:
    """How ``g`` and its baseline are matched: given its runs' cost ("equal cost (seconds)"),
    the same budget ("equal budget (flops)"), or the same epochs ("equal length")."""
    if g.equal_cost:
        return f"equal cost ({g.equal_cost})"
    return f"equal budget ({g.budget_unit})" if g.budget_unit else "equal length"


def _by_seed(a: pd.Series, b: pd.Series) -> pd.DataFrame:
    """``a`` and ``b`` (per unit) side by side as columns a and b, on the seeds where both have a
    value: a run without a seed param has its own unit and never pairs."""
    both = pd.concat({"a": a, "b": b}, axis=1, join="inner").dropna()
    return both.loc[np.array([str(unit).startswith("seed ") for unit in both.index], dtype=bool)]


def _paired_ratio(a: pd.Series, b: pd.Series) -> dict[str, float]:
    """Geometric mean of the per-seed ratios a/b with its 95% interval (a t interval on the
    log ratios), for costs: a run that takes 0.5x the time on one seed and 2x on another is
    1x on average, not 1.25x. NaN where a value is not positive."""
    ratios = (a / b).to_numpy(dtype=float)
    if not len(ratios) or not np.all(np.isfinite(ratios) & (ratios > 0)):
        return {"paired_ratio": math.nan, "ratio_ci_low": math.nan, "ratio_ci_high": math.nan}
    logs = summary(np.log(ratios))
    return {
        "paired_ratio": math.exp(logs["mean"]),
        "ratio_ci_low": math.exp(logs["ci_low"]),
        "ratio_ci_high": math.exp(logs["ci_high"]),
    }


def _run_ids(g: Group, unit: str) -> str:
    return " ".join(g.runs.loc[g.runs["unit"] == unit, "run_id"])


# The random-order control of a curriculum variant carries this in its variant name
# (``dynamic-default+tiers-random+prune0.3`` mirrors ``dynamic-default+tiers+prune0.3``).
RANDOM_ORDER = "-random"


def ordering_rows(groups: list[Group]) -> list[dict]:
    """Each curriculum variant against its random-order control in the same setting (same
    entry point and final architecture), paired by seed on test accuracy: how much of what the
    curriculum does is its ordering rather than its data diet."""
    rows = []
    for control in groups:
        if RANDOM_ORDER not in control.variant:
            continue
        twin = control.variant.replace(RANDOM_ORDER, "", 1)
        for g in groups:
            same = (g.setting, g.entry_point, g.spec_key) == (
                control.setting,
                control.entry_point,
                control.spec_key,
            )
            if not same or g.variant != twin or not (g.has("test/acc") and control.has("test/acc")):
                continue
            both = _by_seed(g.per_unit("test/acc"), control.per_unit("test/acc"))
            test = paired_test(both["a"], both["b"])
            rows.append(
                {
                    "group": g.label,
                    "control": control.label,
                    "n_pairs": test["n"],
                    "mean_diff": test["mean_diff"],
                    "diff_ci_low": test["ci_low"],
                    "diff_ci_high": test["ci_high"],
                    "p_t": test["p_t"],
                }
            )
    return rows

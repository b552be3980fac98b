"""The words of a report: the Conclusion (the answer first), the verdict on each paired
difference, and how a difference, a ratio or a mean with its interval is said."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from pipeline.report.groups import Group
from pipeline.report.metrics import COST_METRICS, METRICS, TIERS, fmt
from pipeline.report.stats import ALPHA


def health_lines(groups: Sequence[Group]) -> list[str]:
    """How many seeds of each variant collapsed or dipped (``pipeline/training/health.py``):
    said before any mean, since a mean over a dead network's seed is no result. Empty when no
    run carries a health verdict (runs from before verdicts were logged)."""
    if not any(g.runs.get("health", pd.Series(dtype=str)).fillna("").ne("").any() for g in groups):
        return []
    parts = []
    for g in groups:
        seeds = g.runs["unit"].nunique()
        judged = [(v, g.units_judged(v)) for v in ("collapsed", "diverged", "dipped")]
        said = [
            f"{len(units)} of {seeds} {_noun(seeds)} {v} ({', '.join(units)})" for v, units in judged if units
        ]
        if said:
            parts.append(f"{g.label}: " + ", ".join(said))
    if not parts:
        return ["**Health**: every run learned; none collapsed or dipped by more than its --dip-margin."]
    marked = any(g.health_caveat() for g in groups)
    counted = " A collapsed seed still counts in its variant's means (marked ⚠ there)." if marked else ""
    return ["**Health**, before any mean: " + "; ".join(parts) + "." + counted + " Every other run was ok."]


def duplicate_lines(groups: Sequence[Group]) -> list[str]:
    """A caution for each group holding several runs of one seed in one configuration: they
    are averaged into that seed's value, which the reader must be told (they may be reruns, or
    runs that differ in an option the report does not know)."""
    lines = []
    for g in groups:
        counts = g.runs.groupby("unit")["run_id"].apply(list)
        repeated = {unit: ids for unit, ids in counts.items() if len(ids) > 1}
        if repeated:
            said = "; ".join(f"{unit}: {', '.join(ids)}" for unit, ids in repeated.items())
            lines.append(
                f"Caution: {g.label} has several runs of one seed ({said}); each seed's runs are "
                "averaged into one value, so n counts seeds, not runs."
            )
    return lines


def _noun(seeds: int) -> str:
    return "seed" if seeds == 1 else "seeds"


def conclusion(
    comp: pd.DataFrame, ordering: Sequence[dict] = (), caveats: dict[str, str] | None = None
) -> list[str]:
    """The answer, a few lines: each variant against its static twin (cost ratios and accuracy
    difference), each curriculum against its random-order control, and whether the runs fall
    into settings that cannot be compared. ``caveats`` (group label -> text, e.g. a collapsed
    seed in its mean) are said beside that group's numbers. Per tier and how to read the
    verdicts follow in their own sections (``tier_lines``, ``method_lines``)."""
    lines = _answer(comp, caveats or {}) + _ordering_answer(list(ordering))
    settings = _settings(comp)
    if len(settings) > 1:
        lines.append(
            f"The runs fall into {len(settings)} settings that cannot be compared with each other "
            f"({'; '.join(settings)}): each is summarised on its own, and a variant is paired only "
            "with the static baseline of its own setting (or, given a static run's cost as its budget, "
            "with those static runs, at equal cost)."
        )
    if not lines and not tier_lines(comp):
        lines.append("No run logged test accuracy: run the evaluate step's test pass first.")
    return lines


def _settings(comp: pd.DataFrame) -> list[str]:
    return sorted(comp["setting"].fillna("").unique()) if "setting" in comp.columns else [""]


def tier_lines(comp: pd.DataFrame, caveats: dict[str, str] | None = None) -> list[str]:
    """Per setting and tier: which variant has the best mean test accuracy, and whether that is
    more than noise after Holm's correction (``verdict``)."""
    caveats, lines = caveats or {}, []
    for setting, metric in [(s, m) for s in _settings(comp) for m in TIERS]:
        rows = comp[comp["metric"] == metric]
        if "setting" in comp.columns:
            rows = rows[rows["setting"].fillna("") == setting]
        if rows.empty:
            continue
        best = rows.loc[rows["mean"].idxmax()]
        tier = TIERS[metric] + (f", {setting}" if setting else "")
        caveat = f" (⚠ {caveats[best['group']]})" if best["group"] in caveats else ""
        head = f"**{tier}**: best mean test accuracy is {best['group']} at {fmt('acc', best['mean'])}{caveat}"
        if best["note"] == "baseline":
            if (rows["baseline"] == best["group"]).any():
                lines.append(f"{head}, the static baseline itself: no variant beats it.")
            else:
                lines.append(f"{head}; no variant is compared with it.")
        elif not best["baseline"]:
            lines.append(f"{head}; it has no matched static baseline, so no paired test is possible.")
        else:
            lines.append(f"{head}, {diff_phrase(best)} against {best['baseline']}: {verdict(best)}.")
    return lines


def method_lines(comp: pd.DataFrame) -> list[str]:
    """How the verdicts are reached: pairing, the interval, Holm's correction, Wilcoxon's floor."""
    lines = [
        "Each variant is compared with the static network of the same final architecture, paired by "
        "seed; a difference is within noise when the 95% CI of the paired difference includes 0, and "
        "a test-accuracy difference is called significant only when, besides, its paired t p stays "
        "below 0.05 after Holm's correction over all of the report's test-accuracy comparisons."
    ]
    paired = comp[comp["baseline"] != ""]
    if paired["n_pairs"].between(2, 5).any():
        lines.append(
            "With fewer than 6 paired seeds the two-sided Wilcoxon test cannot reach p < 0.05 however "
            "large the effect, so the t interval decides here; more seeds would make both tests usable."
        )
    return lines


# The two axes the study asks about, in the order the answer gives them: cost as a ratio to
# the matched static baseline (cheaper below 1), accuracy as a difference at equal epochs.
ANSWER_COSTS = {"time/trained_s": ("seconds that trained", "faster", "slower"),
                "time/total_s": ("training wall-clock", "faster", "slower"),
                "train/flops_cumulative": ("training FLOPs", "cheaper", "costlier")}  # fmt: skip


def _paired(comp: pd.DataFrame):
    """Each variant with a matched static baseline and its comparison rows by metric, the
    wall-clock's left out where the seconds that trained stand for it (validation and logging
    are not the method's cost: pipeline/budget/timing.py)."""
    paired = comp[comp["baseline"].fillna("") != ""]
    for group in dict.fromkeys(paired["group"]):
        rows = {r["metric"]: r for _, r in paired[paired["group"] == group].iterrows()}
        if "time/trained_s" in rows:
            rows.pop("time/total_s", None)
        yield group, rows


def _answer(comp: pd.DataFrame, caveats: dict[str, str]) -> list[str]:
    """One line per variant with a matched static baseline: wall-clock and FLOPs ratios and the
    test accuracy difference (at equal training length, at an equal budget of FLOPs or seconds,
    or at equal cost for runs whose budget was their static twin's cost), each with its 95% CI
    and a verdict."""
    lines = []
    for group, rows in _paired(comp):
        if "test/acc" not in rows and not set(ANSWER_COSTS) & set(rows):
            continue
        n = max(int(r["n_pairs"]) for r in rows.values())
        base = next(iter(rows.values()))["baseline"]
        parts = []
        for metric, (title, good, bad) in ANSWER_COSTS.items():
            if metric in rows:
                parts.append(f"{title} {_ratio_phrase(rows[metric], good, bad)}")
        if "test/acc" in rows:
            r = rows["test/acc"]
            at = _pairing_phrase(str(r.get("pairing", "")))
            text, said = _acc_difference(r, "better", "worse", "within noise")
            parts.append(f"test accuracy {text}{': ' + said if said else ''} {at}")
        for label in (group, base):
            if label in caveats:
                parts.append(f"⚠ {label}'s mean {caveats[label]}")
        lines.append(f"**{group}** vs {base} ({_seeds(n)} paired): " + "; ".join(parts) + ".")
    return lines


# A ratio whose interval spans more than this factor says nothing about which arm is cheaper.
NOISY_RATIO_SPAN = 4.0
ANSWER_HEAD = ["variant", "against", "seeds", "time", "FLOPs", "test accuracy", "matched on", "verdict"]


def answer_table(comp: pd.DataFrame, caveats: dict[str, str]) -> list[list[str]]:
    """The answer as one row per variant with a matched static baseline (``ANSWER_HEAD``): the
    time ratio (seconds that trained where logged, else wall-clock) and FLOPs ratio with their
    intervals, the paired test-accuracy difference, and one word for the accuracy: better,
    worse, tie (the interval holds 0, or Holm's correction over the report's accuracy tests
    leaves the difference within noise) or ? (one seed: no interval)."""
    table = []
    for group, rows in _paired(comp):
        if "test/acc" not in rows:
            continue
        acc = rows["test/acc"]
        time_row = rows.get("time/trained_s", rows.get("time/total_s"))
        text, said = _acc_difference(acc, "better", "worse", "tie")
        marked = " ⚠" if group in caveats or acc["baseline"] in caveats else ""
        at = str(acc.get("pairing", "")) or "equal training length"
        table.append(
            [
                group,
                str(acc["baseline"]),
                str(max(int(r["n_pairs"]) for r in rows.values())),
                _ratio_cell(time_row),
                _ratio_cell(rows.get("train/flops_cumulative")),
                text + marked,
                at,
                said or "?",
            ]
        )
    return table


def _ratio_cell(row: pd.Series | None) -> str:
    """A paired ratio and its interval, or what it is when the interval is too wide to read."""
    if row is None or not np.isfinite(row["paired_ratio"]):
        return "n/a"
    ratio, lo, hi = row["paired_ratio"], row["ratio_ci_low"], row["ratio_ci_high"]
    if row["n_pairs"] < 2 or not np.isfinite(lo):
        return f"{ratio:.2f}×"
    if lo > 0 and hi / lo > NOISY_RATIO_SPAN:
        return f"too noisy to read ({lo:.2f}-{hi:.2f})"
    return f"{ratio:.2f}× ({lo:.2f}-{hi:.2f})"


def _pairing_phrase(pairing: str) -> str:
    """``comparison.csv``'s pairing as the answer says it."""
    unit = pairing.partition("(")[2].removesuffix(")")
    if pairing.startswith("equal cost"):
        return f"at equal cost (each run was given its seed's static run's training {unit})"
    if pairing.startswith("equal budget"):
        return f"at an equal budget (both given the same training {'FLOPs' if unit == 'flops' else unit})"
    return "at equal training length"


def _ordering_answer(rows: list[dict]) -> list[str]:
    """One line per curriculum against its random-order control: the paired test-accuracy
    difference with its 95% CI, and what the ordering does."""
    lines = []
    for r in rows:
        text, said = _acc_difference(
            r,
            "the curriculum's ordering helps",
            "the ordering hurts",
            "the ordering's effect is within seed-to-seed variation",
        )
        lines.append(
            f"**{r['group']}** vs its random-order control {r['control']} ({_seeds(r['n_pairs'])} paired): "
            f"test accuracy {text}: {said or 'no test possible'}."
        )
    return lines


def _ratio_phrase(row: pd.Series, good: str, bad: str) -> str:
    ratio = row["paired_ratio"]
    if not np.isfinite(ratio):
        return "n/a"
    if row["n_pairs"] < 2 or not np.isfinite(row["ratio_ci_low"]):
        return f"{ratio:.2f}× (no interval with {_seeds(int(row['n_pairs']))})"
    lo, hi = row["ratio_ci_low"], row["ratio_ci_high"]
    said = good if hi < 1 else bad if lo > 1 else "within noise"
    return f"{ratio:.2f}× (95% CI {lo:.2f}-{hi:.2f}): {said}"


def _acc_difference(row: pd.Series, better: str, worse: str, within: str) -> tuple[str, str]:
    """The paired test-accuracy difference with its 95% CI, and which of ``better``, ``worse``
    and ``within`` the interval says, Holm's correction allowing ("" with fewer than 2 pairs:
    there is no interval)."""
    diff = fmt("acc", row["mean_diff"], True)
    if row["n_pairs"] < 2:
        return f"{diff} (no interval with {_seeds(int(row['n_pairs']))})", ""
    lo, hi = fmt("acc", row["diff_ci_low"], True), fmt("acc", row["diff_ci_high"], True)
    said = better if row["diff_ci_low"] > 0 else worse if row["diff_ci_high"] < 0 else within
    if said != within and _corrected_away(row):
        # the same verdict as the per-variant and per-tier lines: Holm's correction decides
        return f"{diff} (95% CI {lo} to {hi}; Holm-adjusted p = {_p(row['p_holm'])})", within
    return f"{diff} (95% CI {lo} to {hi})", said


def comparison_bullets(comp: pd.DataFrame, groups: list[Group]) -> list[str]:
    bullets = []
    for g in groups:
        if g.is_baseline:
            continue
        if g.baseline is None:
            why = f"no matched static baseline ({g.unmatched})"
            bullets.append(f"{g.label}: {why}; only its own means are shown.")
            continue
        rows = {r["metric"]: r for _, r in comp[comp["group"] == g.label].iterrows()}
        n = max(int(r["n_pairs"]) for r in rows.values())
        head = f"{g.label} vs {g.baseline.label} ({_seeds(n)} paired): "
        shown = [rows[m] for m in [*TIERS, *COST_METRICS] if m in rows]
        if n < 2:
            diffs = "; ".join(f"{METRICS[r['metric']].title} {diff_phrase(r)}" for r in shown)
            bullets.append(f"{head}no test possible, a test needs n ≥ 2 seeds; the differences: {diffs}.")
            continue
        parts = []
        for r in shown:
            fewer = f" on {_seeds(r['n_pairs'])}" if r["n_pairs"] != n else ""
            parts.append(f"{METRICS[r['metric']].title} {diff_phrase(r, full=False)}{fewer}: {verdict(r)}")
        bullets.append(head + "; ".join(parts) + ".")
    return bullets


def verdict(row: pd.Series) -> str:
    """significant / within noise / why there is no test, for one comparison row."""
    if row["note"] == "baseline":
        return "baseline"
    if not row["baseline"]:
        return "no matched static baseline"
    if row["n_pairs"] < 2:
        return f"no test possible: {_seeds(row['n_pairs'])} matched, a test needs n ≥ 2"
    if row["diff_ci_low"] == 0.0 == row["diff_ci_high"]:
        return "no difference: identical on every seed"
    if _deterministic(row):
        return "deterministic: the same difference on every seed, no test needed"
    if row["within_noise"]:
        return "within noise (the 95% CI of the paired difference includes 0)"
    better = (row["mean_diff"] > 0) == METRICS[row["metric"]].higher_is_better
    said = f"{row['group']} is {'better' if better else 'worse'}"
    adjusted = row.get("p_holm", math.nan)
    if row["metric"] in TIERS and math.isfinite(adjusted):
        holm = f"Holm's correction over the report's test-accuracy tests (adjusted p = {_p(adjusted)})"
        if _corrected_away(row):
            return f"not significant after {holm}"
        return f"significant after {holm}: {said}"
    return f"significant: {said}"


def _corrected_away(row: pd.Series) -> bool:
    """A test-accuracy difference that Holm's correction over the report leaves within noise."""
    adjusted = row.get("p_holm", math.nan)
    return math.isfinite(adjusted) and adjusted >= ALPHA


def _deterministic(row: pd.Series) -> bool:
    """A paired difference with no spread (FLOPs, parameters): a p-value of 0 and a zero-width
    interval would dress a fixed quantity up as a statistical finding."""
    return bool(row["n_pairs"] >= 2 and row["diff_ci_low"] == row["diff_ci_high"])


def p_cell(row: pd.Series, key: str) -> str:
    return "— (deterministic)" if _deterministic(row) else _p(row[key])


def diff_phrase(row: pd.Series, full: bool = True) -> str:
    """The paired difference with its interval; ``full`` adds the Wilcoxon p-value and n."""
    kind = METRICS[row["metric"]].kind
    has_ratio = kind != "acc" and np.isfinite(row["ratio_to_baseline"])
    ratio = f"{row['ratio_to_baseline']:.2f}× the baseline, " if has_ratio else ""
    if row["n_pairs"] < 2:  # no interval and no test exist: just the one difference
        return f"{ratio}{fmt(kind, row['mean_diff'], True)}"
    if _deterministic(row):
        return f"{ratio}{fmt(kind, row['mean_diff'], True)} on every seed (deterministic)"
    lo, hi = fmt(kind, row["diff_ci_low"], True), fmt(kind, row["diff_ci_high"], True)
    extra = f", Wilcoxon p = {_p(row['p_wilcoxon'])}, n = {_seeds(row['n_pairs'])}" if full else ""
    text = f"{fmt(kind, row['mean_diff'], True)} (95% CI {lo} to {hi}, paired t p = {_p(row['p_t'])}{extra})"
    return ratio + text


def interval(kind: str, row: pd.Series) -> str:
    if row is None:
        return "n/a"
    text = fmt(kind, row["mean"])
    if np.isfinite(row["ci_low"]):
        text += f" [{fmt(kind, row['ci_low'])}, {fmt(kind, row['ci_high'])}]"
    return f"{text} (n={row['n']})"


def _p(value: float) -> str:
    return f"{value:.3g}" if np.isfinite(value) else "n/a"


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"

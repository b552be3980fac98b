"""A study's report from its cells' rows: per comparison the paired difference with its
interval, Holm's correction across the study, the label (confirmatory or exploratory), FLOPs
and seconds as spent, health counts, per tier, where each growing arm reaches static's
accuracy, and the cost-frontier figure (``figure``). Pure: rows in, tables and files out; no MLflow.

A row is one finished cell: ``cell, arm, budget, seed, run_id, acc`` (the phase's metric:
validation or test accuracy), ``trained_s``, ``run_s`` (the whole run), ``flops``, ``epochs``,
``health``, ``dip``, ``acc_<tier>`` per difficulty tier and, where known, the ``host`` and
``boot`` it trained on and the ``code`` version it trained with.

A joined report may hold reference runs kept for some cells alone (pipeline/study/joined.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from pipeline.data.tiers import TIER_NAMES
from pipeline.report.stats import ALPHA, holm, paired_test, summary
from pipeline.study.figure import figure, seeds_shown
from pipeline.study.grid import REFERENCE_ARM, REFERENCE_BUDGET, Cell, Comparison
from pipeline.study.joined import counted, joined_lines, kept_references


def _paired(rows: pd.DataFrame, c: Comparison, column: str) -> tuple[list, list, list]:
    """The seeds both of ``c``'s runs finished, and each one's ``column``; a cell set against
    the reference run is paired with the one kept for it, where one is."""
    cells = counted(rows)
    a = cells[(cells.arm == c.arm) & (cells.budget == c.budget.label)].set_index("seed")
    b = cells[(cells.arm == c.against_arm) & (cells.budget == c.against.label)].set_index("seed")
    against = {s: b.loc[s, column] for s in b.index}
    if (c.against_arm, c.against.label) == (REFERENCE_ARM, REFERENCE_BUDGET):
        kept = kept_references(rows)
        if kept:  # rows from outside a join may carry no cell names, and need none
            against |= {s: rows.loc[kept[cell], column] for s, cell in a["cell"].items() if cell in kept}
    seeds = sorted(set(a.index) & set(against))
    return seeds, [a.loc[s, column] for s in seeds], [against[s] for s in seeds]


def _ratio(rows: pd.DataFrame, c: Comparison, column: str) -> dict:
    _, a, b = _paired(rows, c, column)
    return summary([x / y for x, y in zip(a, b) if y])


# A table's columns before its per-tier ones: a baseline alone has no comparison, and its
# comparisons.csv keeps the header so that it reads back as an empty table.
COMPARISON_COLUMNS = [
    "comparison", "arm", "budget", "against", "seeds", "n", "diff_points", "ci_low_points",
    "ci_high_points", "p_t", "ahead", "seconds_ratio", "flops_ratio", "label", "p_holm", "verdict",
]  # fmt: skip


def compare(rows: pd.DataFrame, comparisons: list[Comparison], label: str) -> pd.DataFrame:
    """One line per comparison: the arm minus what it is set against (static, or its control) in
    points, paired by seed, with the 95% t interval, the paired t test's p and its Holm
    adjustment over all lines, the seconds and FLOPs ratios as spent and each tier's difference."""
    lines = []
    for c in comparisons:
        seeds, a, b = _paired(rows, c, "acc")
        test = paired_test(a, b)
        line = {
            "comparison": c.name,
            "arm": c.arm,
            "budget": c.budget.label,
            "against": f"{c.against_arm}@{c.against.label}",
            "seeds": ",".join(str(s) for s in seeds),
            "n": test["n"],
            "diff_points": 100 * test["mean_diff"],
            "ci_low_points": 100 * test["ci_low"],
            "ci_high_points": 100 * test["ci_high"],
            "p_t": test["p_t"],
            "ahead": sum(x > y for x, y in zip(a, b)),
            "seconds_ratio": _ratio(rows, c, "trained_s")["mean"],
            "flops_ratio": _ratio(rows, c, "flops")["mean"],
            "label": label,
        }
        for tier in TIER_NAMES:
            column = f"acc_{tier}"
            if column in rows:
                _, ta, tb = _paired(rows, c, column)
                line[f"diff_points_{tier}"] = 100 * paired_test(ta, tb)["mean_diff"]
        lines.append(line)
    if not lines:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    table = pd.DataFrame(lines)
    # Every comparison is one of the family, tested or not: one with too few seeds counts as
    # p = 1, so the others' correction does not shrink when cells are missing.
    tested = table["p_t"].apply(math.isfinite)
    adjusted = holm([p if ok else 1.0 for p, ok in zip(table["p_t"], tested)])
    table["p_holm"] = [p if ok else math.nan for p, ok in zip(adjusted, tested)]
    table["verdict"] = [verdict(r) for r in table.to_dict("records")]
    return table


def console_table(table: pd.DataFrame) -> str:
    """The comparison table as the study and the join print it: points, Holm's p, label, verdict."""
    columns = [
        "comparison",
        "n",
        "diff_points",
        "ci_low_points",
        "ci_high_points",
        "p_holm",
        "label",
        "verdict",
    ]
    return table[columns].to_string(index=False, float_format=lambda v: f"{v:+.2f}")


def outside_family(label: str) -> str:
    """The label of the lines against controls: a confirmation's are secondary (not in what it
    preregistered), a screen's as exploratory as the rest."""
    return "secondary" if label == "confirmatory" else label


def verdict(line: dict) -> str:
    """In words, read against Holm's adjusted p at ``ALPHA`` (too few seeds: no verdict)."""
    if line["n"] < 2 or not math.isfinite(line["p_holm"]):
        return "too few seeds to tell"
    if line["p_holm"] >= ALPHA:
        return "no difference shown"
    return "arm ahead" if line["diff_points"] > 0 else f"{line['against'].split('@')[0]} ahead"


def health(rows: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per arm and budget, runs per health verdict: said before any mean."""
    out: dict[str, dict[str, int]] = {}
    for (arm, budget), group in rows.groupby(["arm", "budget"], sort=False):
        out[f"{arm}@{budget}"] = {
            str(k): int(v) for k, v in group["health"].fillna("unjudged").value_counts().items()
        }
    return out


FRONTIER_COLUMNS = [
    "arm", "budget", "n", "acc", "acc_ci_low", "acc_ci_high",
    "trained_s", "run_s", "run_s_max", "flops", "epochs",
]  # fmt: skip


def frontier(rows: pd.DataFrame) -> pd.DataFrame:
    """Per arm and budget: mean accuracy, seconds that trained, whole-run seconds (mean and
    longest) and FLOPs over seeds."""
    points = []
    for (arm, budget), group in rows.groupby(["arm", "budget"], sort=False):
        acc = summary(group["acc"])
        run_s = group["run_s"] if "run_s" in group else pd.Series([math.nan])
        points.append(
            {
                "arm": arm,
                "budget": budget,
                "n": acc["n"],
                "acc": acc["mean"],
                "acc_ci_low": acc["ci_low"],
                "acc_ci_high": acc["ci_high"],
                "trained_s": float(group["trained_s"].mean()),
                "run_s": float(run_s.mean()),
                "run_s_max": float(run_s.max()),
                "flops": float(group["flops"].mean()),
                "epochs": float(group["epochs"].mean()),
            }
        )
    return pd.DataFrame(points, columns=FRONTIER_COLUMNS)  # no cell finished: no point, same columns


def seconds_to_reach(points: pd.DataFrame) -> dict[str, float]:
    """Per growing arm, the seconds at which its mean frontier (piecewise linear in seconds)
    first reaches the reference run's mean accuracy, as a multiple of the reference's seconds;
    NaN where it never does."""
    ref = points[(points.arm == REFERENCE_ARM) & (points.budget == REFERENCE_BUDGET)]
    if ref.empty:
        return {}
    target, ref_s = float(ref["acc"].iloc[0]), float(ref["trained_s"].iloc[0])
    out = {}
    for arm, group in points[points.arm != REFERENCE_ARM].groupby("arm", sort=False):
        group = group.sort_values("trained_s")
        xs, ys = list(group["trained_s"]), list(group["acc"])
        reached = math.nan
        for i, (x, y) in enumerate(zip(xs, ys)):
            if y >= target:
                reached = (
                    x if i == 0 else xs[i - 1] + (x - xs[i - 1]) * (target - ys[i - 1]) / (y - ys[i - 1])
                )
                break
        out[arm] = reached / ref_s
    return out


def write(
    folder: Path,
    rows: pd.DataFrame,
    family: list[Comparison],
    controls: list[Comparison],
    doc: dict,
    seeds: tuple[int, ...],
) -> pd.DataFrame:
    """The report's files in ``folder`` (cells.csv, comparisons.csv, controls.csv where there
    are controls, frontier.csv and .png, study.json, report.md) from the finished cells' rows;
    ``doc`` names the study and says what the rows cannot (label, metric, seeds, epochs, the
    reference's network, scoring, missing cells), and gains the rest. Returns the comparison
    table: the family's lines, then those against the controls."""
    table = compare(rows, family, doc["label"])
    against_controls = compare(rows, controls, outside_family(doc["label"]))
    points = frontier(counted(rows))
    doc.update(
        health=health(counted(rows)),
        seconds_to_reach_static=seconds_to_reach(points),
        seconds_on_another_machine=seconds_on_another_machine(rows),
        code_versions=code_versions(rows),
    )
    rows.to_csv(folder / "cells.csv", index=False)
    table.to_csv(folder / "comparisons.csv", index=False)
    if controls:
        against_controls.to_csv(folder / "controls.csv", index=False)
    points.to_csv(folder / "frontier.csv", index=False)
    (folder / "study.json").write_text(json.dumps(doc, indent=2, default=str))
    (folder / "report.md").write_text(markdown(doc, table, against_controls, points))
    # Where comparisons were preregistered the means behind them are descriptive; where none
    # were (a baseline alone), the means are the study's figure and carry its label.
    means = "exploratory" if family else doc["label"]
    title = f"{doc['title']}: mean {doc['metric']} ({means}), seeds {seeds_shown(seeds, rows)}"
    figure(points, folder / "frontier.png", title, doc["metric"])
    return pd.concat([table, against_controls], ignore_index=True) if controls else table


def seconds_on_another_machine(rows: pd.DataFrame) -> list[str]:
    """The seconds cells that trained on another machine, or another boot of it, than the run
    whose seconds they were given: their comparison mixes two machines' speeds (a study spread
    over machines or sessions). A host or boot not recorded (older runs) is not compared."""
    if rows.empty or "host" not in rows:
        return []
    # a value not recorded is '' from a run and NaN from a table read back or joined
    text = rows[["host", "boot"]].fillna("").astype(str)
    place = {i: (text.loc[i, "host"], text.loc[i, "boot"]) for i in rows.index}
    where = {rows.loc[i, "cell"]: place[i] for i in counted(rows).index}
    kept = {key: place[i] for key, i in kept_references(rows).items()}  # a reference kept for the cell
    out = []
    for key, (host, boot) in where.items():
        cell = Cell.from_key(key)
        reference = kept.get(key) or where.get(cell.reference.key)
        if not cell.needs_reference_run or reference is None:
            continue
        ref_host, ref_boot = reference
        if (host and ref_host and host != ref_host) or (boot and ref_boot and boot != ref_boot):
            out.append(key)
    return sorted(out)


NO_CODE = "not recorded"  # a run without the tag (pipeline.tracking.runs.CODE_TAG)


def code_versions(rows: pd.DataFrame) -> dict[str, int]:
    """Cells per code version they trained with, most first (``NO_CODE`` for a run that did not
    record one). The study's definition checks the options, not the code: a change between
    versions that alters training under the same options shows here, as two versions."""
    if rows.empty or "code" not in rows:
        return {}
    code = rows["code"].fillna("").astype(str).replace("", NO_CODE)
    return {str(k): int(v) for k, v in code.value_counts().items()}


def versions_said(versions: dict[str, int]) -> str:
    return ", ".join(f"{v} ({n} cell{'s' if n != 1 else ''})" for v, n in versions.items())


def markdown(
    summary_doc: dict,
    table: pd.DataFrame,
    controls: pd.DataFrame | None = None,
    points: pd.DataFrame | None = None,
) -> str:
    """The report's text: what was compared on what, one line per comparison of the family and,
    apart, one per arm against its control (``controls``, corrected among themselves), then each
    arm's means (``points``, from ``frontier``)."""
    lines = [
        f"# Study {summary_doc['study']} ({summary_doc['phase']}): {summary_doc['label']}",
        "",
        f"Metric: {summary_doc['metric']}, paired by seed over seeds {summary_doc['seeds']}; "
        f"correction: Holm over the {len(table)} comparisons (alpha {ALPHA}).",
        f"Reference: static at {summary_doc['epochs']} epochs ({summary_doc['static_spec']}).",
        f"Health (runs per verdict): {json.dumps(summary_doc['health'])}",
    ]
    lines += joined_lines(summary_doc)
    if summary_doc["label"] == "confirmatory" and len(table):
        lines.append(
            "Confirmatory: each comparison's paired difference, its interval, p and verdict (what "
            "was preregistered). Exploratory: the per-tier differences, the seconds and FLOPs "
            "ratios, the frontier figure and the seconds to reach static."
        )
    elif summary_doc["label"] == "confirmatory":
        lines.append(
            "Confirmatory: each arm's mean with its interval (no comparison was preregistered: "
            "the means below are the study's figures)."
        )
    if summary_doc.get("cells_missing"):
        missing = summary_doc["cells_missing"]
        lines.append(
            f"Missing, reported as missing and not replaced: {len(missing)} cell(s): {', '.join(missing)}."
        )
    if summary_doc.get("seconds_on_another_machine"):
        elsewhere = summary_doc["seconds_on_another_machine"]
        lines.append(
            f"Seconds matched across machines: {len(elsewhere)} cell(s) trained on another machine "
            f"or boot than the run whose seconds they were given ({', '.join(elsewhere)}): their "
            "seconds comparisons mix two machines' speeds."
        )
    versions = summary_doc.get("code_versions", {})
    if versions:
        lines.append(f"Code the cells trained with: {versions_said(versions)}{_caution(versions)}.")
    lines += ["", *_table_lines(table)]
    if controls is not None and len(controls):
        lines += [
            "",
            f"Against the controls ({controls['label'].iloc[0]}: outside the family above, which they "
            f"follow from; Holm over these {len(controls)}):",
            "",
            *_table_lines(controls),
        ]
    if points is not None and len(points):
        lines += ["", *_means_lines(points, summary_doc["metric"])]
    reach = summary_doc.get("seconds_to_reach_static", {})
    for arm, ratio in reach.items():
        said = f"{ratio:.2f}x static's seconds" if math.isfinite(ratio) else "at none of its budgets"
        lines.append(
            f"\n{arm} reaches static's mean {summary_doc['metric']} {said} (from the means; exploratory)."
        )
    if summary_doc.get("scoring"):
        s = summary_doc["scoring"]
        lines.append(
            f"\nScoring difficulty (run {s['run']}) cost {s['seconds']:.0f} s, charged once to the study."
        )
    return "\n".join(lines) + "\n"


def _caution(versions: dict[str, int]) -> str:
    if len(versions) < 2:
        return ""
    return (
        ": a change between them that alters training under the same options is not caught by the "
        "study's definition check"
    )


def _means_lines(points: pd.DataFrame, metric: str) -> list[str]:
    """Each arm's mean over the seeds it finished, with its interval, and what it cost: the
    absolute figures behind the differences (a baseline's accuracy is read here)."""
    lines = [
        f"Means over seeds (the comparisons' runs; a baseline's {metric} is read here):",
        "",
        f"| arm | seeds | {metric}, % (95% CI) | seconds that trained | whole run, minutes (longest) "
        "| epochs |",
        "|---|---|---|---|---|---|",
    ]
    for r in points.to_dict("records"):
        interval = (
            f"({100 * r['acc_ci_low']:.2f} to {100 * r['acc_ci_high']:.2f})"
            if math.isfinite(r["acc_ci_low"])
            else "(no interval: one seed)"
        )
        minutes = "not recorded"
        if math.isfinite(r["run_s"]):
            minutes = f"{r['run_s'] / 60:.1f} ({r['run_s_max'] / 60:.1f})"
        lines.append(
            f"| {r['arm']}@{r['budget']} | {r['n']} | {100 * r['acc']:.2f} {interval} | {r['trained_s']:.0f} "
            f"| {minutes} | {r['epochs']:g} |"
        )
    return lines


def _table_lines(table: pd.DataFrame) -> list[str]:
    lines = [
        "| comparison | seeds | arm - against, points (95% CI) | ahead | p (Holm) | seconds | FLOPs "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['comparison']} | {r['n']} | {_difference(r)} | {r['ahead']} of {r['n']} | "
            f"{_number(r['p_holm'], '.3f', 'not tested')} | {_number(r['seconds_ratio'], '.2f', '-', 'x')} | "
            f"{_number(r['flops_ratio'], '.2f', '-', 'x')} | {r['verdict']} |"
        )
    return lines


def _difference(r: dict) -> str:
    """A comparison's mean difference and interval, or why there is none: a study with one seed
    (or one still training) has no interval, and a comparison with no pair yet no difference."""
    if not r["n"]:
        return "no pairs yet"
    if not math.isfinite(r["ci_low_points"]):  # stats.paired_test gives an interval from 2 pairs
        return f"{r['diff_points']:+.2f} (no interval: one pair)"
    return f"{r['diff_points']:+.2f} ({r['ci_low_points']:+.2f} to {r['ci_high_points']:+.2f})"


def _number(value: float, spec: str, missing: str, unit: str = "") -> str:
    return format(value, spec) + unit if math.isfinite(value) else missing

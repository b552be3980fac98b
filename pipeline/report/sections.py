"""The report's sections as blocks (``pipeline.report.render``), in reading order: the Conclusion, test
accuracy by tier, label noise, paired differences, cost, learning curves, settings, final
architectures, runs, and early exits when runs have them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from pipeline.data.tiers import TIER_NAMES
from pipeline.report.groups import TARGET_FRACTION, Group
from pipeline.report.metrics import METRICS, NOISE_METRICS, TIERS, TIME_TO_TARGET, fmt
from pipeline.report.paths import ReportPaths
from pipeline.report.render import Block
from pipeline.report.runs import COMPARABILITY_KEYS
from pipeline.report.stats import summary
from pipeline.report.wording import (
    ANSWER_HEAD,
    answer_table,
    comparison_bullets,
    conclusion,
    duplicate_lines,
    health_lines,
    interval,
    method_lines,
    p_cell,
    tier_lines,
    verdict,
)

TITLE = "Growing CNN: comparison report"

# The sections that hold one figure each: heading, what the figure shows, alt text.
FIGURE_SECTIONS = {
    "cost_frontier_png": (
        "Accuracy against training cost",
        "The runs span several training lengths (epochs or budgets): each variant's mean "
        "test accuracy (95% interval over seeds) at each length, against its mean "
        "training wall-clock and training FLOPs. Points further up and to the left are better.",
        "test accuracy against training cost",
    ),
    "noise_curves_png": (
        "Label noise per epoch",
        "Left: the share of flipped training labels (a fixed sample) the network predicts as "
        "taught, i.e. has memorised. Right: the share of flipped labels among the examples "
        "each epoch trained; a curriculum that holds noisy examples back keeps it below the "
        "noise rate, one that retires clean easy examples raises it.",
        "memorisation and noisy share trained per epoch",
    ),
    "learning_curves_png": (
        "Learning curves",
        "Validation accuracy per epoch, mean over seeds; the timeline above it names the growth "
        "events, curriculum stage changes and the start of pruning, and the vertical lines mark "
        "them on the curves.",
        "validation accuracy per epoch",
    ),
}


def document(
    comp: pd.DataFrame, groups: list[Group], paths: ReportPaths, ordering: Sequence[dict] = ()
) -> list[Block]:
    """The report as blocks; ``comp`` is the comparison table (``comparison.comparison_rows``),
    ``ordering`` each curriculum against its random-order control (``comparison.ordering_rows``)."""
    return [
        ("h", 1, TITLE),
        *_conclusion(comp, groups, ordering),
        *_tiers(comp, groups, paths),
        *_noise(comp, groups),
        *_paired(comp),
        *_cost(comp, groups, paths),
        *_figure(paths, "cost_frontier_png"),
        *_figure(paths, "noise_curves_png"),
        *_figure(paths, "learning_curves_png"),
        *_settings(groups),
        *_architectures(groups),
        *_runs(groups),
    ]


def _cell(comp: pd.DataFrame, label: str, metric: str) -> pd.Series | None:
    """The comparison row of one group and metric; None when the group did not log it."""
    rows = comp[(comp["group"] == label) & (comp["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def _figure(paths: ReportPaths, name: str) -> list[Block]:
    """The section around the figure ``name`` (a ``ReportPaths`` field); none when it was not drawn."""
    path = getattr(paths, name)
    heading, text, alt = FIGURE_SECTIONS[name]
    return [("h", 2, heading), ("p", text), ("img", path.name, alt)] if path.exists() else []


def _conclusion(comp: pd.DataFrame, groups: list[Group], ordering: Sequence[dict]) -> list[Block]:
    caveats = {g.label: g.health_caveat() for g in groups if g.health_caveat()}
    warned = health_lines(groups) + duplicate_lines(groups)  # before any number
    said = conclusion(comp, ordering, caveats)
    unfinished = [
        r for g in groups for _, r in g.runs.iterrows() if r.get("status", "FINISHED") != "FINISHED"
    ]
    if unfinished:
        ids = ", ".join(f"{r['run_id']} ({r['status']})" for r in unfinished)
        said.append(
            f"Caution: {len(unfinished)} run(s) did not finish; their last logged values are used: {ids}."
        )
    blocks: list[Block] = [("h", 2, "Conclusion")] + ([("ul", warned)] if warned else [])
    if answers := answer_table(comp, caveats):  # the answer at a glance, before its words
        blocks.append(("table", ANSWER_HEAD, answers))
    if said:
        blocks.append(("ul", said))
    # The console (main) prints the Conclusion up to its first subsection: the table and the
    # few lines above. The detail follows here and in the rest of the report.
    if tiers := tier_lines(comp, caveats):
        blocks += [("h", 3, "Per tier"), ("ul", tiers)]
    if bullets := comparison_bullets(comp, groups):
        blocks += [("h", 3, "Each variant against its matched static baseline"), ("ul", bullets)]
    blocks += [("h", 3, "How the verdicts are reached"), ("ul", method_lines(comp))]
    return blocks


def _tiers(comp: pd.DataFrame, groups: list[Group], paths: ReportPaths) -> list[Block]:
    tiers = [m for m in TIERS if (comp["metric"] == m).any()]
    return [
        ("h", 2, "Test accuracy by tier"),
        ("p", "Mean over seeds with its 95% Student-t interval in brackets; n is the number of seeds."),
        (
            "table",
            ["variant", *[TIERS[m] for m in tiers]],
            [[_with_caveat(g), *[interval("acc", _cell(comp, g.label, m)) for m in tiers]] for g in groups],
        ),
        ("img", paths.tier_accuracy_png.name, "per-tier test accuracy with 95% CI"),
    ]


def _with_caveat(g: Group) -> str:
    """A group's label, with a warning when its means include a collapsed seed."""
    return f"{g.label} (⚠ {g.health_caveat()})" if g.health_caveat() else g.label


def _noise(comp: pd.DataFrame, groups: list[Group]) -> list[Block]:
    noise = [m for m in NOISE_METRICS if (comp["metric"] == m).any()]
    if not noise:
        return []
    return [
        ("h", 2, "Label noise: memorisation at the last epoch"),
        (
            "p",
            "On a fixed sample of the training examples whose label was flipped: the share the "
            "network predicts with their original label, and the share it predicts with the wrong "
            "label it was taught (memorised). Mean over seeds with its 95% interval.",
        ),
        (
            "table",
            ["variant", *[METRICS[m].title for m in noise]],
            [[g.label, *[interval("acc", _cell(comp, g.label, m)) for m in noise]] for g in groups],
        ),
    ]


def _paired(comp: pd.DataFrame) -> list[Block]:
    paired_rows = comp[comp["baseline"] != ""]
    heading = ("h", 2, "Paired differences to the matched static baseline")
    if paired_rows.empty:
        return [heading, ("p", "No variant has a matched static baseline, so no paired test was run.")]
    rows = []
    for _, r in paired_rows.iterrows():
        kind = METRICS[r["metric"]].kind
        rows.append(
            [
                r["group"],
                r["baseline"],
                r["metric"],
                str(r["n_pairs"]),
                fmt(kind, r["mean_diff"], True),
                f"{fmt(kind, r['diff_ci_low'], True)} to {fmt(kind, r['diff_ci_high'], True)}",
                p_cell(r, "p_t"),
                p_cell(r, "p_wilcoxon"),
                verdict(r),
            ]
        )
    head = ["variant", "baseline", "metric", "n pairs", "mean diff", "95% CI", "p (t)", "p (Wilcoxon)",
            "verdict"]  # fmt: skip
    return [heading, ("table", head, rows)]


def _cost(comp: pd.DataFrame, groups: list[Group], paths: ReportPaths) -> list[Block]:
    target = (
        "the one given to evaluate (--target-acc)"
        if groups and groups[0].target_note == "given"
        else f"{TARGET_FRACTION:.0%} of the matched static baseline's mean final validation "
        "accuracy, the same for a variant and its baseline"
    )
    text = (
        "Time to target: the cumulative training time (seconds, this machine) of the first "
        f"epoch whose validation accuracy reached the target. The target is {target}; runs that "
        "never reached it are left out of the mean ('reached' counts them), and "
        "a variant with no matched baseline has no target. Seconds that trained: the training "
        "step, growth and the curriculum's bookkeeping, not validation, logging or checkpoints "
        "(runs from before they were counted apart show n/a)."
    )
    rows = []
    for g in groups:
        ttt = _cell(comp, g.label, TIME_TO_TARGET)
        units = g.per_unit(TIME_TO_TARGET)
        reached = f"{int(units.notna().sum())}/{len(units)}" if np.isfinite(g.target) else "no target"
        rows.append(
            [
                g.label,
                interval("seconds", _cell(comp, g.label, "time/total_s")),
                interval("seconds", _cell(comp, g.label, "time/trained_s")),
                interval("acc", _cell(comp, g.label, "time/trained_share")),
                fmt("acc", g.target),
                interval("seconds", ttt)
                if ttt is not None
                else ("not reached" if np.isfinite(g.target) else "no target"),
                reached,
                interval("flops", _cell(comp, g.label, "train/flops_cumulative")),
                interval("ms", _cell(comp, g.label, "test/infer_ms_per_example")),
            ]
        )
    head = ["variant", "wall-clock", "seconds that trained", "share trained", "target val acc",
            "time to target", "reached", "training FLOPs", "inference / example"]  # fmt: skip
    return [
        ("h", 2, "Cost"),
        ("p", text),
        ("table", head, rows),
        ("img", paths.accuracy_vs_wallclock_png.name, "test accuracy against wall-clock"),
    ]


def _settings(groups: list[Group]) -> list[Block]:
    by_setting: dict[str, list[str]] = {}
    for g in groups:
        by_setting.setdefault(g.setting, []).append(g.label)
    # One column per setting, one row per parameter: the recipe makes the list too long to read
    # across.
    values = [json.loads(key) for key in by_setting]
    rows = [[k, *[v.get(k, "") or "-" for v in values]] for k in COMPARABILITY_KEYS]
    return [
        ("h", 2, "Settings"),
        ("p", "Runs are compared only within a setting: equal values of every parameter below."),
        ("table", ["parameter", *[", ".join(labels) for labels in by_setting.values()]], rows),
    ]


def _architectures(groups: list[Group]) -> list[Block]:
    specs: dict[str, tuple[str, list[str]]] = {}
    for g in groups:
        specs.setdefault(g.spec_id, (g.spec_key, []))[1].append(g.label)
    rows = [[sid, ", ".join(labels), _layers(key)] for sid, (key, labels) in specs.items()]
    return [("h", 2, "Final architectures"), ("table", ["spec id", "variants", "layers"], rows)]


def _runs(groups: list[Group]) -> list[Block]:
    rows = [
        [
            r["run_id"],
            r["run_name"],
            g.label,
            str(r["seed"]) if pd.notna(r["seed"]) else "none",
            fmt("acc", r.get("test/acc", math.nan)),
            fmt("seconds", r.get("time/total_s", math.nan)),
        ]
        for g in groups
        for _, r in g.runs.iterrows()
    ]
    return [
        ("h", 2, "Runs"),
        ("table", ["run id", "run name", "variant", "seed", "test acc", "wall-clock"], rows),
    ]


def _layers(key: str) -> str:
    try:
        layers = json.loads(key)["layers"]
        return " → ".join(str(layer.get("type", "?")) for layer in layers)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return "unknown" if not key else "unparsed spec"


def exits(groups: list[Group], paths: ReportPaths) -> list[Block]:
    """The early-exits section: per variant with exits, the head against adaptive inference on
    the test split, and the share of each tier that leaves at the first exit."""
    with_exits = [g for g in groups if g.has("test/flops_ratio")]
    tiers = [t for t in TIER_NAMES if any(g.has(f"test/exit_share_exit1_{t}") for g in with_exits)]

    def cell(g: Group, metric: str, kind: str) -> str:
        stats = summary(g.per_unit(metric).dropna())
        if stats["n"] == 0:
            return "n/a"
        scale, unit = (100, "%") if kind == "pct" else (1, "x" if kind == "ratio" else "")
        text = f"{scale * stats['mean']:.2f}{unit}"
        if stats["n"] > 1:
            text += f" [{scale * stats['ci_low']:.2f}, {scale * stats['ci_high']:.2f}]"
        return text

    rows = []
    for g in with_exits:
        rows.append(
            [
                g.label,
                str(len(g.per_unit("test/acc").dropna())),
                cell(g, "test/acc", "pct"),
                cell(g, "test/acc_adaptive", "pct"),
                cell(g, "test/flops_ratio", "ratio"),
                cell(g, "test/latency_ratio_b1", "ratio"),
                *[cell(g, f"test/exit_share_exit1_{t}", "pct") for t in tiers],
            ]
        )
    return [
        ("h", 2, "Early exits: input-adaptive inference"),
        (
            "p",
            "Each example leaves at the first exit whose confidence (max softmax) passes its "
            "threshold, calibrated on the validation split; the head's accuracy is the network "
            "run whole. FLOPs ratio: mean forward FLOPs per test example with exits over the whole "
            "network's; batch-1 speed-up: per-example latency at batch 1 without exits over with. "
            "Mean over seeds with its 95% interval in brackets.",
        ),
        (
            "table",
            [
                "variant",
                "n",
                "head test acc",
                "adaptive test acc",
                "FLOPs ratio",
                "batch-1 speed-up",
                *[f"{t} at exit 1" for t in tiers],
            ],
            rows,
        ),
        ("img", paths.exit_curves_png.name, "test accuracy against mean FLOPs per example over thresholds"),
    ]

"""The comparison report of the evaluate step: every configuration against the static network
with the same final architecture, over seeds, with intervals and paired tests.

``collect_runs`` reads finished training runs (tags, params, metrics, ``history.csv``,
``architecture_trace.json``) from MLflow; ``build_report`` is a pure function of what it
returns and writes ``comparison.csv``, ``paired.csv``, ``report.md``, a self-contained
``report.html`` and three figures into a folder.

Runs are first split into *settings*: runs are comparable only when every parameter named in
``COMPARABILITY_KEYS`` (the data digest, subset, validation size, split seed, epochs or budget,
precision) is equal; a run without one of them counts it as "". Within a setting, runs are
grouped by ``variant`` tag and final architecture. A group's baseline is the group of variant
``static`` (entry point ``train_static``, no curriculum) of the same setting whose
``final_spec`` equals the group's, compared as architectures: the spec's ``name`` is ignored,
because a grown network is named after its start spec while a static one is named after
itself. Pairs are formed by seed; several runs of one seed in one group are averaged into one
value. A group whose static twin exists only in another setting is reported unpaired, with the
parameters that differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import comparison_plots
from pipeline.render import to_html, to_markdown
from pipeline.report.comparison import (
    COMPARISON_COLUMNS,
    PAIRED_COLUMNS,
    comparison_rows,
    ordering_rows,
)
from pipeline.report.groups import TARGET_FRACTION, Group, cost_frontier_lines, has_curve, make_groups
from pipeline.report.metrics import (
    METRICS,
    NOISE_METRICS,
    TIERS,
    TIME_TO_TARGET,
    fmt,
)
from pipeline.report.runs import COMPARABILITY_KEYS, collect_runs
from pipeline.report.wording import comparison_bullets, conclusion, interval, p_cell, verdict
from pipeline.stats import summary
from pipeline.tracking import UpstreamError

__all__ = ["ReportPaths", "build_report", "collect_runs"]  # what evaluate uses

TITLE = "Growing CNN: comparison report"


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    comparison_csv: Path
    paired_csv: Path
    report_md: Path
    report_html: Path
    tier_accuracy_png: Path
    accuracy_vs_wallclock_png: Path
    learning_curves_png: Path
    cost_frontier_png: Path  # only when the runs span several training lengths
    noise_curves_png: Path  # only when runs trained on noisy labels
    exit_curves_png: Path  # only when runs have early exits

    @classmethod
    def in_dir(cls, out_dir: Path) -> ReportPaths:
        names = ["comparison.csv", "paired.csv", "report.md", "report.html", "tier_accuracy.png",
                 "accuracy_vs_wallclock.png", "learning_curves.png", "cost_frontier.png",
                 "noise_curves.png", "exit_curves.png"]  # fmt: skip
        return cls(out_dir, *(out_dir / name for name in names))

    def files(self) -> list[Path]:
        """Every file written, e.g. for ``mlflow.log_artifact``."""
        paths = [getattr(self, f.name) for f in fields(self) if f.name != "out_dir"]
        return [p for p in paths if p.exists()]


# --- entry ---------------------------------------------------------------------------------


def build_report(
    runs_df: pd.DataFrame,
    histories: dict[str, pd.DataFrame],
    events: dict[str, list],
    out_dir: Path,
    target_acc: float | None = None,
    exit_curves: dict[str, dict] | None = None,
) -> ReportPaths:
    """Write comparison.csv, paired.csv, report.md, report.html and three PNGs into ``out_dir``.

    ``target_acc`` is the validation accuracy for time-to-target; by default each group uses
    99% of its matched static baseline's mean final ``val/acc`` (no baseline: no target).
    ``exit_curves`` (run id -> evaluate's ``exit_curve.json``) adds the early-exits section.
    """
    if runs_df.empty:
        raise UpstreamError(
            "no training runs to compare: pass the run ids of train_static/train_dynamic runs"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths.in_dir(out_dir)
    groups = make_groups(runs_df, histories, target_acc)
    comparison, paired = comparison_rows(groups)
    comp_df = pd.DataFrame(comparison, columns=COMPARISON_COLUMNS)
    comp_df.to_csv(paths.comparison_csv, index=False)
    pd.DataFrame(paired, columns=PAIRED_COLUMNS).to_csv(paths.paired_csv, index=False)

    colours = {g.label: f"C{i % 10}" for i, g in enumerate(groups)}
    comparison_plots.tier_accuracy(comp_df, groups, TIERS, colours, paths.tier_accuracy_png)
    curves = {run_id: h for run_id, h in histories.items() if has_curve(h)}
    comparison_plots.accuracy_vs_wallclock(groups, curves, colours, paths.accuracy_vs_wallclock_png)
    comparison_plots.mean_learning_curves(groups, histories, events, colours, paths.learning_curves_png)
    comparison_plots.cost_frontier(cost_frontier_lines(groups), paths.cost_frontier_png)
    comparison_plots.noise_curves(groups, histories, colours, paths.noise_curves_png)

    blocks = _document(comp_df, groups, paths, ordering_rows(groups))
    if any(g.has("test/flops_ratio") for g in groups):
        comparison_plots.exit_curves(groups, exit_curves or {}, colours, paths.exit_curves_png)
        blocks += _exit_blocks(groups, paths)
    paths.report_md.write_text(to_markdown(blocks), encoding="utf-8")
    paths.report_html.write_text(to_html(blocks, out_dir, TITLE), encoding="utf-8")
    return paths


def _document(
    comp: pd.DataFrame, groups: list[Group], paths: ReportPaths, ordering: Sequence[dict] = ()
) -> list[tuple]:
    """The report as blocks, rendered to both Markdown and HTML."""

    def cell(label: str, metric: str):
        rows = comp[(comp["group"] == label) & (comp["metric"] == metric)]
        return rows.iloc[0] if len(rows) else None

    tiers = [m for m in TIERS if (comp["metric"] == m).any()]
    blocks: list[tuple] = [("h", 1, TITLE), ("h", 2, "Conclusion")]
    said = conclusion(comp, ordering)
    unfinished = [
        r for g in groups for _, r in g.runs.iterrows() if r.get("status", "FINISHED") != "FINISHED"
    ]
    if unfinished:
        ids = ", ".join(f"{r['run_id']} ({r['status']})" for r in unfinished)
        said.append(
            f"Caution: {len(unfinished)} run(s) did not finish; their last logged values are used: {ids}."
        )
    blocks.append(("ul", said))
    if bullets := comparison_bullets(comp, groups):
        blocks += [("h", 3, "Each variant against its matched static baseline"), ("ul", bullets)]

    blocks += [
        ("h", 2, "Test accuracy by tier"),
        ("p", "Mean over seeds with its 95% Student-t interval in brackets; n is the number of seeds."),
    ]
    blocks.append(
        (
            "table",
            ["variant", *[TIERS[m] for m in tiers]],
            [[g.label, *[interval("acc", cell(g.label, m)) for m in tiers]] for g in groups],
        )
    )
    blocks.append(("img", paths.tier_accuracy_png.name, "per-tier test accuracy with 95% CI"))
    noise = [m for m in NOISE_METRICS if (comp["metric"] == m).any()]
    if noise:
        blocks += [
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
                [[g.label, *[interval("acc", cell(g.label, m)) for m in noise]] for g in groups],
            ),
        ]

    paired_rows = comp[comp["baseline"] != ""]
    blocks.append(("h", 2, "Paired differences to the matched static baseline"))
    if paired_rows.empty:
        blocks.append(("p", "No variant has a matched static baseline, so no paired test was run."))
    else:
        blocks.append(
            (
                "table",
                [
                    "variant",
                    "baseline",
                    "metric",
                    "n pairs",
                    "mean diff",
                    "95% CI",
                    "p (t)",
                    "p (Wilcoxon)",
                    "verdict",
                ],
                [
                    [
                        r["group"],
                        r["baseline"],
                        r["metric"],
                        str(r["n_pairs"]),
                        fmt(METRICS[r["metric"]].kind, r["mean_diff"], True),
                        f"{fmt(METRICS[r['metric']].kind, r['diff_ci_low'], True)} to "
                        f"{fmt(METRICS[r['metric']].kind, r['diff_ci_high'], True)}",
                        p_cell(r, "p_t"),
                        p_cell(r, "p_wilcoxon"),
                        verdict(r),
                    ]
                    for _, r in paired_rows.iterrows()
                ],
            )
        )

    blocks += [
        ("h", 2, "Cost"),
        (
            "p",
            "Time to target: the cumulative training time (seconds, this machine) of the first "
            "epoch whose validation accuracy reached the target. The target is "
            + (
                "the one given to evaluate (--target-acc)"
                if groups and groups[0].target_note == "given"
                else f"{TARGET_FRACTION:.0%} of the matched static baseline's mean final validation "
                "accuracy, the same for a variant and its baseline"
            )
            + "; runs that never reached it are left out of the mean ('reached' counts them), and "
            "a variant with no matched baseline has no target.",
        ),
    ]
    cost_rows = []
    for g in groups:
        ttt = cell(g.label, TIME_TO_TARGET)
        units = g.per_unit(TIME_TO_TARGET)
        reached = f"{int(units.notna().sum())}/{len(units)}" if np.isfinite(g.target) else "no target"
        cost_rows.append(
            [
                g.label,
                interval("seconds", cell(g.label, "time/total_s")),
                fmt("acc", g.target),
                interval("seconds", ttt)
                if ttt is not None
                else ("not reached" if np.isfinite(g.target) else "no target"),
                reached,
                interval("flops", cell(g.label, "train/flops_cumulative")),
                interval("ms", cell(g.label, "test/infer_ms_per_example")),
            ]
        )
    blocks.append(
        (
            "table",
            [
                "variant",
                "wall-clock",
                "target val acc",
                "time to target",
                "reached",
                "training FLOPs",
                "inference / example",
            ],
            cost_rows,
        )
    )
    blocks.append(("img", paths.accuracy_vs_wallclock_png.name, "test accuracy against wall-clock"))
    if paths.cost_frontier_png.exists():
        blocks += [
            ("h", 2, "Accuracy against training cost"),
            (
                "p",
                "The runs span several training lengths (epochs or budgets): each variant's mean "
                "test accuracy (95% interval over seeds) at each length, against its mean "
                "training wall-clock and training FLOPs. Points further up and to the left are better.",
            ),
            ("img", paths.cost_frontier_png.name, "test accuracy against training cost"),
        ]
    if paths.noise_curves_png.exists():
        blocks += [
            ("h", 2, "Label noise per epoch"),
            (
                "p",
                "Left: the share of flipped training labels (a fixed sample) the network predicts as "
                "taught, i.e. has memorised. Right: the share of flipped labels among the examples "
                "each epoch trained; a curriculum that holds noisy examples back keeps it below the "
                "noise rate, one that retires clean easy examples raises it.",
            ),
            ("img", paths.noise_curves_png.name, "memorisation and noisy share trained per epoch"),
        ]

    blocks += [
        ("h", 2, "Learning curves"),
        (
            "p",
            "Validation accuracy per epoch, mean over seeds; the timeline above it names the growth "
            "events, curriculum stage changes and the start of pruning, and the vertical lines mark "
            "them on the curves.",
        ),
    ]
    blocks.append(("img", paths.learning_curves_png.name, "validation accuracy per epoch"))

    blocks += [
        ("h", 2, "Settings"),
        ("p", "Runs are compared only within a setting: equal values of every parameter below."),
    ]
    by_setting: dict[str, list[str]] = {}
    for g in groups:
        by_setting.setdefault(g.setting, []).append(g.label)
    blocks.append(
        (
            "table",
            ["variants", *COMPARABILITY_KEYS],
            [
                [", ".join(labels), *[json.loads(key).get(k, "") or "-" for k in COMPARABILITY_KEYS]]
                for key, labels in by_setting.items()
            ],
        )
    )

    blocks.append(("h", 2, "Final architectures"))
    specs = {}
    for g in groups:
        specs.setdefault(g.spec_id, (g.spec_key, []))[1].append(g.label)
    blocks.append(
        (
            "table",
            ["spec id", "variants", "layers"],
            [[sid, ", ".join(labels), _layers(key)] for sid, (key, labels) in specs.items()],
        )
    )

    blocks.append(("h", 2, "Runs"))
    run_rows = []
    for g in groups:
        for _, r in g.runs.iterrows():
            run_rows.append(
                [
                    r["run_id"],
                    r["run_name"],
                    g.label,
                    str(r["seed"]) if pd.notna(r["seed"]) else "none",
                    fmt("acc", r.get("test/acc", math.nan)),
                    fmt("seconds", r.get("time/total_s", math.nan)),
                ]
            )
    blocks.append(("table", ["run id", "run name", "variant", "seed", "test acc", "wall-clock"], run_rows))
    return blocks


def _layers(key: str) -> str:
    try:
        layers = json.loads(key)["layers"]
        return " → ".join(str(layer.get("type", "?")) for layer in layers)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return "unknown" if not key else "unparsed spec"


# --- early exits -------------------------------------------------------------------------


def _exit_blocks(groups: list[Group], paths: ReportPaths) -> list[tuple]:
    """The early-exits section: per variant with exits, the head against adaptive inference on
    the test split, and the share of each tier that leaves at the first exit."""
    with_exits = [g for g in groups if g.has("test/flops_ratio")]
    tiers = [
        t for t in ("easy", "medium", "hard") if any(g.has(f"test/exit_share_exit1_{t}") for g in with_exits)
    ]

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

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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from pipeline import plots
from pipeline.render import to_html, to_markdown
from pipeline.report.comparison import (
    COMPARISON_COLUMNS,
    PAIRED_COLUMNS,
    comparison_rows,
    ordering_rows,
)
from pipeline.report.groups import TARGET_FRACTION, Group, has_curve, make_groups
from pipeline.report.metrics import (
    METRICS,
    NOISE_METRICS,
    TIERS,
    TIME_TO_TARGET,
    fmt,
)
from pipeline.report.runs import COMPARABILITY_KEYS, LENGTH_KEYS, collect_runs
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
    _plot_tiers(comp_df, groups, colours, paths.tier_accuracy_png)
    _plot_accuracy_vs_wallclock(groups, histories, colours, paths.accuracy_vs_wallclock_png)
    _plot_learning_curves(groups, histories, events, colours, paths.learning_curves_png)
    _plot_cost_frontier(groups, paths.cost_frontier_png)
    _plot_noise_curves(groups, histories, colours, paths.noise_curves_png)

    blocks = _document(comp_df, groups, paths, ordering_rows(groups))
    if any(g.has("test/flops_ratio") for g in groups):
        _plot_exit_curves(groups, exit_curves or {}, colours, paths.exit_curves_png)
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


# --- figures -------------------------------------------------------------------------------


def _plot_tiers(comp: pd.DataFrame, groups: list[Group], colours: dict, path: Path) -> None:
    tiers = [m for m in TIERS if (comp["metric"] == m).any()]
    fig, ax = plt.subplots(figsize=(max(7.0, 3.0 + len(tiers) * (0.5 + 0.35 * len(groups))), 4.5))
    width = 0.8 / max(1, len(groups))
    lows = []
    for i, g in enumerate(groups):
        rows = comp[(comp["group"] == g.label) & comp["metric"].isin(tiers)]
        xs = [tiers.index(m) - 0.4 + width * (i + 0.5) for m in rows["metric"]]
        if not xs:
            continue
        ax.bar(xs, rows["mean"], width, color=colours[g.label], label=g.label)
        has_ci = np.isfinite(rows["ci_low"].to_numpy(dtype=float))
        for x, (_, r), ok in zip(xs, rows.iterrows(), has_ci):
            if ok:
                ax.errorbar(
                    x,
                    r["mean"],
                    yerr=[[r["mean"] - r["ci_low"]], [r["ci_high"] - r["mean"]]],
                    color="black",
                    capsize=3,
                    linewidth=1,
                )
                lows.append(r["ci_low"])
            else:  # one seed: no interval to draw, and the bar should not look like it has one
                ax.annotate(f"n={r['n']}", (x, r["mean"]), ha="center", va="bottom", fontsize=7)
                lows.append(r["mean"])
    if lows:
        # Differences of a point or two vanish on an axis from 0; say where it starts instead.
        bottom = max(0.0, float(np.nanmin(lows)) - 0.05)
        ax.set_ylim(bottom, 1.0)
        ax.set_ylabel(f"test accuracy (axis starts at {bottom:.2f})")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no test accuracy logged", ha="center", transform=ax.transAxes)
    ax.set_xticks(range(len(tiers)), [TIERS[m] for m in tiers])
    ax.set_title("test accuracy per tier: mean over seeds, 95% CI")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def _plot_accuracy_vs_wallclock(groups: list[Group], histories: dict, colours: dict, path: Path) -> None:
    fig, (ax_run, ax_curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    targets = {}
    for g in groups:
        c = colours[g.label]
        if g.has("test/acc") and "time/total_s" in g.runs.columns:
            ax_run.scatter(g.runs["time/total_s"], g.runs["test/acc"], color=c, label=g.label)
        labelled = False
        for run_id in g.runs["run_id"]:
            h = histories.get(run_id)
            if has_curve(h):
                h = h.sort_values("time/cumulative_s")
                ax_curve.plot(
                    h["time/cumulative_s"],
                    h["val/acc"],
                    "-",
                    color=c,
                    alpha=0.7,
                    linewidth=1,
                    label=None if labelled else g.label,
                )
                labelled = True
        if math.isfinite(g.target):
            targets[round(g.target, 6)] = g.target
    for target in targets.values():
        ax_curve.axhline(target, color="grey", linestyle="--", linewidth=1)
    ax_run.set(xlabel="wall-clock training time (s)", ylabel="final test accuracy", title="one point per run")
    ax_curve.set(
        xlabel="cumulative training time (s)",
        ylabel="validation accuracy",
        title="validation accuracy against time (dashed: target)",
    )
    for ax in (ax_run, ax_curve):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    _save(fig, path)


def _plot_learning_curves(
    groups: list[Group], histories: dict, events: dict, colours: dict, path: Path
) -> None:
    """Mean validation accuracy per epoch of each variant, under a timeline of what changed
    (growth events, curriculum stages; the same for every seed of a variant)."""
    marks: dict[tuple, None] = {}
    for g in groups:
        first = next((r for r in g.runs["run_id"] if r in histories), None)
        if first is not None:
            for mark in plots.schedule_marks(
                events.get(first, []), None, histories[first].to_dict("records")
            ):
                marks[mark] = None
    fig, axes = plt.subplots(
        2 if marks else 1,
        1,
        figsize=(10, 6.5 if marks else 4.5),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [1.1, 3] if marks else [1], "hspace": 0.1},
    )
    ax = axes[-1, 0]
    drawn, last_epoch = False, 1
    for g in groups:
        frames = [
            histories[r]
            for r in g.runs["run_id"]
            if r in histories and {"epoch", "val/acc"} <= set(histories[r].columns)
        ]
        if frames:
            mean = pd.concat(frames).groupby("epoch")["val/acc"].mean()
            # Epochs drawn 1-based, as in plots.learning_curves.
            ax.plot(
                mean.index + 1,
                mean.values,
                "o-",
                color=colours[g.label],
                markersize=3,
                label=f"{g.label} (n={len(frames)})",
            )
            drawn, last_epoch = True, max(last_epoch, int(mean.index.max()) + 1)
    for kind, epoch, _label in marks:
        style = plots.MARKS[kind]
        # A change before epoch e happens between the points of epochs e and e+1.
        ax.axvline(epoch + 0.5, color=style["color"], linestyle=style["linestyle"], linewidth=1)
    if not drawn:
        ax.text(0.5, 0.5, "no history.csv logged", ha="center", transform=ax.transAxes)
    ax.set(xlabel="epoch", ylabel="validation accuracy (fraction correct)")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if drawn:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), title="variant (seeds)")
    if marks:
        plots.timeline(axes[0, 0], list(marks), last_epoch)
    fig.suptitle("validation accuracy per epoch, mean over seeds")
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend beside the axes stays in the file
    plt.close(fig)


def _plot_cost_frontier(groups: list[Group], path: Path) -> None:
    """Test accuracy against wall-clock and FLOPs per variant across training lengths; drawn
    only when groups that agree on everything but the training length (``LENGTH_KEYS``) differ
    in it, so a point is never joined to one of other data or precision."""
    other = lambda g: json.dumps({k: v for k, v in json.loads(g.setting).items() if k not in LENGTH_KEYS})
    lines: dict[tuple[str, str, str], list[Group]] = {}
    for g in groups:
        if g.has("test/acc") and g.has("time/total_s") and g.has("train/flops_cumulative"):
            lines.setdefault((other(g), g.variant, g.spec_key if g.is_baseline else ""), []).append(g)
    lines = {k: v for k, v in lines.items() if len({g.setting for g in v}) > 1}
    if not lines:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    panels = (
        (axes[0], "time/total_s", "training wall-clock (s)"),
        (axes[1], "train/flops_cumulative", "training FLOPs"),
    )
    mean = lambda g, metric: float(np.nanmean(g.per_unit(metric)))
    for i, ((_, variant, _), line) in enumerate(sorted(lines.items())):
        by_cost = sorted(line, key=lambda g: mean(g, "train/flops_cumulative"))
        accs = [summary(g.per_unit("test/acc").dropna()) for g in by_cost]
        ys = [100 * a["mean"] for a in accs]
        err = [100 * (a["ci_high"] - a["mean"]) if np.isfinite(a["ci_high"]) else 0.0 for a in accs]
        for ax, metric, label in panels:
            xs = [mean(g, metric) for g in by_cost]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=variant)
            ax.set_xlabel(label)
            ax.set_ylabel("test accuracy (%), mean and 95% CI")
            ax.grid(alpha=0.3)
    axes[1].set_xscale("log")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Test accuracy against training cost, per variant across training lengths")
    _save(fig, path)


NOISE_CURVES = (
    ("noise/train_acc_flipped_noisy", "flipped training labels memorised (%)"),
    ("noise/trained_flipped_share", "flipped share of the examples trained (%)"),
)


def _plot_noise_curves(groups: list[Group], histories: dict, colours: dict, path: Path) -> None:
    """Per epoch, mean over seeds: how many flipped training labels the network has memorised,
    and how much of what it trained on was flipped (how the curriculum holds noise back or feeds
    it). Drawn only when some run trained on noisy labels."""
    columns = {"epoch", *(metric for metric, _ in NOISE_CURVES)}
    noisy = lambda r: r in histories and columns <= set(histories[r].columns)
    curves = {g.label: [histories[r] for r in g.runs["run_id"] if noisy(r)] for g in groups}
    curves = {label: frames for label, frames in curves.items() if frames}
    if not curves:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, (metric, title) in zip(axes, NOISE_CURVES):
        for label, frames in curves.items():
            mean = pd.concat(frames).groupby("epoch")[metric].mean()
            ax.plot(mean.index + 1, 100 * mean.values, "o-", markersize=3, color=colours[label],
                    label=f"{label} (n={len(frames)})")  # fmt: skip
        ax.set(xlabel="epoch", ylabel=title, title=title.replace(" (%)", "") + ", mean over seeds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.suptitle("Label noise: memorisation and the share of noisy labels trained, per epoch")
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 3) + 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


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


def _plot_exit_curves(groups: list[Group], curves: dict[str, dict], colours: dict, path: Path) -> None:
    """Test accuracy against mean FLOPs per example as the shared threshold goes from 0 (every
    example leaves at the first exit) to 1 (none leaves early): one line per run, its calibrated
    point (filled) and the whole network (open square)."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    fulls = []
    for g in groups:
        for i, run_id in enumerate(r for r in g.runs["run_id"] if r in curves):
            curve = curves[run_id]
            points = sorted(curve["curve"], key=lambda p: p["flops"])
            first = i == 0
            label = lambda what: f"{g.label}: {what}" if first else None  # noqa: B023 (used at once)
            colour = colours[g.label]
            flops = [p["flops"] / 1e6 for p in points]
            ax.plot(flops, [100 * p["acc"] for p in points], "-", lw=1.2, alpha=0.75, color=colour,
                    label=label("thresholds 0 to 1"))  # fmt: skip
            ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], "o", ms=7, color=colour,
                    markeredgecolor="k", label=label("calibrated thresholds"))  # fmt: skip
            ax.plot(curve["flops_full"] / 1e6, 100 * curve["acc_full"], "s", ms=7, color=colour,
                    markerfacecolor="white", label=label("whole network"))  # fmt: skip
            fulls.append(100 * curve["acc_full"])
    if fulls:  # near 0 every example leaves at the first exit, far below: show the trade-off
        ax.set_ylim(min(fulls) - 3, max(fulls) + 0.8)
    ax.set(xlabel="mean forward FLOPs per test example (millions)", ylabel="test accuracy (%)")
    ax.set_title("Early exits: test accuracy against FLOPs over confidence thresholds, per run")
    ax.grid(alpha=0.3)
    # Below the axes, two columns, so long variant names never cover the curves or run off.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

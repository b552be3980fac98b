"""``build_report``: the comparison report's files written from the runs ``collect_runs`` read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.report import comparison_plots, sections
from pipeline.report.comparison import COMPARISON_COLUMNS, PAIRED_COLUMNS, comparison_rows, ordering_rows
from pipeline.report.groups import cost_frontier_lines, has_curve, make_groups
from pipeline.report.metrics import TIERS
from pipeline.report.paths import ReportPaths
from pipeline.report.render import to_html, to_markdown
from pipeline.tracking.errors import UpstreamError


def build_report(
    runs_df: pd.DataFrame,
    histories: dict[str, pd.DataFrame],
    events: dict[str, list],
    out_dir: Path,
    target_acc: float | None = None,
    exit_curves: dict[str, dict] | None = None,
) -> ReportPaths:
    """Write comparison.csv, paired.csv, report.md, report.html and the figures into ``out_dir``.

    ``target_acc`` is the validation accuracy for time-to-target; by default each group uses
    ``groups.TARGET_FRACTION`` of its matched static baseline's mean final ``val/acc`` (no
    baseline: no target).
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

    blocks = sections.document(comp_df, groups, paths, ordering_rows(groups))
    if any(g.has("test/flops_ratio") for g in groups):
        comparison_plots.exit_curves(groups, exit_curves or {}, colours, paths.exit_curves_png)
        blocks += sections.exits(groups, paths)
    paths.report_md.write_text(to_markdown(blocks), encoding="utf-8")
    paths.report_html.write_text(to_html(blocks, out_dir, sections.TITLE), encoding="utf-8")
    return paths

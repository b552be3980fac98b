"""The files a report writes into its folder."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path


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

"""The comparison report of the evaluate step: every configuration against the static network
with the same final architecture, over seeds, with intervals and paired tests.

``collect_runs`` reads finished training runs from MLflow; ``build_report`` is a pure function
of what it returns and writes ``comparison.csv``, ``paired.csv``, ``report.md``, a
self-contained ``report.html`` and the figures into a folder. Along the way:

- ``runs``: reading the runs, and the *setting* of each (runs compare only within one);
- ``groups``: runs grouped by variant and final architecture, each with its static baseline;
- ``comparison``: the paired statistics against the baseline and the random-order control;
- ``wording``: the Conclusion and the verdicts; ``sections``: the report as blocks;
- ``metrics``: what is compared and how it prints; ``paths``: the files written;
- ``build``: ``build_report`` itself;
- the figures are in ``pipeline/report/comparison_plots.py``, the rendering in ``pipeline/report/render.py``.
"""

import importlib

__all__ = ["ReportPaths", "build_report", "collect_runs"]  # what evaluate uses
_HOMES = {"ReportPaths": "paths", "build_report": "build", "collect_runs": "runs"}


def __getattr__(name: str):
    # Loaded when first asked for: the report brings MLflow (through ``runs``) and matplotlib,
    # which ``python -m pipeline.study.join`` and the pure modules that import a submodule of
    # this package (``stats``, ``metrics``) do not need.
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)

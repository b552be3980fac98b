"""study: comparison grids at equal cost, with their protocol, as a pipeline step.

``python -m pipeline.study`` runs ``command.main``. The package, in the order a study uses it:

- ``config``: the options (``GridConfig``, ``StudyConfig``);
- ``grid``: arms, budgets, seeds and the cells and comparisons they make (pure);
- ``protocol``: which seeds may confirm, the preregistration, Holm's correction, labels (pure);
- ``command``: the click command; opens the parent run, queues the cells, starts workers,
  evaluates a confirmation and logs the report;
- ``queue``: the cells as enqueued Optuna trials, taken by workers with heartbeats and retries;
- ``cell``: one cell trained in this process, a child run of the study;
- ``report``: the comparison table, the frontier and the figure from the cells' rows (pure);
- ``join``: several studies of one grid, on different seeds, read as one report.
"""

import importlib

__all__ = ["CONFIGS", "ENTRY_POINT", "main"]
_HOMES = {"CONFIGS": "command", "main": "command", "ENTRY_POINT": "config"}


def __getattr__(name: str):
    # Loaded when first asked for: the command brings Optuna and every training step, which
    # ``python -m pipeline.study.join`` and the pure modules above do not need (about 1.3 s of
    # a join's imports; MLflow stays out too, since pipeline.report loads its runs lazily).
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)

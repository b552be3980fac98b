"""tune: an Optuna study over growth schedules, curriculum pacing and the learning rate.

``python -m pipeline.tune`` runs ``command.main``. The package, in the order a study uses it:

- ``config``: the options (``SpaceConfig``, ``StudyConfig``) and their choices;
- ``command``: the click command; opens the study's parent MLflow run, starts the workers,
  logs the report and registers the best trial's model;
- ``study``: the Optuna side shared by every worker process: storages with heartbeats,
  samplers, pruners, the study's definition that workers must agree on;
- ``worker``: one worker process running trials, each a nested MLflow run;
- ``search_space``: an Optuna trial -> a growth schedule, a pacing and a learning rate (pure);
- ``report``: the study report, a function of the Optuna study alone (no MLflow).
"""

from pipeline.tune.command import main
from pipeline.tune.config import CONFIGS, ENTRY_POINT

__all__ = ["CONFIGS", "ENTRY_POINT", "main"]

"""study's options: the grid's (``GridConfig``) and the study's (``StudyConfig``), beside the
data and training options (the recipe every arm shares), and how a study recorded by an earlier
version of the step is read. Imports none of the study's modules but the grid, the protocol and
the recipes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.cli import ConfigError, added_at_default, opt
from pipeline.codec import flat_params
from pipeline.data.config import DataConfig
from pipeline.study.grid import ARMS, parse_arms, parse_budget, parse_seeds
from pipeline.study.protocol import PHASES
from pipeline.study.recipes import RECIPES, recipe
from pipeline.training.config import before_options

ENTRY_POINT = "study"


@dataclass(frozen=True)
class GridConfig:
    arms: str = opt(
        "static,dynamic",
        f"arms, comma-separated: {', '.join(ARMS)} (static is the reference); an arm trains at "
        "every one of --budgets unless it names its own: dynamic-random@epochs, dynamic@epochs+seconds",
    )
    budgets: str = opt(
        "epochs,flops:0.5,flops:1,seconds",
        "budgets the arms train at, comma-separated: epochs (--epochs each), flops:F (F times the "
        "training FLOPs of static at --epochs, the reference run, which always trains) or seconds "
        "(the same seed's reference run's seconds that trained)",
    )
    seeds: str = opt("", "seeds, e.g. 300-304 or 300,302 (required)")
    start_spec: str = opt("minimal", "the growing arms' start network (name, JSON file or string)")
    schedule: str = opt("default", "the growth schedule; static trains the network it ends in")
    scores_run: str = opt("auto", "score_difficulty run id or runs:/ URI; auto: the newest one for this data")
    recipe: str = opt(
        "base", f"a named lever over the options above, on every arm it concerns: {', '.join(RECIPES)}"
    )

    def parsed(self):
        recipe(self.recipe)  # refused before anything runs
        return (
            parse_arms(self.arms),
            tuple(parse_budget(b) for b in self.budgets.split(",")),
            parse_seeds(self.seeds),
        )


@dataclass(frozen=True)
class StudyConfig:
    study_name: str = opt("study", "the study's name; running it again trains only its missing cells")
    phase: str = opt(
        "screen",
        "screen (validation accuracy only; its seeds become tuning seeds) or confirm (test "
        "accuracy through evaluate, once per run; preregistered; refuses seeds that gated a choice "
        "or that a screen, tune or other confirm study spent)",
    )
    storage: str = opt(
        "",
        "Optuna storage URL that hands out the cells (sqlite:///f.db, postgresql://...); empty: "
        "optuna.db by the MLflow store",
    )
    workers: int = opt(1, "worker processes on this machine, each training one cell at a time")
    worker: bool = opt(False, "join an existing study as worker(s) only: no parent run or report of its own")
    heartbeat_interval: int = opt(30, "seconds between a worker's heartbeats for its cell")
    grace_period: int = opt(120, "seconds without a heartbeat after which a cell is failed and queued again")
    max_retry: int = opt(3, "times a cell whose worker died is queued again")
    wait_s: float = opt(600.0, "with --worker: seconds to wait for the study to appear")
    stop_after_hours: float = opt(
        0.0,
        "take no new cell once this many hours have passed since this command started (0: no "
        "limit); cells under way finish and the rest stay queued for the same command again",
    )
    run_name: str = opt("", "MLflow run name of the study's parent run; empty: study-<name>")
    experiment_name: str = opt(
        "", "MLflow experiment of the study and its cells; empty: growing-cnn (a worker: its study's)"
    )

    def validate(self) -> StudyConfig:
        if self.phase not in PHASES:
            raise ConfigError(f"--phase {self.phase!r}: use one of {', '.join(PHASES)}")
        if not self.study_name.strip():
            raise ConfigError("--study-name is empty: name the study")
        if self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}")
        if self.heartbeat_interval < 1 or self.grace_period <= self.heartbeat_interval:
            raise ConfigError(
                f"--grace-period {self.grace_period} must exceed --heartbeat-interval "
                f"{self.heartbeat_interval} "
                "(both positive seconds), or a live worker's cell would be taken from it"
            )
        if self.max_retry < 0:
            raise ConfigError(f"--max-retry must be 0 or more, got {self.max_retry}")
        if not (self.stop_after_hours >= 0 and math.isfinite(self.stop_after_hours * 3600)):
            raise ConfigError(
                f"--stop-after-hours must be 0 (no limit) or a positive number of hours, got "
                f"{self.stop_after_hours}"
            )
        return self

    def deadline(self, started: float) -> float | None:
        """The ``time.monotonic()`` after which no new cell is taken, for a command that started
        at ``started``; None without a limit."""
        return started + self.stop_after_hours * 3600 if self.stop_after_hours else None


def added_since(mine: dict, theirs: dict) -> set[str]:
    """The options of ``mine`` (what trains, as ``flat_params`` spells it) that ``theirs``, a
    study's record written by an earlier version of the step, lacks while ``mine`` has them at
    their default, or at what trained before it where that is not its default
    (``added_at_default``, ``before_options``): a study recorded then is the same study now."""
    return added_at_default(mine, theirs, flat_params(DataConfig(), before_options(), GridConfig()))


def differs(mine: dict, theirs: dict) -> list[str]:
    """The options in which ``mine`` and a study's record ``theirs`` differ, sorted (empty: the
    same), an option added since counting as the same at its default (``added_since``)."""
    added = added_since(mine, theirs)
    return sorted(k for k in set(mine) | set(theirs) if k not in added and mine.get(k) != theirs.get(k))

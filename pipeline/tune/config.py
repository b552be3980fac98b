"""tune's options and their choices: the search space's (``SpaceConfig``) and the study's
(``StudyConfig``), beside the data and training options every trial shares. The command, the
study and the worker all read them; this module imports none of those."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.growth import DEFAULT_GROWTH_INIT
from pipeline.cli import ConfigError, opt, option_name
from pipeline.data.config import DataConfig
from pipeline.run.logged_model import registry_name_problem
from pipeline.training.config import TrainConfig, before_options
from pipeline.tune import search_space

ENTRY_POINT = "tune"

OBJECTIVES = {"acc": ("val/acc",), "acc+time": ("val/acc", "time/cumulative_s")}
PRUNERS = ("hyperband", "median", "none")
SAMPLERS = ("tpe", "random")


@dataclass(frozen=True)
class SpaceConfig:
    start_spec: str = opt("minimal", "architecture every trial starts from (name, JSON file or string)")
    growth_init: str = opt(
        DEFAULT_GROWTH_INIT,
        "what new layers start as: random (a fresh layer's init, then the re-warm) or preserve (an "
        "identity where possible: the grown network computes the same function at first)",
    )
    max_events: int = opt(4, "most growth events a trial's schedule may have (0 .. this many)")
    layer_types: str = opt(
        search_space.DEFAULT_LAYER_TYPES, "layer types a growth event may add (comma-separated)"
    )
    pacings: str = opt(
        "none,tiers,linear,root", "curriculum pacings to search; without difficulty scores only none is kept"
    )
    scores_run: str = opt("auto", "score_difficulty run id or runs:/ URI; auto: the newest one for this data")
    difficulty_score: str = opt("loss", "scores-table column that orders examples by difficulty")
    lr_factor: float = opt(
        4.0, "learning rate searched log-uniformly in [lr / lr_factor, lr * lr_factor]; 1: fixed"
    )


@dataclass(frozen=True)
class StudyConfig:
    study_name: str = opt("tune", "Optuna study name; an existing study of this name is resumed")
    storage: str = opt(
        "", "Optuna storage URL (sqlite:///f.db, postgresql://...); empty: optuna.db by the MLflow store"
    )
    n_trials: int = opt(20, "trials the study should reach in all, counting other workers' and earlier runs'")
    objectives: str = opt(
        "acc", "acc (validation accuracy, pruned) or acc+time (and wall-clock: Pareto front)"
    )
    pruner: str = opt(
        "hyperband", "hyperband, median or none; acc+time needs none (Optuna prunes one objective)"
    )
    sampler: str = opt("tpe", "tpe or random")
    sampler_seed: int = opt(-1, "sampler seed, -1 for a random one; worker k of --workers uses seed + k")
    workers: int = opt(1, "worker processes on this machine sharing the study")
    worker: bool = opt(False, "join an existing study as worker(s) only: no parent run or report of its own")
    heartbeat_interval: int = opt(20, "seconds between a running trial's heartbeats (RDB storages)")
    grace_period: int = opt(60, "seconds without a heartbeat after which a trial is failed and retried")
    max_retry: int = opt(2, "how often the trial of a worker that died is retried")
    wait_s: int = opt(300, "how long --worker waits for the study and its parent run to appear")
    run_name: str = opt("", "name of the study's parent MLflow run; empty: tune-<study name>")
    experiment_name: str = opt("", "MLflow experiment of the study's runs; empty: growing-cnn")
    registered_model: str = opt(
        "", "Model Registry name for the best trial's model, alias champion; empty: growing-cnn-<study name>"
    )

    def validate(self) -> StudyConfig:
        if self.objectives not in OBJECTIVES:
            raise ConfigError(f"--objectives {self.objectives!r}: use one of {', '.join(OBJECTIVES)}")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"--pruner {self.pruner!r}: use one of {', '.join(PRUNERS)}")
        if self.pruner != "none" and self.objectives != "acc":
            raise ConfigError(
                f"--pruner {self.pruner} needs --objectives acc: Optuna cannot prune a study with "
                "two objectives; pass --pruner none"
            )
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"--sampler {self.sampler!r}: use one of {', '.join(SAMPLERS)}")
        for name in ("workers", "heartbeat_interval", "grace_period"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{option_name(name)} must be positive, got {getattr(self, name)}")
        if self.grace_period <= self.heartbeat_interval:
            raise ConfigError(
                f"--grace-period {self.grace_period} must exceed --heartbeat-interval "
                f"{self.heartbeat_interval}, or live trials would be failed"
            )
        if self.n_trials < 0 or self.max_retry < 0 or self.wait_s < 0:
            raise ConfigError("--n-trials, --max-retry and --wait-s must be 0 or more")
        if not self.study_name.strip():
            raise ConfigError("--study-name must not be empty")
        if problem := registry_name_problem(self.registry_name):
            if self.registered_model:
                raise ConfigError(f"--registered-model: {problem}")
            raise ConfigError(f"--study-name, in the model's name: {problem}; pass --registered-model")
        return self

    @property
    def registry_name(self) -> str:
        """The Model Registry name of the best trial's model."""
        return self.registered_model or f"growing-cnn-{self.study_name}"


CONFIGS = (DataConfig, TrainConfig, SpaceConfig, StudyConfig)


def definition(
    data_cfg: DataConfig, train_cfg: TrainConfig, space_cfg: SpaceConfig, study_cfg: StudyConfig
) -> dict:
    """The options every worker of a study must share (machine-local ones left out)."""
    local = {"data_dir", "device", "eval_batch_size", "scores_run"}
    shared = {"objectives", "pruner", "sampler"}
    out = {}
    for cfg in (data_cfg, train_cfg, space_cfg):
        out.update({k: v for k, v in dataclasses.asdict(cfg).items() if k not in local})
    out.update({k: v for k, v in dataclasses.asdict(study_cfg).items() if k in shared})
    return out


def definition_before_options() -> dict:
    """``definition`` as a study created before an option existed trained: at every option's
    default, or at what trained before it where that is not its default (``before_options``)."""
    return definition(DataConfig(), before_options(), SpaceConfig(), StudyConfig())

"""main: the whole study in one command: score the data, run the preset's study (static, the
growing network and their controls, at equal epochs and equal cost), evaluate.

    mlflow run . --env-manager local                  # the quick preset (about 14 min on 2 cores)
    mlflow run . --env-manager local -P preset=full   # the full study

Each step is its own MLflow run started through ``mlflow run`` (so ``--env-manager`` reaches
it), and steps talk only through parameters and run ids: score_difficulty, then a ``study`` step
per growth schedule and label-noise level (its cells, the training runs, its children), then
evaluate over every cell. A step whose entry point, parameters (compared as values, so 12, 12.0
and "12" agree), code version, upstream run ids and dataset digest all match a FINISHED run is
not run again: that run is reused, and main says so. A study stopped midway keeps its finished
cells: main run again trains only the missing ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import click
import mlflow

from models.errors import UserError
from pipeline.cli import ConfigError, build_config, config_options, help_text, opt
from pipeline.codec import flat_params
from pipeline.data.config import DataConfig, dataset_name
from pipeline.data.dataset import Data
from pipeline.data.label_noise import check_noise
from pipeline.data.splits import load_data
from pipeline.precision import PRECISIONS
from pipeline.run.logged_model import registry_name_problem
from pipeline.study.command import final_network
from pipeline.study.config import GridConfig
from pipeline.study.grid import Budget, parse_budget, parse_seeds
from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.runs import tracked_run
from pipeline.training.config import TrainConfig
from pipeline.workflow.conclusion import record_outcome
from pipeline.workflow.presets import PRESETS, Preset, smoke_caveat, start_of
from pipeline.workflow.steps import StepRunner
from pipeline.workflow.studies import noise_label, run_studies

ENTRY_POINT = "main"
ENV_MANAGERS = ("local", "virtualenv", "uv", "conda")
EQUAL_FLOPS = Budget("flops", 1.0)


@dataclass(frozen=True)
class MainConfig:
    preset: str = opt("quick", "quick (minutes on a laptop), full (the whole study) or noise (label noise)")
    dataset: str = opt("fashion-mnist", "dataset of every step (see train_static --help)")
    data_dir: str = opt("", "where the dataset files are; empty: found automatically")
    seeds: str = opt("", "seeds, e.g. 0,1,2 or 300-304; empty: the preset's")
    epochs: int = opt(0, "training epochs; 0: the preset's")
    subset: int = opt(-1, "stratified examples per split; -1: the preset's, 0: all data")
    env_manager: str = opt("local", "environment manager for the steps: local, virtualenv, uv or conda")
    precision: str = opt("auto", "autocast precision of training and scoring steps: auto, fp32, bf16, fp16")
    # The training recipe of every training step, static and dynamic alike, so each arm stays the
    # other's matched control; the defaults are the steps' own.
    augment: str = opt(
        TrainConfig.augment, "batch augmentation of every training step (see train_static --help)"
    )
    label_smoothing: float = opt(TrainConfig.label_smoothing, "label smoothing of every training step")
    mixup: float = opt(TrainConfig.mixup, "mixup alpha of every training step (0: none)")
    weight_decay: float = opt(TrainConfig.weight_decay, "L2 weight decay of every training step")
    ema_decay: float = opt(
        TrainConfig.ema_decay, "weight-average decay of every training step (see train_static --help)"
    )
    tta: str = opt(TrainConfig.tta, "test-time augmentation of every training step: none, flip or flip+shift")
    experiment_name: str = opt("", "MLflow experiment of main and its steps; empty: growing-cnn")
    registered_model: str = opt(
        "",
        "Model Registry name for the best model (by validation accuracy), alias champion; "
        "empty: growing-cnn-<dataset>",
    )
    label_noise: str = opt("", "comma-separated label-noise rates in [0, 1); empty: the preset's")
    noise_kind: str = opt("", "symmetric or asymmetric label noise; empty: the preset's")
    equal_flops: str = opt(
        "", "true or false: every run again at the static run's training FLOPs; empty: the preset's"
    )
    workers: int = opt(1, "worker processes of each study, each training one run at a time")


CONFIGS = (MainConfig,)


def resolve_preset(cfg: MainConfig) -> Preset:
    if cfg.preset not in PRESETS:
        raise UpstreamError(f"--preset {cfg.preset!r}: use one of {', '.join(PRESETS)}")
    if cfg.env_manager not in ENV_MANAGERS:
        raise UpstreamError(f"--env-manager {cfg.env_manager!r}: use one of {', '.join(ENV_MANAGERS)}")
    if cfg.precision not in PRECISIONS:
        raise UpstreamError(f"--precision {cfg.precision!r}: use one of {', '.join(PRECISIONS)}")
    preset = PRESETS[cfg.preset]
    # the study's own reading (300-304, 300,302), refused here rather than after scoring
    seeds = parse_seeds(cfg.seeds) if cfg.seeds.strip() else preset.seeds
    if problem := registry_name_problem(champion_name(cfg)):
        raise UpstreamError(f"--registered-model {champion_name(cfg)!r}: {problem}")
    if cfg.epochs < 0 or cfg.subset < -1:
        raise UpstreamError("--epochs must be >= 0 and --subset >= -1")
    try:
        rates = tuple(float(r) for r in cfg.label_noise.split(",")) if cfg.label_noise.strip() else None
    except ValueError:
        raise UpstreamError(f"--label-noise {cfg.label_noise!r} must be rates separated by commas") from None
    if cfg.equal_flops not in ("", "true", "false"):
        raise UpstreamError(f"--equal-flops {cfg.equal_flops!r}: use true, false or leave it empty")
    if cfg.workers < 1:
        raise UpstreamError(f"--workers must be at least 1, got {cfg.workers}")
    epochs = cfg.epochs or preset.epochs
    budgets = [parse_budget(b) for b in preset.budgets.split(",")]
    if cfg.equal_flops:
        budgets = [b for b in budgets if b != EQUAL_FLOPS]
        budgets += [EQUAL_FLOPS] if cfg.equal_flops == "true" else []
    # A budget below one static epoch would leave the grown network too few epochs to grow in.
    too_small = [b for b in budgets if b.kind == "flops" and b.fraction * epochs < 1]
    if too_small:
        click.echo(
            f"main: no runs at {', '.join(b.label for b in too_small)} of static's training FLOPs: "
            f"at {epochs} epochs that is less than one epoch of static training",
            err=True,
        )
    preset = dataclasses.replace(
        preset,
        budgets=",".join(b.label for b in budgets if b not in too_small),
        seeds=seeds,
        epochs=epochs,
        subset=preset.subset if cfg.subset == -1 else cfg.subset,
        label_noise=rates or preset.label_noise,
        noise_kind=cfg.noise_kind or preset.noise_kind,
    )
    for rate in preset.label_noise:  # every level's noise is refused before any step runs
        check_noise(noise_config(cfg, preset, rate))
    return preset


def champion_name(cfg: MainConfig) -> str:
    """The Model Registry name of main's best model: ``--registered-model``, or one for the data."""
    return cfg.registered_model or f"growing-cnn-{dataset_name(cfg.dataset)}"


RECIPE = ("augment", "label_smoothing", "mixup", "weight_decay", "ema_decay", "tta")


def training_options(cfg: MainConfig) -> dict:
    """The options main gives every training step: its precision, and the recipe options that
    differ from the steps' defaults (those at their default are left out, so the steps keep the
    parameters, and main's reuse of them, they had before main passed a recipe)."""
    recipe = {name: getattr(cfg, name) for name in RECIPE}
    try:  # refused before any step runs, in the steps' own words
        dataclasses.replace(TrainConfig(), **recipe).validate()
    except ConfigError as err:
        raise UpstreamError(str(err)) from None
    changed = {name: value for name, value in recipe.items() if value != getattr(TrainConfig, name)}
    return {"precision": cfg.precision, **changed}


def noise_config(cfg: MainConfig, preset: Preset, rate: float) -> DataConfig:
    """The data of every step at one label-noise rate."""
    return DataConfig(
        dataset=cfg.dataset,
        data_dir=cfg.data_dir,
        subset=preset.subset,
        label_noise=rate,
        noise_kind=preset.noise_kind,
    )


def check_schedules(preset: Preset, data: Data) -> None:
    """Every schedule grows its start network at the preset's length, before scoring runs."""
    for schedule in preset.schedules:
        try:
            final_network(GridConfig(start_spec=start_of(schedule), schedule=schedule), preset.epochs, data)
        except UserError as err:
            raise UpstreamError(f"--epochs {preset.epochs}: schedule {schedule!r}: {err}") from None


def run(cfg: MainConfig) -> str:
    preset = resolve_preset(cfg)
    options = training_options(cfg)
    # Every level's data is validated before anything runs; its digest keys the steps' reuse.
    levels = {rate: load_data(noise_config(cfg, preset, rate)) for rate in preset.label_noise}
    check_schedules(preset, next(iter(levels.values())))
    with tracked_run(
        ENTRY_POINT,
        flat_params(
            cfg,
            {
                "resolved_seeds": list(preset.seeds),
                "resolved_epochs": preset.epochs,
                "resolved_subset": preset.subset,
                "resolved_label_noise": list(preset.label_noise),
                "resolved_noise_kind": preset.noise_kind,
                "resolved_budgets": preset.budgets,
            },
        ),
        run_name=f"main-{cfg.preset}",
        experiment_name=cfg.experiment_name,
    ) as active:
        step = StepRunner(cfg.env_manager, active.info.experiment_id, active.info.run_id, "")
        # The studies' cells go where main and its steps are.
        experiment = mlflow.get_experiment(active.info.experiment_id).name
        study_options = {**options, "workers": cfg.workers, "experiment_name": experiment}
        scores, training = {}, []
        for rate, data in levels.items():
            step.data_digest = data.digest
            data_params = {"dataset": cfg.dataset, "data_dir": cfg.data_dir, "subset": preset.subset}
            if rate or preset.noise_kind != "symmetric":
                data_params.update(label_noise=rate, noise_kind=preset.noise_kind)
            scores[rate] = step(
                "score_difficulty",
                **data_params,
                precision=cfg.precision,
                run_name=f"score-difficulty-{cfg.preset}{noise_label(rate, preset.noise_kind)}",
            )
            training += run_studies(step, cfg.preset, preset, data_params, scores[rate], study_options)
        evaluation = step("evaluate", runs=",".join(training), run_name=f"evaluate-{cfg.preset}")
        record_outcome(step, training, scores, evaluation, champion_name(cfg), smoke_caveat(preset))
        return active.info.run_id


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    run(build_config(MainConfig, values))


if __name__ == "__main__":
    main()

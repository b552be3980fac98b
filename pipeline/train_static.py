"""train_static: train one fixed architecture, optionally with a curriculum, and log everything.

python -m pipeline.train_static --spec default --epochs 12
mlflow run . -e train_static --env-manager local -P spec=minimal -P pacing=tiers
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from models.spec import ArchSpec, resolve_spec
from pipeline.cli import build_config, config_options, help_text, opt
from pipeline.curriculum.config import CurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.splits import load_data
from pipeline.exits import ExitConfig, refuse_tta_with_exits, with_exits
from pipeline.run.length import resolve_run_length
from pipeline.run.plan import ExperimentPlan, stages
from pipeline.run.request import TrainingRequest, run_training
from pipeline.run.session import RunConfig, TrainingOutcome
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.training.config import TrainConfig
from pipeline.training.stem import refuse_without_stem

ENTRY_POINT = "train_static"


@dataclass(frozen=True)
class StaticConfig:
    spec: str = opt("default", "architecture: a registered name, a JSON file or a JSON string")


CONFIGS = (DataConfig, TrainConfig, StaticConfig, CurriculumConfig, RunConfig, ExitConfig)


def prepare(
    data_cfg: DataConfig, train_cfg: TrainConfig, static_cfg: StaticConfig, exit_cfg: ExitConfig | None = None
) -> tuple[Data, ArchSpec]:
    """Validate options, data and spec (with its exits) before any training."""
    train_cfg.validate()
    exit_cfg = (exit_cfg or ExitConfig()).validate()
    data = load_data(data_cfg)
    spec = resolve_spec(static_cfg.spec, data.input_shape, data.num_classes)
    spec = with_exits(spec, exit_cfg.exits, train_cfg.epochs)
    refuse_tta_with_exits(spec, train_cfg.tta)
    refuse_without_stem(spec, train_cfg.whiten_bias_epochs)
    exit_cfg.thresholds_for(spec)  # a wrong count fails now, not after training
    return data, spec


def run(
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    static_cfg: StaticConfig,
    curriculum_cfg: CurriculumConfig | None = None,
    run_cfg: RunConfig | None = None,
    exit_cfg: ExitConfig | None = None,
) -> TrainingOutcome:
    curriculum_cfg = curriculum_cfg or CurriculumConfig()
    run_cfg = run_cfg or RunConfig()
    exit_cfg = exit_cfg or ExitConfig()
    run_cfg.apply_size_limits(train_cfg)  # before any network is built, FLOPs counting too
    data, spec = prepare(data_cfg, train_cfg, static_cfg, exit_cfg)

    no_growth = stages(data, spec, lambda _epochs: [], curriculum_cfg, train_cfg.epochs)
    length = resolve_run_length(train_cfg, data, spec, no_growth, run_cfg.resume)
    setup = length.setup
    plan = ExperimentPlan(
        length.train_cfg,
        data,
        curriculum=setup.curriculum,
        pruner=setup.pruner,
        exit_weights=exit_cfg.weights_for(len(spec.exits)) if spec.exits else None,
    )
    request = TrainingRequest(
        ENTRY_POINT,
        data,
        start=spec,
        final=spec,
        plan=plan,
        length=length,
        configs=(data_cfg, train_cfg, static_cfg, curriculum_cfg, run_cfg, exit_cfg),
        run_cfg=run_cfg,
        exit_cfg=exit_cfg,
        kind="static",
    )
    return run_training(request)


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    click.echo(run(*(build_config(cls, values) for cls in CONFIGS)).summary())


if __name__ == "__main__":
    main()

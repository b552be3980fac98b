"""train_dynamic: a network that grows while a curriculum feeds it harder data.

    python -m pipeline.train_dynamic --schedule default --pacing tiers
    mlflow run . -e train_dynamic --env-manager local -P schedule=early -P order=random

The run starts from ``--start-spec`` (the minimal model), applies the growth ``--schedule``
before the epochs its events name, and ends with the schedule's final spec, which train_static
can train directly (tag ``final_spec``) for a matched comparison.
"""

from __future__ import annotations

import click

from models.schedule import NAMED_SCHEDULES, validate_schedule
from models.spec import ArchSpec, resolve_spec
from pipeline.budget.plan import written_schedule
from pipeline.cli import build_config, config_options, help_text
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.splits import load_data
from pipeline.exits import ExitConfig, refuse_tta_with_exits, with_exits
from pipeline.growth.config import GrowthConfig
from pipeline.run.length import resolve_run_length
from pipeline.run.plan import ExperimentPlan, stages
from pipeline.run.request import TrainingRequest, run_training
from pipeline.run.session import RunConfig, TrainingOutcome
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.training.config import TrainConfig
from pipeline.training.stem import refuse_without_stem

ENTRY_POINT = "train_dynamic"
CONFIGS = (DataConfig, TrainConfig, GrowthConfig, DynamicCurriculumConfig, RunConfig, ExitConfig)


def prepare(
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    growth_cfg: GrowthConfig,
) -> tuple[Data, ArchSpec]:
    """Validate options, data and start spec before training (the schedule is checked at each
    run length a budget weighs: ``run/plan.stages``)."""
    train_cfg.validate()
    growth_cfg.validate()
    data = load_data(data_cfg)
    start = resolve_spec(growth_cfg.start_spec, data.input_shape, data.num_classes)
    refuse_without_stem(start, train_cfg.whiten_bias_epochs)  # growth neither adds nor moves a stem
    return data, start


def schedule_label(schedule: str) -> str:
    return schedule if schedule in NAMED_SCHEDULES else "custom"


def run(
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    growth_cfg: GrowthConfig,
    curriculum_cfg: DynamicCurriculumConfig | None = None,
    run_cfg: RunConfig | None = None,
    exit_cfg: ExitConfig | None = None,
) -> TrainingOutcome:
    curriculum_cfg = curriculum_cfg or DynamicCurriculumConfig()
    run_cfg = run_cfg or RunConfig()
    exit_cfg = (exit_cfg or ExitConfig()).validate()
    run_cfg.apply_size_limits(train_cfg)  # before any network is built, FLOPs counting too
    data, start = prepare(data_cfg, train_cfg, growth_cfg)
    events_at = written_schedule(growth_cfg.schedule, train_cfg.epochs)
    growing = stages(data, start, events_at, curriculum_cfg, train_cfg.epochs)
    length = resolve_run_length(train_cfg, data, start, growing, run_cfg.resume)
    events, final, setup = length.events, length.final, length.setup
    # stages: each stage's head becomes an exit as the run grows; named exits sit on the start
    # spec (they must exist from the first epoch) and are carried through growth.
    staged = exit_cfg.exits.strip() == "stages"
    if staged:
        final = with_exits(start, "stages", length.train_cfg.epochs, events)
    else:
        start = with_exits(start, exit_cfg.exits, length.train_cfg.epochs)
        final = validate_schedule(start, events, length.train_cfg.epochs)  # growth must fit the exits
    refuse_tta_with_exits(final, train_cfg.tta)
    exit_cfg.thresholds_for(final)  # a wrong count fails now, not after training
    plan = ExperimentPlan(
        length.train_cfg,
        data,
        events,
        growth_cfg,
        setup.curriculum,
        setup.pruner,
        exit_weights=exit_cfg.weights_for(len(final.exits)) if final.exits else None,
        stage_exits=staged,
    )
    label = schedule_label(growth_cfg.schedule)
    request = TrainingRequest(
        ENTRY_POINT,
        data,
        start=start,
        final=final,
        plan=plan,
        length=length,
        configs=(data_cfg, train_cfg, growth_cfg, curriculum_cfg, run_cfg, exit_cfg),
        run_cfg=run_cfg,
        exit_cfg=exit_cfg,
        kind=f"dynamic-{label}",
        growth_caption=f"schedule {label} from {start.name}, seed {train_cfg.seed}",
    )
    return run_training(request)


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    click.echo(run(*(build_config(cls, values) for cls in CONFIGS)).summary())


if __name__ == "__main__":
    main()

"""train_static: train one fixed architecture and log everything about it.

python -m pipeline.train_static --spec default --epochs 12
mlflow run . -e train_static --env-manager local -P spec=minimal
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from models.spec import ArchSpec, resolve_spec
from pipeline.cli import build_config, config_options, opt
from pipeline.data import Data, DataConfig, load_data
from pipeline.session import TrainingOutcome, train_and_log
from pipeline.tracking import flat_params, log_dataset, main_guard, tracked_run
from pipeline.training import TrainConfig, TrainingPlan

ENTRY_POINT = "train_static"


@dataclass(frozen=True)
class StaticConfig:
    spec: str = opt("default", "architecture: a registered name, a JSON file or a JSON string")
    run_name: str = opt("", "MLflow run name; empty for a generated one")
    resume: str = opt("", "run id of an interrupted train_static run to continue in place")
    progress: bool = opt(True, "show a progress bar per epoch")


CONFIGS = (DataConfig, TrainConfig, StaticConfig)


def prepare(data_cfg: DataConfig, train_cfg: TrainConfig, static_cfg: StaticConfig) -> tuple[Data, ArchSpec]:
    """Validate every input before any training: options, data, spec."""
    train_cfg.validate()
    data = load_data(data_cfg)
    spec = resolve_spec(static_cfg.spec, data.input_shape, data.num_classes)
    return data, spec


def run(data_cfg: DataConfig, train_cfg: TrainConfig, static_cfg: StaticConfig) -> TrainingOutcome:
    data, spec = prepare(data_cfg, train_cfg, static_cfg)
    params = flat_params(data_cfg, train_cfg, static_cfg)
    with tracked_run(
        ENTRY_POINT,
        params,
        run_name=static_cfg.run_name or None,
        run_id=static_cfg.resume or None,
        tags={"spec_name": spec.name},
    ):
        log_dataset(data)
        return train_and_log(
            data,
            spec,
            train_cfg,
            TrainingPlan(),
            resume_run_id=static_cfg.resume,
            entry_point=ENTRY_POINT,
            progress_bar=static_cfg.progress,
        )


@click.command(name=ENTRY_POINT, help=__doc__)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    outcome = run(
        build_config(DataConfig, values),
        build_config(TrainConfig, values),
        build_config(StaticConfig, values),
    )
    last = outcome.state.history[-1]
    click.echo(
        f"val/acc {last['val/acc']:.4f} after {outcome.state.epoch} epochs "
        f"in {outcome.state.cumulative_s:.1f}s"
    )


if __name__ == "__main__":
    main()

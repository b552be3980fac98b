"""One path for a training run: ``train_static`` and ``train_dynamic`` each build a
``TrainingRequest`` (the data, the network it starts and ends as, the plan, how long, what the
run logs) and hand it to ``run_training``, which opens the MLflow run and calls ``fit`` inside
it: entry point, ``run_training``, ``fit``, ``train_one_epoch`` (whose loop takes the steps).

What tells the two apart is the request: a static run starts and ends as one spec and has no
growth figure; a growing run's plan grows ``start`` into ``final``, and its architecture's
evolution is drawn beside the other figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlflow

from models.spec import ArchSpec
from pipeline.codec import flat_params
from pipeline.data.dataset import Data
from pipeline.exits import ExitConfig
from pipeline.run import plots
from pipeline.run.length import RunLength
from pipeline.run.outcome import log_budget
from pipeline.run.plan import ExperimentPlan
from pipeline.run.session import (
    RunConfig,
    TrainingOutcome,
    finish_training,
    log_run_metrics,
    logged_epochs,
    start_training,
    training_run,
)
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.runs import current_run_name
from pipeline.training.epoch_loop import fit
from pipeline.training.probes import standard_probes
from pipeline.training.state import FitState


@dataclass(frozen=True)
class TrainingRequest:
    entry_point: str
    data: Data
    start: ArchSpec  # the network the run begins as
    final: ArchSpec  # the one it ends as: ``start`` for a static run
    plan: ExperimentPlan
    length: RunLength  # the resolved run length; ``length.train_cfg`` is what trains
    configs: tuple  # the entry point's option records as given, logged as its params
    run_cfg: RunConfig
    exit_cfg: ExitConfig
    kind: str  # the variant's first word: "static", or "dynamic-<schedule>"
    # A growing run's figure of its architecture over the epochs, captioned after the run's
    # name ("schedule default from minimal, seed 0"); empty: no figure (a static run).
    growth_caption: str = ""

    @property
    def params(self) -> dict[str, str]:
        return {**flat_params(*self.configs), **self.length.params()}

    @property
    def tags(self) -> dict[str, str]:
        """The networks, the diet's tags and the variant: the kind, the diet's label, exits."""
        setup = self.length.setup
        return {
            "spec_name": self.start.name,
            "final_spec": self.final.to_json(),
            **setup.tags(),
            "variant": self.kind + setup.label() + ("+exits" if self.final.exits else ""),
        }


def run_training(request: TrainingRequest) -> TrainingOutcome:
    """Train ``request`` in an MLflow run of its entry point; the run ends FAILED on any error.
    Each epoch's metrics are logged once a checkpoint holds the epoch, and the final artifacts
    and the model once it has trained (``session.py``)."""
    run_cfg, length, plan = request.run_cfg, request.length, request.plan
    cfg, val_tiers = length.train_cfg, length.setup.val_tiers
    with training_run(request.entry_point, run_cfg, request.params, request.tags, request.data):
        with scratch_dir() as tmp:
            state, device = start_training(request.start, cfg, plan, run_cfg, length, tmp)
            on_device = request.data.to(device)
            start = time.perf_counter()
            with logged_epochs(tmp, cfg) as epochs:
                state = fit(
                    state,
                    on_device,
                    cfg,
                    plan,
                    val_tiers=val_tiers,
                    on_epoch=epochs.log_epoch,
                    checkpoint=epochs.checkpoint,
                    progress_bar=run_cfg.progress,
                    meter=length.meter(),
                    probes=standard_probes(on_device, cfg),
                )
            total_s = time.perf_counter() - start
            model_id = finish_training(
                state, request.data, on_device, cfg, plan, tmp, request.exit_cfg, val_tiers
            )
        log_run_metrics(state, total_s, model_id)
        log_budget(length, state)
        if request.growth_caption:
            _log_growth_figure(state, request.growth_caption)
        grown = state.model.spec
        if state.stop_reason == "epochs" and (grown.layers, grown.exits) != (
            request.final.layers,
            request.final.exits,
        ):
            raise RuntimeError("the trained model differs from the plan's final spec")
        return TrainingOutcome(state, total_s)


def _log_growth_figure(state: FitState, caption: str) -> None:
    """A growing run's figure of its architecture over the epochs."""
    with scratch_dir() as tmp:
        picture = plots.architecture_evolution(
            state.trace.to_dict(), tmp / "architecture_evolution.png", f"{current_run_name()}: {caption}"
        )
        mlflow.log_artifact(str(picture))

"""One path for a training run: ``train_static`` and ``train_dynamic`` each build a
``TrainingRequest`` (the data, the network it starts and ends as, the plan, how long, what the
run logs) and hand it to ``run_training``, which opens the MLflow run and trains inside it.

What tells the two apart is the request: a static run starts and ends as one spec and has no
growth figure; a growing run's plan grows ``start`` into ``final``, and its architecture's
evolution is drawn beside the other figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlflow

from models.spec import ArchSpec
from pipeline.codec import flat_params
from pipeline.data.dataset import Data
from pipeline.exits import ExitConfig
from pipeline.run import plots
from pipeline.run.length import RunLength
from pipeline.run.plan import ExperimentPlan
from pipeline.run.session import RunConfig, TrainingOutcome, train_and_log, training_run
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.runs import current_run_name


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
    """Train ``request`` in an MLflow run of its entry point; the run ends FAILED on any error."""
    run_cfg = request.run_cfg
    with training_run(request.entry_point, run_cfg, request.params, request.tags, request.data):
        outcome = train_and_log(
            request.data,
            request.start,
            request.length.train_cfg,
            request.plan,
            length=request.length,
            resume_run_id=run_cfg.resume,
            entry_point=request.entry_point,
            val_tiers=request.length.setup.val_tiers,
            progress_bar=run_cfg.progress,
            limits=run_cfg,
            exit_cfg=request.exit_cfg,
        )
        if request.growth_caption:
            with scratch_dir() as tmp:
                picture = plots.architecture_evolution(
                    outcome.state.trace.to_dict(),
                    tmp / "architecture_evolution.png",
                    f"{current_run_name()}: {request.growth_caption}",
                )
                mlflow.log_artifact(str(picture))
        grown = outcome.state.model.spec
        if outcome.state.stop_reason == "epochs" and (grown.layers, grown.exits) != (
            request.final.layers,
            request.final.exits,
        ):
            raise RuntimeError("the trained model differs from the plan's final spec")
        return outcome

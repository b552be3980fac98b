"""The experiment plan: how growth and the data diet meet in one ``TrainingPlan`` for ``fit``.

Growth is ``pipeline/growth/`` (its options and ``GrowthPlan``: the events, each new layer
inserted and initialised); the diet is ``pipeline/curriculum/diet_plan.py`` (``DietPlan``: the
curriculum's examples, less what pruning leaves out). Here they only meet: growth happens before
the epoch's examples are chosen (a curriculum that reads the model sees the grown one), a
seconds run's new length is taken only where both agree at the epoch just run, and a checkpoint
holds both. ``train_static`` uses it with no growth (a diet alone), ``train_dynamic`` and
``tune``'s trials with both, so data order and model growth can be compared separately.
``stages`` is where they meet before training: a plan of E epochs, its growth events and the
curriculum built around them, which budgeting asks for at each length it weighs. No MLflow
inside (a curriculum's scores are found by ``curriculum/inputs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict

import torch

from models.builder import SpecNet
from models.schedule import GrowthEvent, schedule_to_json, validate_schedule
from models.spec import ArchSpec
from pipeline.budget.plan import WrittenInEpochs, scaled_curriculum
from pipeline.curriculum.base import Curriculum
from pipeline.curriculum.diet import CurriculumSetup
from pipeline.curriculum.diet_plan import DietPlan
from pipeline.curriculum.inputs import prepare_curriculum
from pipeline.curriculum.pruning import LossPruner
from pipeline.data.dataset import Data
from pipeline.growth.config import GrowthConfig
from pipeline.growth.plan import GrowthPlan
from pipeline.run.length import Stages
from pipeline.training.config import TrainConfig
from pipeline.training.training_plan import TrainingPlan


def stages(
    data: Data,
    start: ArchSpec,
    events_at: Callable[[int], list[GrowthEvent]],
    curriculum_cfg: WrittenInEpochs,
    written_for: int,
) -> Stages:
    """What a run of ``cfg.epochs`` epochs is (``run/length.resolve_run_length`` asks at each
    length a budget weighs): its growth events (``events_at(epochs)``), the final spec they
    reach (every stage checked; with none, ``start``), and the curriculum, written for
    ``written_for`` (``--epochs``) and scaled, built around those events."""

    def build(cfg: TrainConfig) -> tuple[list[GrowthEvent], ArchSpec, CurriculumSetup]:
        events = events_at(cfg.epochs)
        final = validate_schedule(start, events, cfg.epochs)
        diet = scaled_curriculum(curriculum_cfg, written_for, cfg.epochs)
        return events, final, prepare_curriculum(diet, data, cfg, events)

    return build


class ExperimentPlan(TrainingPlan):
    """Grows the model by ``events`` and feeds it the ``curriculum``'s examples each epoch."""

    def __init__(
        self,
        train_cfg: TrainConfig,
        data: Data,
        events: list[GrowthEvent] | None = None,
        growth: GrowthConfig | None = None,
        curriculum: Curriculum | None = None,
        pruner: LossPruner | None = None,
        exit_weights: tuple[float, ...] | None = None,
        stage_exits: bool = False,
    ):
        """``exit_weights``: deep supervision of the model's exits (None: the head alone);
        ``stage_exits``: before each growth, the stage's head becomes an exit."""
        self.cfg = train_cfg
        self.exit_weights = exit_weights
        self.growth = GrowthPlan(train_cfg, data, list(events or []), growth or GrowthConfig(), stage_exits)
        self.diet = DietPlan(train_cfg.epochs, curriculum, pruner)

    def before_epoch(self, epoch, model: SpecNet, optimizer):
        return self.growth.apply_due(epoch, model, optimizer, self.precision)

    def positions(self, epoch: int, model: SpecNet, data: Data) -> torch.Tensor:
        return self.diet.positions(epoch, model, data)

    def example_weights(self, epoch: int) -> torch.Tensor | None:
        return self.diet.weights

    def wants_example_losses(self, epoch: int) -> bool:
        return self.diet.wants_example_losses(epoch)

    def record_losses(self, order: torch.Tensor, losses: torch.Tensor) -> None:
        self.diet.record_losses(order, losses)

    def after_epoch(self, epoch: int, metrics: dict) -> None:
        self.growth.after_epoch(metrics)

    def growth_epochs(self) -> set[int]:
        return self.growth.epochs()

    def replan(self, last_epoch: int, epochs: int, events: list[GrowthEvent], setup) -> bool:
        """Taken only where the new plan had at ``last_epoch`` what this one had: the same growth
        events due and the same diet, so that taking it from the next epoch on moves nothing back."""
        if not (self.growth.agrees(last_epoch, events) and self.diet.agrees(last_epoch, epochs, setup)):
            return False
        self.adopt(epochs, events, setup)
        return True

    def adopt(self, epochs: int, events: list[GrowthEvent], setup) -> None:
        """Go on as a plan of ``epochs`` epochs with these growth events and curriculum setup,
        keeping what the run has gathered (pruning's losses, what self-paced epochs used)."""
        cfg = dataclasses.replace(self.cfg, epochs=epochs)
        self.growth.adopt(cfg, events)
        self.diet.adopt(epochs, setup)
        self.cfg = cfg

    def epoch_info(self, epoch: int) -> dict[str, float]:
        return {"growth/events_applied": float(self.growth.applied), **self.diet.epoch_info(epoch)}

    def state_dict(self) -> dict:
        return {**self.growth.state_dict(), **self.diet.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.growth.load_state_dict(state)
        self.diet.load_state_dict(state)

    def tensor_state(self) -> dict[str, torch.Tensor]:
        return self.diet.tensor_state()

    def load_tensor_state(self, state: dict[str, torch.Tensor]) -> None:
        self.diet.load_tensor_state(state)

    def to_dict(self) -> dict:
        growing = bool(self.growth.events)
        diet = self.diet.to_dict()
        return {
            "kind": "dynamic" if growing else "static",
            "epochs": self.cfg.epochs,  # as last planned: a seconds run re-plans as it trains
            "growth": asdict(self.growth.config) if growing else None,
            "schedule": schedule_to_json(self.growth.events) if growing else None,
            "curriculum": diet["curriculum"],
            "pruning": diet["pruning"],
            "exit_weights": list(self.exit_weights) if self.exit_weights is not None else None,
            "stage_exits": self.growth.stage_exits,
            "curriculum_schedule": diet["curriculum_schedule"],
        }

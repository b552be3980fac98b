"""A run's data diet as it trains: the curriculum chooses each epoch's examples, loss-aware
pruning leaves out part of what is learned and weights the rest (``diet.py`` builds both from
the run's options). No MLflow inside.
"""

from __future__ import annotations

import torch

from models.builder import SpecNet
from pipeline.curriculum.base import Curriculum
from pipeline.curriculum.pruning import LossPruner
from pipeline.data.dataset import Data


class DietPlan:
    """The examples of each epoch of an ``epochs``-epoch run: the ``curriculum``'s (every one
    without it), less what the ``pruner`` leaves out."""

    def __init__(self, epochs: int, curriculum: Curriculum | None = None, pruner: LossPruner | None = None):
        self.epochs = epochs
        self.curriculum = curriculum
        self.pruner = pruner
        self.weights: torch.Tensor | None = None  # (N,) loss weights of this epoch, from pruning

    def positions(self, epoch: int, model: SpecNet, data: Data) -> torch.Tensor:
        if self.curriculum is None:
            chosen = torch.arange(len(data.train))
        else:
            chosen = self.curriculum.positions(epoch, model, data)
        if self.pruner is None:
            return chosen
        kept, self.weights = self.pruner.select(epoch, self.epochs, chosen)
        return kept

    def wants_example_losses(self, epoch: int) -> bool:
        return self.pruner is not None and self.pruner.needs_losses(epoch, self.epochs)

    def record_losses(self, order: torch.Tensor, losses: torch.Tensor) -> None:
        self.pruner.record(order, losses)

    def agrees(self, epoch: int, epochs: int, setup) -> bool:
        """Whether the diet of a plan of ``epochs`` epochs (``setup``: its curriculum and pruner)
        had at ``epoch`` what this one had: the same curriculum stage and size, pruning alike
        (and alike wanting the epoch's losses)."""
        mine, theirs = self.curriculum, setup.curriculum
        if (mine is None) != (theirs is None) or (mine and mine.stage_of(epoch) != theirs.stage_of(epoch)):
            return False
        if self.pruner is None or setup.pruner is None:
            return self.pruner is setup.pruner
        return all(
            getattr(self.pruner, ask)(epoch, self.epochs) == getattr(setup.pruner, ask)(epoch, epochs)
            for ask in ("active", "needs_losses")
        )

    def adopt(self, epochs: int, setup) -> None:
        """Go on with ``setup``'s curriculum and pruner for ``epochs`` epochs, keeping what the run
        has gathered (pruning's losses, what self-paced epochs used)."""
        if self.curriculum is not None:
            setup.curriculum.continue_from(self.curriculum)
        if self.pruner is not None:
            setup.pruner.load_state_dict(self.pruner.state_dict())
        self.epochs, self.curriculum, self.pruner = epochs, setup.curriculum, setup.pruner

    def epoch_info(self, epoch: int) -> dict[str, float]:
        info = dict(self.curriculum.epoch_info(epoch)) if self.curriculum is not None else {}
        if self.pruner is not None:
            info["curriculum/pruned_share"] = self.pruner.pruned_share
        return info

    def state_dict(self) -> dict:
        return {"curriculum": self.curriculum.state_dict() if self.curriculum else None}

    def load_state_dict(self, state: dict) -> None:
        if self.curriculum is not None and state["curriculum"] is not None:
            self.curriculum.load_state_dict(state["curriculum"])

    def tensor_state(self) -> dict[str, torch.Tensor]:
        return self.pruner.state_dict() if self.pruner is not None else {}

    def load_tensor_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.pruner is not None:
            self.pruner.load_state_dict(state)

    def to_dict(self) -> dict:
        return {
            "curriculum": self.curriculum.to_dict() if self.curriculum else {"pacing": "none"},
            "pruning": self.pruner.to_dict() if self.pruner else None,
            "curriculum_schedule": self.curriculum.schedule_table() if self.curriculum else None,
        }

"""What a run tells the epoch loop (``pipeline/training/epoch_loop.fit``) before and after each
epoch: the ``TrainingPlan``. The base class is static training (no growth, every example, every
epoch); a growing run's plan (``pipeline/run/plan.ExperimentPlan``) overrides the growth and
the epoch's examples. No MLflow inside.
"""

from __future__ import annotations

import torch

from models.builder import SpecNet
from pipeline.data.dataset import Data


class TrainingPlan:
    """Static training: no growth, every training example each epoch.

    Subclasses override ``before_epoch`` to grow the model and ``positions`` to choose the
    epoch's examples; their state must be JSON-serialisable so checkpoints can hold it.
    """

    # The run's resolved precision, set by ``fit``: what the plan's own measurements (growth
    # probes) run at, so they see the network as training does.
    precision: str = "fp32"
    # Deep supervision (pipeline/exits.py): the loss weight of each early exit, or None to
    # train the head alone even where the spec has exits.
    exit_weights: tuple[float, ...] | None = None

    def weights_for(self, model: SpecNet) -> tuple[float, ...] | None:
        """The early exits' loss weights for ``model`` (a growing one gains exits), or None."""
        n = len(model.spec.exits)
        return tuple(self.exit_weights[:n]) if n and self.exit_weights is not None else None

    def before_epoch(
        self,
        epoch: int,
        model: SpecNet,
        optimizer: torch.optim.Optimizer,
    ) -> tuple[SpecNet, torch.optim.Optimizer, list[dict]]:
        return model, optimizer, []

    def positions(self, epoch: int, model: SpecNet, data: Data) -> torch.Tensor:
        return torch.arange(len(data.train))

    def fit_positions(self, data: Data) -> torch.Tensor:
        """Training positions whose images a data-fitted layer (a whitening stem) may be fitted
        to before the first step: the whole training split, unless the plan trains on part of
        it only (a cross-fit fold, whose held-out examples it must not have seen)."""
        return torch.arange(len(data.train))

    def example_weights(self, epoch: int) -> torch.Tensor | None:
        """(N,) loss weight per training position for the epoch ``positions`` chose; None: all 1."""
        return None

    def wants_example_losses(self, epoch: int) -> bool:
        """Whether ``record_losses`` should see each example's loss of this epoch."""
        return False

    def record_losses(self, order: torch.Tensor, losses: torch.Tensor) -> None:
        """Each trained position (P,) and its loss (P,) in its step, when asked for."""

    def after_epoch(self, epoch: int, metrics: dict) -> None:
        """Sees each finished epoch's metrics (a plateau trigger decides here)."""

    def growth_epochs(self) -> set[int]:
        """The epochs a growth event is scheduled at (validation reads the whole split around them)."""
        return set()

    def replan(self, last_epoch: int, epochs: int, events: list, setup: object) -> bool:
        """Take a plan of ``epochs`` epochs (its growth ``events`` and curriculum ``setup``) from
        the epoch after ``last_epoch`` on, if it agrees with this one at ``last_epoch``
        (``pipeline/budget/replan.py``); True when taken. Static training places nothing."""
        return True

    def epoch_info(self, epoch: int) -> dict[str, float]:
        """Extra per-epoch metrics, e.g. the share of data in use."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def tensor_state(self) -> dict[str, torch.Tensor]:
        """State too large for JSON (per-example losses); checkpoints hold it as tensors."""
        return {}

    def load_tensor_state(self, state: dict[str, torch.Tensor]) -> None:
        pass

    def to_dict(self) -> dict:
        """A description for the run's artifacts."""
        return {"kind": "static"}

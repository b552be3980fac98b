"""Loss-aware data pruning (InfoBatch, Qin et al. 2024, ICLR): skip examples the model has
already learned, without biasing the gradient. Pure: no MLflow inside.

Each training example keeps the loss it had the last time it was trained on. At the start of
an epoch, among the positions the curriculum chose, the examples whose last loss is below the
mean of those losses are "well learned"; each of them is left out of the epoch with
probability ``rate``, and the ones kept weigh ``1 / (1 - rate)`` in the loss, so the expected
gradient over the well-learned examples is unchanged. Examples never trained on yet are always
kept. The last ``anneal`` fraction of training uses every chosen example at weight 1, as the
paper does, so training ends on the unpruned objective.

The draw of each epoch comes from a generator seeded by (seed, epoch), so a resumed run prunes
exactly as an uninterrupted one; the last losses are part of the checkpoint.
"""

from __future__ import annotations

import math

import torch

from models.errors import UserError

# Seeds the per-epoch draw: seed * SEED_STRIDE + epoch keeps every (seed, epoch) apart.
SEED_STRIDE = 1_000_003


class PruningError(UserError):
    """A pruning option that cannot work; the message names it."""


class LossPruner:
    """InfoBatch's soft pruning over ``n`` training positions."""

    def __init__(self, n: int, rate: float, anneal: float = 0.125, start: int = 1, seed: int = 0):
        if not 0 <= rate < 1:
            raise PruningError(f"--prune {rate!r} must be a probability in [0, 1)")
        if not 0 <= anneal <= 1:
            raise PruningError(f"--prune-anneal {anneal!r} must be a fraction in [0, 1]")
        if start < 1:
            raise PruningError(
                f"--prune-from {start}: pruning needs the losses of an earlier epoch, so 1 at the earliest"
            )
        self.n = n
        self.rate = float(rate)
        self.anneal = float(anneal)
        self.start = int(start)
        self.seed = seed
        self.last_loss = torch.full((n,), math.inf)  # (N,) per training position; inf: not yet seen
        self.pruned_share = 0.0  # of the last selected epoch's chosen positions

    def first_annealed(self, epochs: int) -> int:
        """The first epoch of the annealing tail, which trains on every chosen example."""
        return math.ceil(epochs * (1 - self.anneal) - 1e-9)

    def active(self, epoch: int, epochs: int) -> bool:
        """Whether ``epoch`` prunes: from ``start`` up to the annealing tail."""
        return self.rate > 0 and self.start <= epoch < self.first_annealed(epochs)

    def needs_losses(self, epoch: int, epochs: int) -> bool:
        """Whether the losses of ``epoch`` matter: only when the next epoch prunes."""
        return self.active(epoch + 1, epochs)

    def select(
        self, epoch: int, epochs: int, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The epoch's positions after pruning (sorted, CPU int64) and a (N,) weight per training
        position (None when nothing is pruned, i.e. every weight is 1)."""
        self.pruned_share = 0.0
        if not self.active(epoch, epochs) or len(positions) == 0:
            return positions, None
        loss = self.last_loss[positions]  # (P,)
        seen = torch.isfinite(loss)
        if not seen.any():
            return positions, None
        well_learned = seen & (loss < loss[seen].mean())
        generator = torch.Generator().manual_seed(self.seed * SEED_STRIDE + epoch)
        drop = well_learned & (torch.rand(len(positions), generator=generator) < self.rate)
        weights = torch.ones(self.n)
        weights[positions[well_learned & ~drop]] = 1.0 / (1.0 - self.rate)
        self.pruned_share = float(drop.float().mean())
        return positions[~drop], weights

    def record(self, positions: torch.Tensor, losses: torch.Tensor) -> None:
        """The losses (P,) the positions (P,) had when they were trained on this epoch."""
        self.last_loss[positions.cpu()] = losses.detach().float().cpu()

    def state_dict(self) -> dict:
        return {"last_loss": self.last_loss.clone()}

    def load_state_dict(self, state: dict) -> None:
        if "last_loss" not in state:
            raise PruningError(
                "the checkpoint was written without --prune; resume with the run's own options"
            )
        loss = state["last_loss"]
        if tuple(loss.shape) != (self.n,):
            raise PruningError(
                f"the checkpoint's pruning state covers {tuple(loss.shape)} examples, this run {self.n}"
            )
        self.last_loss = loss.float().clone()

    def to_dict(self) -> dict:
        return {"rate": self.rate, "anneal": self.anneal, "start": self.start, "seed": self.seed}

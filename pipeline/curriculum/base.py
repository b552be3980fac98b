"""What every curriculum strategy shares: options, inputs, reporting and checkpoints.

``Curriculum`` is built for one run (``epochs`` epochs over ``n`` training examples) and checks
its options and inputs once, when it is built; the strategies in ``strategies.py`` say how many
examples each epoch uses and which.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from pipeline.curriculum.checks import (
    CurriculumError,
    check_boundaries,
    check_difficulty,
    check_epochs,
    check_fraction,
    check_hold_back,
    check_rejoin,
    check_sizes,
    check_tiers,
)
from pipeline.curriculum.ordering import ORDERS, Ordering
from pipeline.curriculum.pacing import ceil_count, get_pacing
from pipeline.data.tiers import TIER_NAMES

if TYPE_CHECKING:
    from pipeline.data.dataset import Data


def _contents_digest(*arrays: np.ndarray | None) -> str:
    """A short digest of arrays' contents alone (None as b"none"). Not data's ``array_digest``,
    which hashes shapes too: checkpoints store this one, so it keeps its bytes."""
    h = hashlib.sha256()
    for array in arrays:
        h.update(b"none" if array is None else np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


def describe(pos: np.ndarray, n: int, tiers: np.ndarray | None) -> dict:
    """Count, fraction and tier mix of one epoch's positions, keyed by metric names."""
    out = {"count": len(pos), "fraction": len(pos) / n}
    if tiers is None:
        return out
    counts = np.bincount(tiers[pos], minlength=len(TIER_NAMES))
    totals = np.bincount(tiers, minlength=len(TIER_NAMES))
    out["tiers_present"] = "+".join(name for name, c in zip(TIER_NAMES, counts) if c)
    for name, c, total in zip(TIER_NAMES, counts, totals):
        out[f"tier_{name}_share"] = float(c / max(1, len(pos)))  # of the epoch's examples
        if total:
            out[f"tier_{name}_coverage"] = float(c / total)  # of that tier's examples
    return out


class Curriculum:
    """What every strategy shares: options, inputs, reporting and checkpoints. A strategy says
    how many examples an epoch uses (``count``) and which (``_choose``).

    ``difficulty`` (N,) float and ``tiers`` (N,) long (0 easy, 1 medium, 2 hard) are in
    training-position order and cover the ``n`` training examples; with ``tiers`` given, every
    strategy reports the tier mix it uses. ``a`` sets when all data is in use (and the default
    tier boundaries), ``b`` the starting fraction of the pacing functions and self-paced.
    ``boundaries=[e1, e2]``: epochs before e1 use tier 0, before e2 tiers 0-1, then all;
    ``[e1, e2, e3]``: from e3 on, tiers 1-2 (the easy examples retire). ``self_paced_pacing``
    names the pacing function that gives self-paced its fraction. ``rejoin`` > 0: the final such
    fraction of training uses every tier again (the retired easy examples rejoin, so the run
    ends on the full data it is evaluated on).
    """

    def __init__(
        self,
        difficulty: torch.Tensor | None = None,
        tiers: torch.Tensor | None = None,
        *,
        epochs: int,
        n: int,
        pacing: str,
        order: str = "curriculum",
        a: float = 0.8,
        b: float = 0.2,
        seed: int = 0,
        boundaries: Sequence[int] | None = None,
        self_paced_pacing: str = "linear",
        eval_batch_size: int = 0,
        rejoin: float = 0.0,
        hold_back: float = 0.0,
    ):
        if order not in ORDERS:
            raise CurriculumError(f"unknown curriculum order {order!r} (known: {', '.join(ORDERS)})")
        get_pacing(self_paced_pacing)
        self.pacing, self.order, self.seed = pacing, order, int(seed)
        self.a, self.b = check_fraction("a", a), check_fraction("b", b)
        self.rejoin = check_rejoin(rejoin)
        self.hold_back = check_hold_back(hold_back)
        self.self_paced_pacing = self_paced_pacing
        self.eval_batch_size = int(eval_batch_size)
        if self.eval_batch_size < 0:  # 0: the device's
            raise CurriculumError(f"curriculum eval_batch_size={eval_batch_size} must not be negative")
        self.epochs = check_epochs(epochs)
        self.difficulty = None if difficulty is None else check_difficulty(difficulty)
        self.tiers = None if tiers is None else check_tiers(tiers)
        self.n = check_sizes(self.difficulty, self.tiers, n)
        self._check_inputs()
        if self.hold_back and self.difficulty is None:
            # Every order's epoch sizes come from what the easy-first order keeps.
            raise CurriculumError("--hold-back needs difficulty scores (the score step's table)")
        self.boundaries = None if boundaries is None else check_boundaries(boundaries, self.epochs)
        self.ordering = Ordering(order, self.n, self.seed, self.difficulty, self.hold_back)
        if self.ordering.held == self.n:
            raise CurriculumError(
                f"--hold-back {self.hold_back:g} holds back all {self.n} training examples; hold back less"
            )
        self._used: dict[int, dict] = {}  # self-paced: what each epoch actually used

    def _check_inputs(self) -> None:
        """Refuse inputs or options the strategy cannot work with."""

    def _check_epoch(self, epoch: int) -> None:
        if not 0 <= epoch < self.epochs:
            raise CurriculumError(f"epoch {epoch} is outside 0..{self.epochs - 1} (--epochs {self.epochs})")

    # --- what a strategy decides -----------------------------------------------------------

    def count(self, epoch: int) -> int:
        """How many examples the epoch uses: the same for every order."""
        raise NotImplementedError

    def _choose(self, epoch: int, model: nn.Module | None, data: Data | None) -> np.ndarray:
        """The epoch's training positions, sorted."""
        raise NotImplementedError

    def _paced_count(self, fraction: float) -> int:
        """``fraction`` of the examples the order keeps, at least one."""
        kept = self.n - self.ordering.held
        return min(kept, max(1, ceil_count(fraction * kept)))

    @property
    def retired_from(self) -> int | None:
        """The epoch from which the easy examples are retired; None: they never are."""
        return None

    @property
    def rejoined_share(self) -> float:
        """The final fraction of training in which retired examples are back (0: none)."""
        return 0.0

    def positions(self, epoch: int, model: nn.Module | None = None, data: Data | None = None) -> torch.Tensor:
        """Sorted training positions (CPU int64) for ``epoch``.

        ``self-paced`` needs ``model`` and ``data`` (``data.train`` on the model's device) and
        evaluates the model's per-example loss; the other strategies only check ``data``'s size.
        """
        self._check_epoch(epoch)
        if data is not None and len(data.train) != self.n:
            raise CurriculumError(
                f"the difficulty inputs cover {self.n} examples but the training split has "
                f"{len(data.train)}; score the same dataset, split and subset"
            )
        return torch.from_numpy(self._choose(epoch, model, data)).long()

    def stage_of(self, epoch: int) -> dict:
        """What ``epoch`` trains on, by stage and size: two plans alike here chose alike."""
        return {"count": self.count(epoch), **self._stage_info(epoch)}

    def continue_from(self, earlier: Curriculum) -> None:
        """Go on from ``earlier``, the run's plan before it re-planned its epochs: what its
        self-paced epochs used."""
        self._used = dict(earlier._used)

    # --- reporting -------------------------------------------------------------------------

    def _stage_info(self, epoch: int) -> dict:
        """The epoch's stage, for strategies that have stages."""
        return {}

    def _usage(self, epoch: int) -> dict:
        """What the epoch uses, as ``_describe`` says it."""
        return describe(self._choose(epoch, None, None), self.n, self.tiers)

    def _epoch_row(self, epoch: int) -> dict:
        self._check_epoch(epoch)
        return {
            "epoch": epoch,
            "progress": epoch / self.epochs,
            **self._stage_info(epoch),
            **self._usage(epoch),
        }

    def schedule_table(self) -> list[dict]:
        """Per epoch: fraction and count in use, tier stage, tiers present, each tier's share of
        the epoch and coverage. Self-paced tier mixes appear once the epoch has been run."""
        return [self._epoch_row(epoch) for epoch in range(self.epochs)]

    def epoch_info(self, epoch: int) -> dict[str, float]:
        """The epoch's ``curriculum/...`` metrics."""
        return {
            f"curriculum/{key}": float(value)
            for key, value in self._epoch_row(epoch).items()
            if key not in ("epoch", "progress", "count", "tiers_present") and value is not None
        }

    # --- configuration and checkpoints -----------------------------------------------------

    def to_dict(self) -> dict:
        """The configuration, JSON-serialisable; with the inputs and epochs it rebuilds the curriculum."""
        return {
            "kind": "curriculum",
            "pacing": self.pacing,
            "order": self.order,
            "a": self.a,
            "b": self.b,
            "seed": self.seed,
            "boundaries": self.boundaries,
            "self_paced_pacing": self.self_paced_pacing,
            "eval_batch_size": self.eval_batch_size,
            "size": self.n,
            # Only when set, so checkpoints written before these options still resume.
            **({"rejoin": self.rejoin} if self.rejoin else {}),
            **({"hold_back": self.hold_back} if self.hold_back else {}),
        }

    def inputs_digest(self) -> str:
        """What the orderings depend on: a resumed run must see the same scores."""
        return _contents_digest(self.difficulty, self.tiers)

    def state_dict(self) -> dict:
        return {
            "config": self.to_dict(),
            "inputs": self.inputs_digest(),
            "used": {str(epoch): row for epoch, row in self._used.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what self-paced epochs used; refuse a checkpoint of another curriculum."""
        saved, mine = dict(state["config"]), self.to_dict()
        if saved.get("size") is None:  # written before the size was known
            saved.pop("size", None)
            mine.pop("size")
        differ = [
            f"{k} {saved.get(k)!r} (checkpoint) vs {mine.get(k)!r}"
            for k in sorted(set(saved) | set(mine))
            if saved.get(k) != mine.get(k)
        ]
        if differ:
            raise CurriculumError(
                f"the checkpoint's curriculum differs: {'; '.join(differ)}; resume with its options"
            )
        if state["inputs"] != self.inputs_digest():
            raise CurriculumError(
                "the checkpoint was made with other difficulty scores or tiers; "
                "resume with the same score run"
            )
        self._used = {int(epoch): dict(row) for epoch, row in state["used"].items()}

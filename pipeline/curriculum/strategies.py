"""Curriculum strategies: which training positions each epoch of a run uses.

A ``Curriculum`` turns per-example difficulty (a score, higher = harder, and a tier 0/1/2 for
easy/medium/hard, both in training-position order) into the training positions of each epoch
of a run of ``epochs`` epochs over ``n`` examples. It is built for that run and checks its
options and inputs once, when it is built. One strategy per kind, in one registry (``CURRICULA``):

- ``none`` (``AllData``): every example, every epoch (the static baseline).
- ``tiers`` (``TierStages``): the project's core design: easy examples only, then easy+medium,
  then all, with the stage boundaries at the model's growth epochs (or thirds of
  ``a * epochs``); with a third boundary the easy examples then retire and the rest of training
  uses medium and hard ones.
- ``linear``, ``quad``, ``root``, ``step``, ``exp``, ``log`` (``PacedFraction``): the first
  ``ceil(g(t) * N)`` examples of the difficulty-sorted data (``pipeline/curriculum/pacing.py``).
- ``self-paced`` (``SelfPaced``): the model's own loss picks the examples (Kumar, Packer &
  Koller 2010): at the start of each epoch the lowest-loss fraction ``g(t)`` of the training set.

Every strategy takes its examples in one ``Ordering`` (``curriculum``, ``anti`` or ``random``,
``pipeline/curriculum/ordering.py``), and every control takes exactly as many examples per
epoch as the curriculum it mirrors, so only the choice of examples differs. ``hold_back`` > 0
keeps the end of the order out of every epoch (any strategy but self-paced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from pipeline.curriculum.base import Curriculum, describe
from pipeline.curriculum.checks import CurriculumError
from pipeline.curriculum.ordering import Ordering
from pipeline.curriculum.pacing import PACINGS, ceil_count
from pipeline.data.tiers import TIER_NAMES
from pipeline.training.loop import evaluate_split

if TYPE_CHECKING:
    from pipeline.data.dataset import Data

# The ``tiers`` stage after a third boundary: easy examples retired, medium and hard in use.
RETIRED_STAGE = 3


class AllData(Curriculum):
    """``none``: every example the order keeps, every epoch."""

    def count(self, epoch: int) -> int:
        self._check_epoch(epoch)
        return self._paced_count(1.0)

    def _choose(self, epoch: int, model: nn.Module | None, data: Data | None) -> np.ndarray:
        return np.flatnonzero(self.ordering.kept)


class TierStages(Curriculum):
    """``tiers``: stage 0 easy only, 1 easy+medium, 2 all, 3 medium+hard (easy retired); 2
    again in the ``rejoin`` tail. Each stage takes the first examples of the order by (tier,
    difficulty), as many as the easy-first order's stage holds."""

    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        # Thirds of a * epochs by default: epoch e is in stage k once e >= k * a * epochs / 3.
        self._bounds = self.boundaries or [ceil_count(k * self.a * self.epochs / 3) for k in (1, 2)]
        # Every order's counts are the easy-first order's, so that each control takes as many.
        easy_first = self.ordering
        if self.order != "curriculum":
            easy_first = Ordering("curriculum", self.n, self.seed, self.difficulty, self.hold_back)
        self._easy_first_kept = easy_first.kept
        self._ranking = self.ordering.kept_ranking(self.difficulty, self.tiers)

    def _check_inputs(self) -> None:
        if self.tiers is None:
            raise CurriculumError(
                "curriculum pacing 'tiers' needs tiers (the score step's tier_id per example)"
            )

    def tier_boundaries(self) -> list[int]:
        """The epochs at which medium, then hard examples enter (and easy ones retire)."""
        return list(self._bounds)

    @property
    def retired_from(self) -> int | None:
        return self.boundaries[2] if self.boundaries and len(self.boundaries) == 3 else None

    @property
    def rejoined_share(self) -> float:
        return self.rejoin

    def first_rejoined(self) -> int:
        """The first epoch of the ``rejoin`` tail (``epochs`` when there is none)."""
        return ceil_count(self.epochs * (1 - self.rejoin)) if self.rejoin > 0 else self.epochs

    def stage(self, epoch: int) -> int:
        if epoch >= self.first_rejoined():
            return 2
        return sum(epoch >= e for e in self._bounds)

    def _stage_info(self, epoch: int) -> dict:
        return {"stage": self.stage(epoch)}

    def count(self, epoch: int) -> int:
        self._check_epoch(epoch)
        stage = self.stage(epoch)
        in_use = self.tiers >= 1 if stage == RETIRED_STAGE else self.tiers <= stage
        return int((in_use & self._easy_first_kept).sum())

    def _choose(self, epoch: int, model: nn.Module | None, data: Data | None) -> np.ndarray:
        k = self.count(epoch)
        if k == 0:
            raise CurriculumError(
                f"no training example is in tier {TIER_NAMES[0]!r}, so epoch {epoch} would be empty; "
                "move the first tier boundary to 0 or rescore"
            )
        if self.stage(epoch) == RETIRED_STAGE:
            # The window slides to the end of the order: the hardest k (anti: the easiest k;
            # random: another random k), so each control drops what it has seen longest.
            return np.sort(self._ranking[len(self._ranking) - k :])
        return np.sort(self._ranking[:k])


class PacedFraction(Curriculum):
    """A pacing function's fraction of the order's first examples (``pipeline/curriculum/pacing.py``)."""

    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        self._ranking = self.ordering.kept_ranking(self.difficulty)

    def _check_inputs(self) -> None:
        if self.order != "random" and self.difficulty is None:
            raise CurriculumError(
                f"curriculum pacing {self.pacing!r} needs difficulty scores (order {self.order!r})"
            )

    def count(self, epoch: int) -> int:
        self._check_epoch(epoch)
        return self._paced_count(PACINGS[self.pacing](epoch / self.epochs, self.a, self.b))

    def _choose(self, epoch: int, model: nn.Module | None, data: Data | None) -> np.ndarray:
        return np.sort(self._ranking[: self.count(epoch)])


class SelfPaced(Curriculum):
    """``self-paced``: at the start of each epoch the model's lowest-loss examples (anti: the
    highest; random: a fixed random share), as many as ``self_paced_pacing`` says."""

    def _check_inputs(self) -> None:
        if self.hold_back:
            raise CurriculumError(
                "--hold-back needs a fixed order (tiers, none or a pacing function), not self-paced"
            )

    def count(self, epoch: int) -> int:
        self._check_epoch(epoch)
        return self._paced_count(PACINGS[self.self_paced_pacing](epoch / self.epochs, self.a, self.b))

    @torch.no_grad()
    def _choose(self, epoch: int, model: nn.Module | None, data: Data | None) -> np.ndarray:
        k = self.count(epoch)
        if k == self.n:
            pos = np.arange(self.n)
        elif self.order == "random":
            pos = np.sort(self.ordering.rank(None)[:k])
        else:
            if model is None or data is None:
                raise CurriculumError("curriculum pacing 'self-paced' needs the model and data each epoch")
            was_training = model.training
            try:
                loss = evaluate_split(model, data.train, self.eval_batch_size).per_example_loss  # (N,)
            finally:
                model.train(was_training)
            pos = np.sort(self.ordering.rank(loss.double().numpy())[:k])
        self._used[epoch] = describe(pos, self.n, self.tiers)
        return pos

    def _usage(self, epoch: int) -> dict:
        k = self.count(epoch)
        return {"count": k, "fraction": k / self.n, **self._used.get(epoch, {})}


CURRICULA: dict[str, type[Curriculum]] = {
    "none": AllData,
    "tiers": TierStages,
    **dict.fromkeys(PACINGS, PacedFraction),
    "self-paced": SelfPaced,
}
CURRICULUM_PACINGS = tuple(CURRICULA)


def make_curriculum(
    difficulty: torch.Tensor | None = None,
    tiers: torch.Tensor | None = None,
    *,
    pacing: str = "tiers",
    **options,
) -> Curriculum:
    """The strategy for ``pacing``, built for ``options['epochs']`` epochs over ``options['n']``
    examples (the options are ``Curriculum``'s)."""
    if pacing not in CURRICULA:
        raise CurriculumError(
            f"unknown curriculum pacing {pacing!r} (known: {', '.join(CURRICULUM_PACINGS)})"
        )
    return CURRICULA[pacing](difficulty, tiers, pacing=pacing, **options)


def curriculum_from_dict(
    config: dict, epochs: int, difficulty: torch.Tensor | None = None, tiers: torch.Tensor | None = None
) -> Curriculum:
    """The curriculum ``Curriculum.to_dict`` describes, for ``epochs`` epochs."""
    options = {k: v for k, v in config.items() if k not in ("kind", "size")}
    return make_curriculum(difficulty, tiers, epochs=epochs, n=config["size"], **options)

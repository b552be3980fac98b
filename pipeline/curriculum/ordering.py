"""The order a curriculum takes training positions in, shared by every strategy.

``curriculum`` is easy first, ``anti`` hard first (ties still to the lower position) and
``random`` a fixed random permutation drawn from ``seed``, the matched control. ``hold_back``
keeps the end of the order out of every epoch: under label noise the highest-loss examples are
mostly wrong labels (Han et al. 2018, "Co-teaching", train on small-loss examples), so the
easy-first order holds back the hardest share, ``anti`` the easiest and ``random`` a random one.
"""

from __future__ import annotations

import numpy as np
import torch

from pipeline.curriculum.checks import CurriculumError
from pipeline.curriculum.pacing import ceil_count

ORDERS = ("curriculum", "anti", "random")


class Ordering:
    """One of ``ORDERS`` over ``n`` training positions, and the positions it holds back.

    ``difficulty`` (N,) float64 orders the held-back share (None: nothing can be held back)."""

    def __init__(self, order: str, n: int, seed: int, difficulty: np.ndarray | None, hold_back: float):
        if order not in ORDERS:
            raise CurriculumError(f"unknown curriculum order {order!r} (known: {', '.join(ORDERS)})")
        self.order, self.n, self.seed = order, n, seed
        self.held = ceil_count(hold_back * n) if hold_back else 0
        self.kept = np.ones(n, dtype=bool)  # (N,) the positions the order uses at all
        if self.held:
            self.kept[self.rank(difficulty)[n - self.held :]] = False

    def rank(self, key: np.ndarray | None, tier: np.ndarray | None = None) -> np.ndarray:
        """All positions sorted by (tier, key, position) ascending, or the fixed permutation of the
        random order; ``anti`` negates the sort keys, ties still going to the lower position."""
        if self.order == "random":
            generator = torch.Generator().manual_seed(self.seed)
            return torch.randperm(self.n, generator=generator).numpy()
        sign = -1 if self.order == "anti" else 1
        keys = [np.arange(self.n)]  # np.lexsort sorts by the last key first
        if key is not None:
            keys.append(sign * key)
        if tier is not None:
            keys.append(sign * tier)
        return np.lexsort(keys)

    def kept_ranking(self, key: np.ndarray | None, tier: np.ndarray | None = None) -> np.ndarray:
        """``rank`` without the held-back positions: first used first."""
        ranking = self.rank(key, tier)
        return ranking[self.kept[ranking]]

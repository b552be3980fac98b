"""Easy, medium and hard tiers: cut by rank on the training split (per class by default), and
the cut points that put any other split's examples in the same tiers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.cli import ConfigError
from pipeline.data.config import DataError

TIER_NAMES = ("easy", "medium", "hard")


def parse_fractions(text: str) -> tuple[float, float, float]:
    """``"0.333,0.333,0.334"`` -> the easy, medium and hard shares, checked to sum to one."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--tier-fractions {text!r} must be {len(TIER_NAMES)} comma-separated numbers (easy,medium,hard)"
        ) from None
    if len(values) != len(TIER_NAMES):
        raise ConfigError(
            f"--tier-fractions {text!r} has {len(values)} fraction(s); it needs "
            f"{len(TIER_NAMES)}: {','.join(TIER_NAMES)}"
        )
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(f"--tier-fractions {text!r}: every fraction must be positive")
    total = sum(values)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"--tier-fractions {text!r} sums to {total:g}; the fractions must sum to 1")
    return tuple(v / total for v in values)


def boundaries(n: int, fractions: tuple[float, ...]) -> list[int]:
    """Positions in the ranking where each tier after the first starts, rounded cumulatively
    so that the tier sizes always add up to ``n``."""
    cumulative = np.cumsum(fractions)[:-1]
    return [round(n * c) for c in cumulative]


@dataclass(frozen=True)
class TierCuts:
    """Score thresholds between tiers, per class (or one set under key -1 for all classes)."""

    scorer: str
    fractions: tuple[float, ...]
    per_class: bool
    cuts: dict[int, tuple[float, ...]]  # class id (or -1) -> one cut per tier boundary

    def to_dict(self, classes: list[str] | None = None) -> dict:
        def label(c: int) -> str:
            return "all" if c == -1 else (classes[c] if classes else str(c))

        return {
            "scorer": self.scorer,
            "fractions": list(self.fractions),
            "per_class": self.per_class,
            "tiers": list(TIER_NAMES),
            "rule": "tier = number of cut points <= score; train tiers are exact ranks "
            "(score, then index) and the cut points midway between neighbouring ranks",
            "cuts": {label(c): list(v) for c, v in sorted(self.cuts.items())},
        }


def rank_order(scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Positions sorted by score, ties broken by the stable index: the same on any machine."""
    by_index = torch.argsort(index, stable=True)
    return by_index[torch.argsort(scores[by_index], stable=True)]


def fit_tiers(
    scores: torch.Tensor,
    labels: torch.Tensor,
    index: torch.Tensor,
    scorer: str,
    fractions: tuple[float, ...],
    per_class: bool,
) -> tuple[torch.Tensor, TierCuts]:
    """Tiers of the training split by rank (exact fractions within each group) and the cut
    points that reproduce them on other splits."""
    scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise DataError(f"{scorer} scores contain NaN or infinite values; cannot cut tiers")
    tiers = torch.empty(len(scores), dtype=torch.long)
    cuts: dict[int, tuple[float, ...]] = {}
    groups = torch.unique(labels).tolist() if per_class else [-1]
    for group in groups:
        members = torch.nonzero(labels == group).flatten() if per_class else torch.arange(len(scores))
        order = members[rank_order(scores[members], index[members])]
        sorted_scores = scores[order]
        n = len(order)
        starts = boundaries(n, fractions)
        group_cuts = []
        for b in starts:
            if b <= 0:
                group_cuts.append(-math.inf)
            elif b >= n:
                group_cuts.append(math.inf)
            else:
                group_cuts.append(float((sorted_scores[b - 1] + sorted_scores[b]) / 2))
        cuts[group] = tuple(group_cuts)
        rank_tier = torch.zeros(n, dtype=torch.long)
        for b in starts:
            rank_tier[b:] += 1
        tiers[order] = rank_tier
    return tiers, TierCuts(scorer, tuple(fractions), per_class, cuts)


def apply_tiers(scores: torch.Tensor, labels: torch.Tensor, cuts: TierCuts) -> torch.Tensor:
    """Tiers of any split from cut points fitted on the training split."""
    scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise DataError(f"{cuts.scorer} scores contain NaN or infinite values; cannot assign tiers")
    tiers = torch.zeros(len(scores), dtype=torch.long)
    keys = labels.tolist() if cuts.per_class else [-1] * len(labels)
    missing = sorted(set(keys) - set(cuts.cuts))
    if missing:
        raise DataError(f"no tier cut points for class {missing[0]}: it is absent from the training split")
    thresholds = torch.tensor([cuts.cuts[k] for k in keys], dtype=torch.float64).reshape(len(scores), -1)
    tiers += (scores[:, None] >= thresholds).sum(1)
    return tiers

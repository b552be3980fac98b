"""The curriculum's options and inputs, checked once, each failure naming the option and the fix."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import torch

from models.errors import UserError
from pipeline.data.tiers import TIER_NAMES


class CurriculumError(UserError):
    """A curriculum option or input that cannot work; the message names it and the fix."""


def check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 < value <= 1):
        raise CurriculumError(f"curriculum {name}={value!r} must be a fraction in (0, 1]")
    return float(value)


def check_rejoin(value: float) -> float:
    """``--rejoin``: a fraction of training at its end, in [0, 1)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 <= value < 1):
        raise CurriculumError(f"--rejoin {value!r} must be a fraction in [0, 1) of training at its end")
    return float(value)


def check_hold_back(value: float) -> float:
    """``--hold-back``: a share of the training set, in [0, 1)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 <= value < 1):
        raise CurriculumError(f"--hold-back {value!r} must be a share in [0, 1) of the training examples")
    return float(value)


def check_epochs(epochs: int) -> int:
    if not isinstance(epochs, int | np.integer) or epochs < 1:
        raise CurriculumError(f"epochs must be a positive integer, got {epochs!r}")
    return int(epochs)


def check_sizes(difficulty: np.ndarray | None, tiers: np.ndarray | None, n: int) -> int:
    """The training set size ``n``, which the inputs given must cover."""
    sizes = {len(v) for v in (difficulty, tiers) if v is not None}
    if len(sizes) > 1:
        raise CurriculumError(
            f"difficulty has {len(difficulty)} rows but tiers has {len(tiers)}; "
            "both must cover the training split in position order"
        )
    if not isinstance(n, int | np.integer) or n < 1:
        raise CurriculumError(f"the training set size n={n!r} must be a positive integer")
    if sizes and sizes != {n}:
        raise CurriculumError(
            f"the difficulty inputs cover {sizes.pop()} examples but the training split has {n}; "
            "score the same dataset, split and subset"
        )
    return int(n)


def check_difficulty(difficulty: torch.Tensor) -> np.ndarray:
    d = torch.as_tensor(difficulty).detach().cpu().double().numpy()
    if d.ndim != 1 or len(d) == 0:
        raise CurriculumError(f"difficulty must be a non-empty (N,) tensor, got shape {tuple(d.shape)}")
    if np.isnan(d).any():
        raise CurriculumError(
            f"difficulty has {int(np.isnan(d).sum())} NaN score(s), e.g. at position "
            f"{int(np.flatnonzero(np.isnan(d))[0])}; rescore or drop the example"
        )
    return d


def check_tiers(tiers: torch.Tensor) -> np.ndarray:
    t = torch.as_tensor(tiers).detach().cpu()
    if t.ndim != 1 or len(t) == 0 or t.is_floating_point() or t.is_complex():
        raise CurriculumError(
            f"tiers must be a non-empty (N,) integer tensor, got {t.dtype} {tuple(t.shape)}"
        )
    t = t.long().numpy()
    bad = (t < 0) | (t >= len(TIER_NAMES))
    if bad.any():
        raise CurriculumError(
            f"tiers must be 0, 1 or 2 ({'/'.join(TIER_NAMES)}); got {int(t[bad][0])} at position "
            f"{int(np.flatnonzero(bad)[0])}"
        )
    return t


def check_boundaries(boundaries: Sequence[int], epochs: int) -> list[int]:
    """``[e1, e2]`` or ``[e1, e2, e3]``: in order, and each an epoch of the run."""
    bounds = list(boundaries)
    if len(bounds) not in (2, 3) or not all(isinstance(e, int | np.integer) for e in bounds):
        raise CurriculumError(
            f"tier boundaries {bounds} must be two or three epochs [e1, e2(, e3)] "
            "(medium joins, hard joins, easy retires)"
        )
    bounds = [int(e) for e in bounds]
    if bounds[0] < 0 or bounds != sorted(bounds):
        raise CurriculumError(f"tier boundaries {bounds} must be non-negative and in order (e1 <= e2 <= e3)")
    for e in bounds:
        if e >= epochs:
            raise CurriculumError(
                f"tier boundary epoch {e} is past the last epoch {epochs - 1} of --epochs {epochs}"
            )
    return bounds

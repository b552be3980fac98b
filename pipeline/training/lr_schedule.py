"""The learning rate's shape over training (``--lr-schedule``): each a pure function of the peak
rate, the share of training done and the warm-up's share, so that parameter groups added by
growth and runs resumed from a checkpoint get the same rate as everything else."""

from __future__ import annotations

import math
from collections.abc import Callable


def cosine_lr(base_lr: float, progress: float, warmup: float) -> float:
    """Learning rate at ``progress`` in [0, 1] of training: linear warm-up, then cosine to zero.

    A function of progress, not of an optimizer's step counter, so parameter groups added by
    growth and runs resumed from a checkpoint get the same rate as everything else.
    """
    if warmup > 0 and progress < warmup:
        return base_lr * (progress + 1e-3) / warmup
    span = max(1e-12, 1.0 - warmup)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, (progress - warmup) / span)))


# airbench's triangle (airbench94): the rate climbs linearly from a fifth of its peak to the peak
# over the warm-up, then falls linearly to 7% of it at the end, where the cosine reaches zero
TRIANGLE_START, TRIANGLE_END = 0.2, 0.07


def triangular_lr(base_lr: float, progress: float, warmup: float) -> float:
    """Learning rate at ``progress`` in [0, 1] of training on airbench's triangle: linear from
    ``TRIANGLE_START`` of ``base_lr`` to ``base_lr`` over the warm-up, then linear to
    ``TRIANGLE_END`` of it; a function of progress as ``cosine_lr`` is."""
    progress = min(1.0, max(0.0, progress))
    if warmup > 0 and progress < warmup:
        return base_lr * (TRIANGLE_START + (1.0 - TRIANGLE_START) * progress / warmup)
    down = (progress - warmup) / max(1e-12, 1.0 - warmup)
    return base_lr * (1.0 - (1.0 - TRIANGLE_END) * down)


# --lr-schedule: the rate's shape over training, each a function (peak, progress, warm-up share)
LR_SCHEDULES: dict[str, Callable[[float, float, float], float]] = {
    "cosine": cosine_lr,
    "triangular": triangular_lr,
}

"""Pacing functions: the fraction of the difficulty-sorted data in use at training progress t.

The pacing functions of Wu, Dyer & Neyshabur 2021, "When do curricula work?" (ICLR): a
curriculum takes the first ``ceil(g(t) * N)`` examples at progress ``t = epoch / epochs``, with
a = fraction of training at which all data is in use and b = starting fraction. The paper writes
them for N examples and T steps; with s = t / a they read g = b + (1 - b) * h(s).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from pipeline.curriculum.checks import CurriculumError, check_fraction

# The paper's c: the exp and log pacings change by a factor e^10 over [0, a].
PACING_C = 10.0
# ceil(g * N) less a tolerance, so that 0.2 * 1000 = 200.00000000000003 takes 200 examples.
COUNT_TOLERANCE = 1e-9


def ceil_count(value: float) -> int:
    """``ceil(value)``, but a value a rounding error above an integer is that integer."""
    return math.ceil(value - COUNT_TOLERANCE)


def _pacing(formula: Callable[[float, float], float]) -> Callable[[float, float, float], float]:
    """A pacing function from its formula in s = t / a: validated, exactly 1 from t = a on,
    and clipped to [b, 1] (the paper clips at N; the floor only absorbs rounding in ``log``)."""

    @functools.wraps(formula)
    def pace(t: float, a: float, b: float) -> float:
        a, b = check_fraction("a", a), check_fraction("b", b)
        if not t >= 0:
            raise CurriculumError(f"training progress t={t!r} must be in [0, 1]")
        if t >= a:
            return 1.0
        return min(1.0, max(b, formula(t / a, b)))

    return pace


@_pacing
def linear(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT) · t
    return b + (1 - b) * s


@_pacing
def quad(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT)^2 · t^2
    return b + (1 - b) * s * s


@_pacing
def root(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT)^(1/2) · t^(1/2)
    return b + (1 - b) * math.sqrt(s)


@_pacing
def step(s: float, b: float) -> float:
    # Nb + N·floor(t/(aT)): b until t = a, then everything.
    return b + math.floor(s)


@_pacing
def exp(s: float, b: float) -> float:
    # Nb + N(1-b)/(e^c - 1) · (exp(c·t/(aT)) - 1), c = 10
    return b + (1 - b) * math.expm1(PACING_C * s) / math.expm1(PACING_C)


@_pacing
def log(s: float, b: float) -> float:
    # Nb + N(1-b) · (1 + (1/c)·log(t/(aT) + e^-c)), c = 10; equals b at t = 0 up to rounding.
    return b + (1 - b) * (1 + math.log(s + math.exp(-PACING_C)) / PACING_C)


PACINGS: dict[str, Callable[[float, float, float], float]] = {
    "linear": linear,
    "quad": quad,
    "root": root,
    "step": step,
    "exp": exp,
    "log": log,
}


def get_pacing(name: str) -> Callable[[float, float, float], float]:
    if name not in PACINGS:
        raise CurriculumError(f"unknown pacing function {name!r} (known: {', '.join(PACINGS)})")
    return PACINGS[name]

"""Where a run's seconds go, part by part, and which of them trained.

Seconds that train are the method's own work: the training step, growth (new layers, their
calibration, the optimizer rebuilt), the data diet's bookkeeping (the curriculum's choice of
examples, pruning's weights and recorded losses) and a seconds run's re-planning of its length.
A run could drop everything else and train the same network: validation and its per-tier
metrics, probes (early exits, label noise), logging and checkpoints. ``--budget Ns`` counts
only seconds that train, so that two arms given equal seconds are not charged for how often
they were watched: a growing network runs more, cheaper epochs in the same seconds and so pays
for more validation passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

TRAINING_PARTS = ("train", "growth", "diet", "plan")  # what a seconds budget counts
MONITORING_PARTS = ("val", "probe", "log", "checkpoint")  # what could be left out
PARTS = TRAINING_PARTS + MONITORING_PARTS


@contextmanager
def timed(parts: dict[str, float], part: str) -> Iterator[None]:
    """Add the seconds the block takes to ``parts[part]``."""
    if part not in PARTS:
        raise ValueError(f"unknown part of a run's time {part!r}; one of {PARTS}")
    start = time.perf_counter()
    try:
        yield
    finally:
        parts[part] = parts.get(part, 0.0) + time.perf_counter() - start


def trained_s(parts: dict[str, float]) -> float:
    """The seconds that trained so far."""
    return sum(parts.get(p, 0.0) for p in TRAINING_PARTS)


def trained_share(parts: dict[str, float]) -> float:
    """The share of the accounted seconds that trained (1.0 before anything was timed)."""
    total = sum(parts.get(p, 0.0) for p in PARTS)
    return trained_s(parts) / total if total > 0 else 1.0


def epoch_metrics(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """One epoch's ``time/...`` metrics: the seconds of each part the epoch itself timed (logging
    and checkpointing come after its metrics are logged: they show in the run's totals), and the
    cumulative seconds that trained with their share of everything accounted so far."""
    spent = {p: after.get(p, 0.0) - before.get(p, 0.0) for p in ("growth", "diet", "val", "probe")}
    return {
        **{f"time/{p}_s": s for p, s in spent.items()},
        "time/cumulative_trained_s": trained_s(after),
        "time/cumulative_trained_share": trained_share(after),
    }


def run_metrics(parts: dict[str, float]) -> dict[str, float]:
    """A finished run's totals per part (``time/total_<part>_s``), the seconds that trained and
    their share of the run's accounted seconds."""
    return {
        **{f"time/total_{p}_s": parts.get(p, 0.0) for p in PARTS},
        "time/trained_s": trained_s(parts),
        "time/trained_share": trained_share(parts),
    }

"""A training budget as the user wrote it (``--budget``), read and turned into epochs; no MLflow.

``--budget 24ep``, ``--budget 3.2e14flops``, ``--budget 600s``, or the cost of another run,
``--budget run:RUN_ID`` (its training FLOPs; ``run:RUN_ID:s`` its seconds that trained),
optionally scaled, ``run:RUN_ID*1.5``. ``epochs_for`` gives the largest run length whose planned
cost fits; ``scale_epoch`` moves an epoch written for ``--epochs`` to that length. The package's
docstring (``pipeline/budget/__init__.py``) tells a budget's whole path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.cli import ConfigError

UNITS = {"ep": "epochs", "epoch": "epochs", "epochs": "epochs", "flops": "flops", "s": "seconds"}
UNITS.update({"sec": "seconds", "seconds": "seconds", "flop": "flops"})
# A run's seconds are those that trained (timing.py): not its validation,
# logging or checkpoints, which an arm with more, cheaper epochs pays more often.
RUN_METRICS = {"flops": "train/flops_cumulative", "seconds": "time/cumulative_trained_s"}
# InfoBatch leaves out ``rate`` of the examples whose loss is below the mean; on Fashion-MNIST
# that is about two thirds of them (--prune 0.3 logged curriculum/pruned_share 0.18-0.22).
PRUNED_SHARE_PLANNED = 2 / 3
MAX_EPOCHS = 10_000
SECONDS_MARGIN_EPOCHS = 1
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?"
_AMOUNT = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]+)\s*$")
_RUN = re.compile(rf"^\s*run:([0-9A-Za-z_-]+)(?::([a-z]+))?(?:\s*\*\s*({_NUMBER}))?\s*$")


class BudgetError(ConfigError):
    """A budget that cannot be met or read; the message names it."""


@dataclass(frozen=True)
class Budget:
    unit: str  # epochs, flops or seconds
    amount: float
    given: str = ""  # as the user wrote it ("" for --epochs)

    def describe(self) -> str:
        """One spelling per budget (runs with the same one are comparable): '24 epochs'."""
        if self.unit == "epochs":
            return f"{int(self.amount)} epochs"
        # "training seconds": a run before they were counted apart is another setting
        return f"{self.amount:.6g} {'training seconds' if self.unit == 'seconds' else self.unit}"


def parse_budget(text: str, epochs: int, run_cost: Callable[[str, str], float] | None = None) -> Budget:
    """``text`` as a Budget; empty means ``epochs`` epochs. ``run_cost(run_id, unit)`` reads the
    cost of a finished run for ``run:`` budgets (it raises for a run that has none)."""
    given = text.strip()
    if not given:
        return Budget("epochs", float(epochs), "")
    match = _RUN.match(given)
    if match:
        run_id, unit_text, factor = match.group(1), match.group(2) or "flops", match.group(3)
        unit = UNITS.get(unit_text)
        if unit not in RUN_METRICS:
            raise BudgetError(f"--budget {given}: the cost of a run is its flops or its s, not {unit_text!r}")
        if run_cost is None:
            raise BudgetError(f"--budget {given}: no tracking store to read run {run_id} from")
        amount = run_cost(run_id, unit) * (float(factor) if factor else 1.0)
        return _checked(Budget(unit, amount, given))
    match = _AMOUNT.match(given)
    if not match or match.group(2).lower() not in UNITS:
        raise BudgetError(
            f"--budget {given!r}: use a number with a unit, ep, flops or s (24ep, 3.2e14flops, "
            "600s), or run:RUN_ID[:s][*factor]"
        )
    budget = Budget(UNITS[match.group(2).lower()], float(match.group(1)), given)
    if budget.unit == "epochs" and not budget.amount.is_integer():
        raise BudgetError(f"--budget {given}: epochs must be a whole number")
    return _checked(budget)


def _checked(budget: Budget) -> Budget:
    if not math.isfinite(budget.amount) or budget.amount <= 0:
        raise BudgetError(f"--budget {budget.given}: must be positive, got {budget.amount:g} {budget.unit}")
    return budget


def epochs_for(budget: Budget, planned_cost: Callable[[int], float], one_step: float) -> int:
    """The run length E that ``budget`` buys: the largest E whose ``planned_cost(E)`` (in the
    budget's unit) fits it, at least 1; a budget below ``one_step`` (the cost of one training
    step of the start network) cannot train at all."""
    if budget.unit == "epochs":
        return int(budget.amount)
    if budget.amount < one_step:
        raise BudgetError(
            f"--budget {budget.given}: {budget.describe()} is less than one training step "
            f"({one_step:.3g} {budget.unit})"
        )
    epochs = 1
    while epochs < MAX_EPOCHS and planned_cost(epochs + 1) <= budget.amount:
        epochs += 1
    return epochs


def scale_epoch(epoch: int, written_for: int, epochs: int) -> int:
    """An epoch written for a ``written_for``-epoch run, at the same fraction of an ``epochs`` one."""
    if written_for == epochs:
        return epoch
    return max(0, min(epochs, math.floor(epoch * epochs / written_for + 0.5)))

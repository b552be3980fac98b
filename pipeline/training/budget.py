"""Training budgets: how long a run trains, in epochs, training FLOPs or seconds. No MLflow here.

Growth papers state their gains at equal compute, so a run can be given its cost rather than its
epochs: ``--budget 24ep``, ``--budget 3.2e14flops``, ``--budget 600s``, or the cost of another
run, ``--budget run:RUN_ID`` (its training FLOPs; ``run:RUN_ID:s`` its seconds that trained),
optionally scaled, ``run:RUN_ID*1.5``. Seconds are always seconds that train
(``pipeline/training/timing.py``): the training step, growth and the data diet's bookkeeping,
not validation, logging or checkpoints.

A budget is turned into a number of epochs E before training: the largest E whose planned cost
fits it. Everything that is a function of the run's length then follows E: the cosine learning
rate, named growth schedules, schedules and tier boundaries written in epochs (they are written
for ``--epochs`` and scaled to E, so a schedule written for 12 epochs means the same at 24), the
curriculum's stages and pruning's annealing tail. While it trains, a FLOPs or seconds run also
stops before a step that would overrun its budget, so it never spends more than it was given
(a seconds run predicts each step from its own measured rate and keeps back what its last epoch
trained outside the steps; only a growth event's seconds, at the start of an epoch, are not
predicted); the budget
used and why the run stopped are logged.

The planned cost is exact for FLOPs up to loss-aware pruning, whose share is known only as the
run goes (the plan assumes ``PRUNED_SHARE_PLANNED`` of the pruning rate). Seconds cannot be
planned that well: each spec is timed through the training loop for a few batches first
(``run_length.seconds_per_example``), a machine's speed drifts, and whole epochs would leave up
to one unspent. So a seconds run plans one epoch more than fits (``SECONDS_MARGIN_EPOCHS``), its
learning rate follows whichever is further on, its steps or its clock (the share of its seconds
spent), and its meter ends it where the seconds end, in whichever epoch that is: it spends its
seconds, never more, and its rate has annealed there. And after every epoch it plans again from
its own measured epochs (``pipeline/training/replan.py``): a timing that planned too few epochs
would otherwise end the run, its rate annealed, with seconds left.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pipeline.cli import ConfigError

UNITS = {"ep": "epochs", "epoch": "epochs", "epochs": "epochs", "flops": "flops", "s": "seconds"}
UNITS.update({"sec": "seconds", "seconds": "seconds", "flop": "flops"})
# A run's seconds are those that trained (pipeline/training/timing.py): not its validation,
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


# A step is predicted at this run's mean seconds per example, but one can take longer (the
# CPU's jitter; on full CIFAR-10-sized data a step is tens of milliseconds, on a 600-example
# subset a few, and one such step overran a 4-second budget by 2.4 ms): a seconds budget pays
# the next step only while half a step more would still fit, so it is never overrun by one slow
# step, for at most one and a half average steps of its seconds left unspent.
STEP_MARGIN = 0.5


class EpochPlanner(Protocol):
    """What re-planning a seconds run asks of its planner (``pipeline/training/replan.py``),
    declared here so that training calls down to an interface, never up to the run layer that
    implements it (``pipeline/run/length.SecondsPlanner``)."""

    def record(self, epoch: int, epochs: int, seconds_per_example: float, overhead_s: float) -> None:
        """What epoch ``epoch`` of a plan of ``epochs`` measured."""

    def settled(self) -> bool:
        """Whether enough epochs of the current network were measured to shorten a plan on."""

    def epochs_fitting(self, next_epoch: int, seconds_left: float, guess: int) -> int:
        """The most epochs whose epochs from ``next_epoch`` on fit ``seconds_left``."""

    def pieces(self, epochs: int) -> tuple[list, object]:
        """The growth events and curriculum setup of a plan of ``epochs`` epochs."""


@dataclass
class BudgetMeter:
    """The stop rule while training: can the next step of ``examples`` examples still be paid?

    ``spent`` is what the run used before this epoch's training step (cumulative training
    FLOPs, or seconds that trained: earlier epochs' and this one's growth and diet); the step
    adds its examples times ``flops_per_example``, or its elapsed seconds."""

    budget: Budget
    spent: float = 0.0
    exhausted: bool = False
    # seconds per example of this run's steps so far: the next step's predicted cost, so that
    # the step that would overrun is not taken (its seconds are only known once it is paid)
    seconds_per_example: float = 0.0
    # seconds that trained outside the steps in the last epoch (the diet's bookkeeping, growth,
    # the epoch's set-up), kept back so that what follows the last step paid still fits
    reserve_s: float = 0.0
    # the share of a seconds budget spent at the last check: the learning rate's progress, so
    # the schedule follows the clock and anneals where the seconds end (0 for other units)
    progress: float = 0.0
    # the cost the last check predicted, the next step included
    last_cost: float = 0.0
    # a seconds run's re-planning from its measured epochs (``run_length.SecondsPlanner``)
    planner: EpochPlanner | None = None

    def allows(self, examples_done: int, next_batch: int, flops_per_example: float, elapsed_s: float) -> bool:
        if self.budget.unit == "flops":
            cost = self.spent + (examples_done + next_batch) * flops_per_example
        elif self.budget.unit == "seconds":
            if examples_done:
                self.seconds_per_example = elapsed_s / examples_done
            self.progress = min(1.0, (self.spent + elapsed_s) / self.budget.amount)
            step = self.seconds_per_example * next_batch * (1 + STEP_MARGIN)
            cost = self.spent + elapsed_s + step + self.reserve_s
        else:
            return True
        self.last_cost = cost
        if cost > self.budget.amount * (1 + 1e-9):  # float sums of exact costs may round up
            self.exhausted = True
            return False
        return True

    def near_end(self, share: float) -> bool:
        """Whether the last check's predicted cost came within ``share`` of the budget's end."""
        return self.last_cost > (1 - share) * self.budget.amount

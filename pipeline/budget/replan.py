"""A seconds run re-planned as it trains; no MLflow here.

A seconds run's first plan comes from a few timed batches of each network (``plan.py``), which
can be off by a tenth: CIFAR-10 seed 170 planned 21 epochs
where 24 fitted, and its rate, following its steps, annealed at the 21st with 14% of its seconds
left. So after every epoch the run asks again how many epochs its seconds left buy, from its
own measured epochs (``plan.SecondsPlanner``), and takes a plan of that many (plus the
margin the clock ends: ``spec.SECONDS_MARGIN_EPOCHS``).

A plan of E epochs places everything at fractions of E: the growth events, the curriculum's
stages, pruning's annealing tail. A new plan moves what is still to come; it must not move what
the run has done, so it is taken only where, at the epoch just run, it had the same growth events
due, the same curriculum stage and the same pruning as the run's plan (else the run keeps its
plan and asks again after the next epoch). The learning rate goes on from the progress it had
reached (the training state's ``RunProgress``), and a growth's re-warm starts where the growth
happened (``pipeline/training/epoch_loop.learning_rate``), whatever plan placed it.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.budget.meter import BudgetMeter
from pipeline.budget.spec import MAX_EPOCHS, SECONDS_MARGIN_EPOCHS
from pipeline.budget.timing import timed, trained_s


class EpochResult(Protocol):
    """What an epoch's training steps did (``pipeline/training/loop.EpochStats``)."""

    examples: int
    seconds: float


class PlanProgress(Protocol):
    """The run's progress through its plan (``pipeline/training/state.RunProgress``)."""

    epochs: int

    def replan(self, next_epoch: int, epochs: int) -> None:
        """Go on from ``next_epoch`` in a plan of ``epochs`` epochs."""


class Replannable(Protocol):
    """The training plan (``pipeline/training/training_plan.TrainingPlan``): what a new length moves."""

    def replan(self, last_epoch: int, epochs: int, events: list, setup: object) -> bool:
        """Take a plan of ``epochs`` epochs after ``last_epoch`` if it keeps what was done."""


# A plan is shortened only when it holds more than this many epochs beyond those that fit and its
# margin, and only once the planner has measured a few epochs of the network the run trains now
# (``SecondsPlanner.settled``): the clock already ends a run whose plan is long (meter.py), and a
# plan that flipped between two lengths on each epoch's noise would move its stages back and
# forth for nothing. A plan is lengthened on any epoch's evidence: a network's first epoch, its
# slowest, can only plan too few.
SHRINK_SLACK_EPOCHS = 1


def replan_after(
    epoch: int, stats: EpochResult, meter: BudgetMeter, plan: Replannable, progress: PlanProgress
) -> bool:
    """After epoch ``epoch`` (``stats``; ``meter`` settled: its seconds spent and what the epoch
    trained outside its steps, ``meter.reserve_s``; ``meter.exhausted`` if the budget cut the
    epoch short), give the run a plan of the epochs its seconds left buy, where ``plan`` can
    take it; True when it did."""
    planner = meter.planner
    if planner is None or not stats.examples:  # only a seconds run's meter has a planner
        return False
    planner.record(epoch, progress.epochs, stats.seconds / stats.examples, meter.reserve_s)
    next_epoch = epoch + 1
    # Ended: the budget cut this epoch short, or the plan is over and its rate has annealed
    # (more epochs now would train at a rate of zero: seconds spent, nothing learnt). A next
    # epoch that cannot pay its first step is not begun (the meter's check after this).
    if meter.exhausted or next_epoch >= progress.epochs:
        return False
    guess = progress.epochs - SECONDS_MARGIN_EPOCHS
    fitting = planner.epochs_fitting(next_epoch, meter.budget.amount - meter.spent, guess)
    wanted = min(MAX_EPOCHS, max(fitting + SECONDS_MARGIN_EPOCHS, next_epoch + 1))
    if progress.epochs - SHRINK_SLACK_EPOCHS <= wanted <= progress.epochs:
        return False
    if wanted < progress.epochs and not planner.settled():  # longer on any epoch, shorter on a few
        return False
    events, setup = planner.pieces(wanted)
    if not plan.replan(epoch, wanted, events, setup):
        return False
    progress.replan(next_epoch, wanted)
    return True


def settle_seconds(
    meter: BudgetMeter,
    epoch: int,
    stats: EpochResult,
    parts: tuple[dict[str, float], dict[str, float]],
    plan: Replannable,
    progress: PlanProgress,
    batch_size: int,
) -> bool:
    """A seconds run after epoch ``epoch``'s steps (``parts``: the run's seconds per part before
    the epoch and now, ``timing.py``): the meter learns what the epoch spent, the run re-plans
    (``replan_after``; True when it did) and the meter asks whether a next epoch could pay its
    first step. The run re-plans first, so that its own seconds are spent before that check.
    What trained outside the steps (the diet's bookkeeping, growth, the epoch's set-up,
    re-planning) is kept back; and a next epoch that could not pay its first step is not begun:
    this one is the last (validated whole)."""
    before, now = parts

    def settle() -> None:
        meter.reserve_s = trained_s(now) - trained_s(before) - stats.seconds
        meter.spent = trained_s(now)

    settle()
    with timed(now, "plan"):
        replanned = replan_after(epoch, stats, meter, plan, progress)
    settle()
    meter.allows(0, batch_size, 0.0, 0.0)
    return replanned

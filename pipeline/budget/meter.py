"""The stop rule while a run trains: can the next step still be paid? No MLflow here.

A FLOPs run pays each step's examples at its network's training FLOPs; a seconds run pays its
seconds that train (``timing.py``), predicting the next step from its own measured rate, and
keeps back what its last epoch trained outside its steps. Either stops before the step that
would overrun its budget, so it never spends more than it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from pipeline.budget.spec import Budget
from pipeline.device import synchronize

# A step is predicted at this run's mean seconds per example, but one can take longer (the
# CPU's jitter; on full CIFAR-10-sized data a step is tens of milliseconds, on a 600-example
# subset a few, and one such step overran a 4-second budget by 2.4 ms): a seconds budget pays
# the next step only while half a step more would still fit, so it is never overrun by one slow
# step, for at most one and a half average steps of its seconds left unspent.
STEP_MARGIN = 0.5


class EpochPlanner(Protocol):
    """What re-planning a seconds run asks of its planner (``replan.py``); ``plan.SecondsPlanner``
    is the one the run's length builds."""

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
    # a seconds run's re-planning from its measured epochs (``plan.SecondsPlanner``)
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


# The last share of a seconds budget in which, on CUDA, a step is allowed only by the device's
# clock (one synchronisation per step there): the host runs ahead by at most a few queued steps.
CUDA_EXACT_SHARE = 0.02


def step_allowed(
    meter: BudgetMeter,
    flops_per_train_example: float,
    device: torch.device,
    done: int,
    batch: int,
    clock: Callable[[], float],
) -> bool:
    """Whether the budget pays the next step. On CUDA the host's clock runs ahead of the queued
    steps, so near the end of a seconds budget (its last ``CUDA_EXACT_SHARE``) a step the host's
    clock lets pass is asked again once the device has caught up: the budget is never overrun by
    the queue, and the steps before keep running ahead of the host unhindered."""
    allowed = meter.allows(done, batch, flops_per_train_example, clock())
    seconds_on_cuda = device.type == "cuda" and meter.budget.unit == "seconds"
    if allowed and seconds_on_cuda and meter.near_end(CUDA_EXACT_SHARE):
        synchronize(device)
        allowed = meter.allows(done, batch, flops_per_train_example, clock())
    return allowed

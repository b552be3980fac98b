"""The run length a budget buys, and a seconds run's planner that asks again as it trains; no
MLflow and no training here: the caller builds a plan of E epochs and prices a network's example
(its training FLOPs, or its seconds timed through the training loop)."""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from models.errors import UserError
from models.schedule import NAMED_SCHEDULES, GrowthEvent, named_schedule, parse_schedule, spec_at_epoch
from models.spec import ArchSpec
from pipeline.budget.spec import (
    MAX_EPOCHS,
    PRUNED_SHARE_PLANNED,
    SECONDS_MARGIN_EPOCHS,
    Budget,
    epochs_for,
    scale_epoch,
)


class PlanAt(NamedTuple):
    """A run's pieces for a plan of E epochs, built by the caller (``pipeline/run/length.py``)."""

    train_cfg: Any  # the run's TrainConfig with ``epochs`` = E
    events: list[GrowthEvent]
    final: ArchSpec
    setup: object  # the curriculum setup (``curriculum``, ``pruner``) built for E epochs


class PlanBuilder(Protocol):
    """Builds a run's plan of E epochs and raises (a ``UserError``) where one cannot work: the
    one thing planning asks of the run above it, handed down rather than imported."""

    def __call__(self, epochs: int) -> PlanAt: ...


def plan_epochs(
    budget: Budget,
    built: PlanBuilder,
    start: ArchSpec,
    n_train: int,
    cost_per_example: Callable[[ArchSpec, int], float],
    batch_size: int,
    resumed_epochs: int = 0,
) -> tuple[int, SecondsPlanner | None]:
    """The planned epochs for ``budget`` (a resumed seconds run's ``resumed_epochs``: timing
    again could plan others) and, for a seconds budget, its planner. ``cost_per_example(spec, epoch)``
    is the budget unit's cost of training one example on ``spec`` in ``epoch``."""

    @functools.cache
    def planned_cost(epochs: int) -> float:
        plan = built(epochs)
        total = 0.0
        for epoch in range(epochs):
            n = planned_examples(plan.setup, epoch, epochs, n_train)
            total += n * cost_per_example(spec_at_epoch(start, plan.events, epoch), epoch)
        return total

    if resumed_epochs:
        epochs = resumed_epochs
    else:
        one_step = batch_size * cost_per_example(start, 0)
        epochs = epochs_for(budget, planned_cost, one_step)
        if budget.unit == "seconds":  # the clock, not the plan, ends it (meter.py)
            epochs = min(MAX_EPOCHS, epochs + SECONDS_MARGIN_EPOCHS)
    built(epochs)  # the plan the run trains, built before any longer one (as it always was)
    if budget.unit != "seconds":
        return epochs, None
    # Re-planning looks plans up rather than building them while the seconds run: building
    # one (its curriculum, its scores found in the tracking store) took 7 ms, a sixth of a
    # tiny run's epoch. Plans up to twice the first are built now, before training.
    for longer in range(epochs + 1, min(MAX_EPOCHS, 2 * epochs) + 1):
        try:
            built(longer)
        except UserError:  # a run this long cannot work: re-planning stops short of it
            break
    # a timing does not depend on the epoch: the planner measures what each epoch costs
    return epochs, SecondsPlanner(built, start, n_train, lambda spec: cost_per_example(spec, 0))


class WrittenInEpochs(Protocol):
    """A curriculum's options written in epochs (``pipeline/curriculum/config.CurriculumConfig``)."""

    tier_boundaries: str
    prune_from: int

    def boundaries(self) -> list[int] | None: ...


def written_schedule(text: str, written_for: int) -> Callable[[int], list[GrowthEvent]]:
    """``--schedule``'s growth events at each run length: a named schedule is a function of the
    length; one written in epochs is parsed once, for ``written_for`` (``--epochs``), and keeps
    its fractions."""
    name = text.strip()
    if name in NAMED_SCHEDULES:
        return functools.partial(named_schedule, name)
    return functools.partial(scaled_events, parse_schedule(text, written_for), written_for)


def scaled_events(events: list[GrowthEvent], written_for: int, epochs: int) -> list[GrowthEvent]:
    """``events`` written for a ``written_for``-epoch run, at the same fractions of ``epochs``
    (never before epoch 1: epoch 0 trains the start)."""
    return [
        dataclasses.replace(event, epoch=max(1, scale_epoch(event.epoch, written_for, epochs)))
        for event in events
    ]


def scaled_curriculum(cfg: WrittenInEpochs, written_for: int, epochs: int) -> WrittenInEpochs:
    """``--tier-boundaries`` and ``--prune-from``, written for ``--epochs``, at ``epochs``."""
    if written_for == epochs:
        return cfg
    bounds = cfg.boundaries()
    return dataclasses.replace(
        cfg,
        tier_boundaries=",".join(str(scale_epoch(b, written_for, epochs)) for b in bounds) if bounds else "",
        prune_from=max(1, scale_epoch(cfg.prune_from, written_for, epochs)) if cfg.prune_from else 0,
    )


# How many of a run's latest epochs its planner reads a rate from: their median, so that one
# epoch slowed by something else on the machine does not move the plan (the tiny test runs'
# 0.1-second epochs made a one-epoch rate swing the plan by a fifth, back and forth).
RECENT_EPOCHS = 3


@dataclass
class SecondsPlanner:
    """How many epochs the seconds a run has left still buy, from its own measured epochs: a
    seconds run's plan is first made from a few timed batches of each network, which can be
    off by a tenth (CIFAR-10 seed 170 planned 21 epochs where 24 fitted, and ended with 14% of
    its seconds unspent), so after every epoch it asks again (``replan.py``).

    A network the run has trained costs what its latest epochs measured per example (the
    median of the last ``RECENT_EPOCHS``); one it has not trained yet costs its timing scaled as
    the latest epochs' timing was off (the machine's speed moves every network alike); every
    epoch adds the median of what earlier epochs trained outside their steps (the diet's
    bookkeeping, growth)."""

    built: PlanBuilder
    start: ArchSpec
    n_train: int
    timed: Callable[[ArchSpec], float]  # seconds per example from the timing before training
    measured: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # per spec, per epoch
    scales: list[float] = dataclasses.field(default_factory=list)  # per epoch: measured / timed
    overheads: list[float] = dataclasses.field(default_factory=list)  # per epoch: outside the steps
    latest: str = ""  # the spec (JSON) of the last epoch measured

    def pieces(self, epochs: int) -> tuple[list[GrowthEvent], object]:
        """The growth events and curriculum setup of a plan of ``epochs`` epochs."""
        plan = self.built(epochs)
        return plan.events, plan.setup

    def record(self, epoch: int, epochs: int, seconds_per_example: float, overhead_s: float) -> None:
        """What epoch ``epoch`` of a plan of ``epochs`` measured: its steps' seconds per example
        and the seconds it trained outside them."""
        spec = spec_at_epoch(self.start, self.pieces(epochs)[0], epoch)
        self.latest = spec.to_json()
        self.measured.setdefault(self.latest, []).append(seconds_per_example)
        self.scales.append(seconds_per_example / self.timed(spec))
        self.overheads.append(overhead_s)

    def settled(self) -> bool:
        """Whether it has measured enough epochs of the network it trains now to shorten a plan
        on: a network's first epoch is its slowest (the run's first on full Fashion-MNIST: 94
        microseconds an example against 83 after), and one such epoch cut plans that fitted
        (Fashion-MNIST seed 160: 20 epochs to 17, then back to 19; CIFAR-10 seed 170, the epoch
        after its growth: 24 to 21, then back to 24)."""
        return len(self.measured.get(self.latest, ())) >= RECENT_EPOCHS

    def rate(self, spec: ArchSpec) -> float:
        """The seconds per example ``spec`` is expected to train at from here on."""
        measured = self.measured.get(spec.to_json())
        if measured:
            return statistics.median(measured[-RECENT_EPOCHS:])
        scale = statistics.median(self.scales[-RECENT_EPOCHS:]) if self.scales else 1.0
        return scale * self.timed(spec)

    def epochs_fitting(self, next_epoch: int, seconds_left: float, guess: int) -> int:
        """The most epochs E such that epochs ``next_epoch`` .. E-1 of a plan of E epochs fit
        ``seconds_left`` (``next_epoch`` itself: not even the next epoch fits), searched from
        ``guess`` (the plan's epochs less its margin: usually a step or two away)."""
        overhead = statistics.median(self.overheads) if self.overheads else 0.0

        def rest(epochs: int) -> float:
            events, setup = self.pieces(epochs)
            total = 0.0
            for epoch in range(next_epoch, epochs):
                rate = self.rate(spec_at_epoch(self.start, events, epoch))
                total += planned_examples(setup, epoch, epochs, self.n_train) * rate + overhead
            return total

        epochs = max(next_epoch, min(guess, MAX_EPOCHS))
        while epochs > next_epoch and rest(epochs) > seconds_left:
            epochs -= 1
        while epochs < MAX_EPOCHS and rest(epochs + 1) <= seconds_left:
            epochs += 1
        return epochs


def planned_examples(setup, epoch: int, epochs: int, n_train: int) -> float:
    """The examples epoch ``epoch`` plans to train on: the curriculum's, less expected pruning."""
    curriculum, pruner = getattr(setup, "curriculum", None), getattr(setup, "pruner", None)
    n = float(curriculum.count(epoch)) if curriculum is not None else float(n_train)
    if pruner is not None and pruner.active(epoch, epochs):
        n *= 1 - pruner.rate * PRUNED_SHARE_PLANNED
    return n

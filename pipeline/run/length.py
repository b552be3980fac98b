"""How long a training run trains: its budget resolved to epochs, and everything scaled to them.

Shared by train_static and train_dynamic. The entry point says what a run of E epochs is (its
growth events, final spec and curriculum, through ``stages``); this module picks E from the
budget (``pipeline/training/budget.py``) and returns the run's pieces built for it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import mlflow
import torch

from models.builder import build_model
from models.errors import UserError
from models.flops import flops_per_example
from models.schedule import NAMED_SCHEDULES, GrowthEvent, named_schedule, parse_schedule, spec_at_epoch
from models.spec import ArchSpec
from pipeline.curriculum.config import CurriculumConfig
from pipeline.data.dataset import Data
from pipeline.device import pick_device, place_model
from pipeline.precision import grad_scaler
from pipeline.training.budget import (
    MAX_EPOCHS,
    PRUNED_SHARE_PLANNED,
    RUN_METRICS,
    SECONDS_MARGIN_EPOCHS,
    Budget,
    BudgetError,
    BudgetMeter,
    epochs_for,
    parse_budget,
    scale_epoch,
)
from pipeline.training.config import TrainConfig
from pipeline.training.loop import EpochClock, StepRecipe, train_one_epoch


@dataclass
class RunLength:
    """A run's budget and the pieces of the run built for the epochs it buys."""

    budget: Budget
    train_cfg: TrainConfig  # with ``epochs`` = the planned epochs
    events: list[GrowthEvent]
    final: ArchSpec
    setup: object  # the CurriculumSetup built for these epochs
    # a seconds run's re-planning from its measured epochs (None for other budgets)
    planner: SecondsPlanner | None = None

    @property
    def epochs(self) -> int:
        return self.train_cfg.epochs

    def params(self) -> dict[str, str]:
        """Logged beside the options: runs with the same ``budget_resolved`` are comparable."""
        return {"budget_resolved": self.budget.describe(), "planned_epochs": str(self.epochs)}

    def meter(self) -> BudgetMeter | None:
        return None if self.budget.unit == "epochs" else BudgetMeter(self.budget, planner=self.planner)


def static_training_flops(spec: ArchSpec, data: Data, epochs: int) -> float:
    """A static run's training FLOPs, exact and known beforehand: every example, every epoch."""
    return float(flops_per_example(build_model(spec), data.input_shape)["train"]) * len(data.train) * epochs


def run_cost(run_id: str, unit: str) -> float:
    """The training cost of a FINISHED run in ``unit`` (flops or seconds), for ``run:`` budgets."""
    try:
        run = mlflow.MlflowClient().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise BudgetError(f"--budget run:{run_id}: no such run in this tracking store") from None
    if run.info.status != "FINISHED":
        raise BudgetError(
            f"--budget run:{run_id}: the run is {run.info.status}, not FINISHED; its cost is unknown"
        )
    metric = RUN_METRICS[unit]
    if metric not in run.data.metrics:
        older = " (it trained before seconds that train were counted apart: give its seconds as Ns)"
        raise BudgetError(
            f"--budget run:{run_id}: the run logged no {metric}, so it has no {unit} cost"
            + (older if unit == "seconds" else "")
        )
    return float(run.data.metrics[metric])


def scaled_schedule(text: str, written_for: int, epochs: int) -> list[GrowthEvent]:
    """Growth events for an ``epochs``-epoch run: a named schedule is a function of the run
    length; one written in epochs is written for ``--epochs`` and keeps its fractions."""
    if text.strip() in NAMED_SCHEDULES:
        return named_schedule(text.strip(), epochs)
    return [
        dataclasses.replace(event, epoch=max(1, scale_epoch(event.epoch, written_for, epochs)))
        for event in parse_schedule(text, written_for)
    ]


def scaled_curriculum(cfg: CurriculumConfig, written_for: int, epochs: int) -> CurriculumConfig:
    """``--tier-boundaries`` and ``--prune-from``, written for ``--epochs``, at ``epochs``."""
    if written_for == epochs:
        return cfg
    bounds = cfg.boundaries()
    return dataclasses.replace(
        cfg,
        tier_boundaries=",".join(str(scale_epoch(b, written_for, epochs)) for b in bounds) if bounds else "",
        prune_from=max(1, scale_epoch(cfg.prune_from, written_for, epochs)) if cfg.prune_from else 0,
    )


Stages = Callable[[TrainConfig], tuple[list[GrowthEvent], ArchSpec, object]]


def resolve_run_length(
    train_cfg: TrainConfig, data: Data, start: ArchSpec, stages: Stages, resume_run_id: str = ""
) -> RunLength:
    """Pick the planned epochs for ``train_cfg.budget`` and build the run's pieces for them.

    ``stages(cfg)`` builds (events, final spec, curriculum setup) for ``cfg.epochs`` epochs and
    raises if they cannot work. A resumed seconds run keeps the epochs it planned (timing again
    could plan others)."""
    budget = parse_budget(train_cfg.budget, train_cfg.epochs, run_cost)

    @functools.cache
    def built(epochs: int):
        cfg = dataclasses.replace(train_cfg, epochs=epochs)
        return (cfg, *stages(cfg))

    cost_per_example = _cost_per_example(budget, train_cfg, data)

    @functools.cache
    def planned_cost(epochs: int) -> float:
        _cfg, events, _final, setup = built(epochs)
        total = 0.0
        for epoch in range(epochs):
            n = _examples(setup, epoch, epochs, len(data.train))
            total += n * cost_per_example(spec_at_epoch(start, events, epoch))
        return total

    if resume_run_id and budget.unit == "seconds":
        epochs = int(float(mlflow.MlflowClient().get_run(resume_run_id).data.params["planned_epochs"]))
    else:
        one_step = train_cfg.batch_size * cost_per_example(start)
        epochs = epochs_for(budget, planned_cost, one_step)
        if budget.unit == "seconds":  # the clock, not the plan, ends it (pipeline/training/budget.py)
            epochs = min(MAX_EPOCHS, epochs + SECONDS_MARGIN_EPOCHS)
    cfg, events, final, setup = built(epochs)
    planner = None
    if budget.unit == "seconds":
        planner = SecondsPlanner(built, start, len(data.train), cost_per_example)
        # Re-planning looks plans up rather than building them while the seconds run: building
        # one (its curriculum, its scores found in the tracking store) took 7 ms, a sixth of a
        # tiny run's epoch. Plans up to twice the first are built now, before training.
        for longer in range(epochs + 1, min(MAX_EPOCHS, 2 * epochs) + 1):
            try:
                built(longer)
            except UserError:  # a run this long cannot work: re-planning stops short of it
                break
    return RunLength(budget, cfg, events, final, setup, planner)


# How many of a run's latest epochs its planner reads a rate from: their median, so that one
# epoch slowed by something else on the machine does not move the plan (the tiny test runs'
# 0.1-second epochs made a one-epoch rate swing the plan by a fifth, back and forth).
RECENT_EPOCHS = 3


@dataclass
class SecondsPlanner:
    """How many epochs the seconds a run has left still buy, from its own measured epochs: a
    seconds run's plan is first made from a few timed batches of each network, which can be
    off by a tenth (CIFAR-10 seed 170 planned 21 epochs where 24 fitted, and ended with 14% of
    its seconds unspent), so after every epoch it asks again (``pipeline/training/replan.py``).

    A network the run has trained costs what its latest epochs measured per example (the
    median of the last ``RECENT_EPOCHS``); one it has not trained yet costs its timing scaled as
    the latest epochs' timing was off (the machine's speed moves every network alike); every
    epoch adds the median of what earlier epochs trained outside their steps (the diet's
    bookkeeping, growth)."""

    built: Callable[[int], tuple]  # (cfg, events, final, setup) of a plan of E epochs
    start: ArchSpec
    n_train: int
    timed: Callable[[ArchSpec], float]  # seconds per example from the timing before training
    measured: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # per spec, per epoch
    scales: list[float] = dataclasses.field(default_factory=list)  # per epoch: measured / timed
    overheads: list[float] = dataclasses.field(default_factory=list)  # per epoch: outside the steps
    latest: str = ""  # the spec (JSON) of the last epoch measured

    def pieces(self, epochs: int) -> tuple[list[GrowthEvent], object]:
        """The growth events and curriculum setup of a plan of ``epochs`` epochs."""
        _cfg, events, _final, setup = self.built(epochs)
        return events, setup

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
                total += _examples(setup, epoch, epochs, self.n_train) * rate + overhead
            return total

        epochs = max(next_epoch, min(guess, MAX_EPOCHS))
        while epochs > next_epoch and rest(epochs) > seconds_left:
            epochs -= 1
        while epochs < MAX_EPOCHS and rest(epochs + 1) <= seconds_left:
            epochs += 1
        return epochs


def _examples(setup, epoch: int, epochs: int, n_train: int) -> float:
    """The examples epoch ``epoch`` plans to train on: the curriculum's, less expected pruning."""
    curriculum, pruner = getattr(setup, "curriculum", None), getattr(setup, "pruner", None)
    n = float(curriculum.count(epoch)) if curriculum is not None else float(n_train)
    if pruner is not None and pruner.active(epoch, epochs):
        n *= 1 - pruner.rate * PRUNED_SHARE_PLANNED
    return n


CALIBRATION_BATCHES = 8


def seconds_per_example(model: torch.nn.Module, split, cfg: TrainConfig, device: torch.device) -> float:
    """Seconds per training example of ``model`` (a copy is trained at rate 0), timed through
    the training loop itself on ``split`` after one untimed pass: the step and the loop's own
    per-step work (augmentation, indexing, bookkeeping), which for a small network is much of
    its time, where timing the bare step planned twice the epochs a budget bought."""
    probe = copy.deepcopy(model)
    optimizer = torch.optim.SGD(probe.parameters(), lr=0.0)
    precision = cfg.resolved_precision(device)
    positions = torch.arange(len(split))
    clock = EpochClock.single(0.0)  # one generator: the second pass draws on from the first
    for _ in range(2):  # the first pass warms the allocator and the kernels up
        recipe = StepRecipe.of(cfg, precision, grad_scaler(precision, device))
        stats = train_one_epoch(probe, optimizer, split, positions, recipe, clock)
    return stats.seconds / max(stats.examples, 1)


def _cost_per_example(budget: Budget, train_cfg: TrainConfig, data: Data) -> Callable[[ArchSpec], float]:
    """The budget unit's cost of training one example on a spec: its training FLOPs, or its
    measured seconds (timed once per spec on the run's device)."""

    @functools.cache
    def flops(spec_json: str) -> float:
        model = build_model(ArchSpec.from_dict(json.loads(spec_json)))
        return float(flops_per_example(model, data.input_shape)["train"])

    @functools.cache
    def seconds(spec_json: str) -> float:
        device = pick_device(train_cfg.device)
        model = place_model(build_model(ArchSpec.from_dict(json.loads(spec_json))), device)
        n = min(len(data.train), CALIBRATION_BATCHES * train_cfg.batch_size)
        first = data.train.take(torch.arange(n)).to(device)
        with torch.random.fork_rng(devices=[]):
            return seconds_per_example(model, first, train_cfg, device)

    if budget.unit == "seconds":
        return lambda spec: seconds(spec.to_json())
    return lambda spec: flops(spec.to_json())

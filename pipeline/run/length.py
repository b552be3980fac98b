"""How long a training run trains: its budget resolved to epochs, and everything scaled to them.

Shared by train_static and train_dynamic. The entry point says what a run of E epochs is (its
growth events, final spec and curriculum, through ``stages``); this module gives the budget
package (``pipeline/budget/``) what it cannot have itself, the tracking store's record of a
``run:`` budget's run and the timing of a network through the training loop, and returns the
run's pieces built for the epochs the budget buys.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import mlflow
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.schedule import GrowthEvent
from models.spec import ArchSpec
from pipeline.budget.meter import BudgetMeter
from pipeline.budget.plan import PlanAt, SecondsPlanner, plan_epochs
from pipeline.budget.spec import RUN_METRICS, Budget, BudgetError, parse_budget
from pipeline.data.dataset import Data
from pipeline.device import pick_device, place_model
from pipeline.precision import grad_scaler
from pipeline.run.resume import run_to_resume
from pipeline.tracking.errors import UpstreamError
from pipeline.training.config import TrainConfig
from pipeline.training.loop import EpochClock, StepRecipe, train_one_epoch
from pipeline.training.stem import set_stem_bias_trains, stem_frozen


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


def static_training_flops(spec: ArchSpec, data: Data, epochs: int, whiten_bias_epochs: int = 0) -> float:
    """A static run's training FLOPs, exact and known beforehand: every example, every epoch,
    the epochs after ``--whiten-bias-epochs`` without the stem's backward pass."""
    frozen = [stem_frozen(epoch, whiten_bias_epochs) for epoch in range(epochs)]
    per_example = {each: training_flops(spec, data.input_shape, each) for each in set(frozen)}
    return float(sum(per_example[each] for each in frozen) * len(data.train))


def training_flops(spec: ArchSpec, input_shape: tuple[int, ...], stem_is_frozen: bool = False) -> int:
    """Training FLOPs of one example on ``spec``, with its whitening stem's bias frozen or not."""
    model = build_model(spec)
    if stem_is_frozen:
        set_stem_bias_trains(model, False)
    return flops_per_example(model, input_shape)["train"]


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


Stages = Callable[[TrainConfig], tuple[list[GrowthEvent], ArchSpec, object]]


def resolve_run_length(
    train_cfg: TrainConfig, data: Data, start: ArchSpec, stages: Stages, resume_run_id: str = ""
) -> RunLength:
    """Pick the planned epochs for ``train_cfg.budget`` (``pipeline/budget/plan.py``) and build
    the run's pieces for them.

    ``stages(cfg)`` (``run/plan.stages``) builds (events, final spec, curriculum setup) for
    ``cfg.epochs`` epochs and raises if they cannot work. A resumed seconds run keeps the
    epochs it planned (timing again could plan others)."""
    budget = parse_budget(train_cfg.budget, train_cfg.epochs, run_cost)

    @functools.cache
    def built(epochs: int) -> PlanAt:
        cfg = dataclasses.replace(train_cfg, epochs=epochs)
        return PlanAt(cfg, *stages(cfg))

    resumed = 0
    if resume_run_id and budget.unit == "seconds":
        resumed = _planned_epochs(resume_run_id)
    cost = _cost_per_example(budget, train_cfg, data)
    epochs, planner = plan_epochs(budget, built, start, len(data.train), cost, train_cfg.batch_size, resumed)
    return RunLength(budget, *built(epochs), planner)


def _planned_epochs(run_id: str) -> int:
    """The epochs a seconds run planned, which its resumption keeps (before ``check_resumable``
    has looked at the run: a wrong id is still bad input here)."""
    params = run_to_resume(run_id).data.params
    if "planned_epochs" not in params:
        raise UpstreamError(f"--resume {run_id}: the run planned no epochs; it is no training run")
    return int(float(params["planned_epochs"]))


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


def _cost_per_example(budget: Budget, train_cfg: TrainConfig, data: Data) -> Callable[[ArchSpec, int], float]:
    """The budget unit's cost of training one example on a spec in an epoch: its training FLOPs
    (without the stem's backward pass once ``--whiten-bias-epochs`` have passed), or its
    measured seconds (timed once per spec on the run's device; re-planning follows the epochs
    as they come)."""
    frozen_from = train_cfg.whiten_bias_epochs

    @functools.cache
    def flops(spec_json: str, stem_is_frozen: bool) -> float:
        spec = ArchSpec.from_dict(json.loads(spec_json))
        return float(training_flops(spec, data.input_shape, stem_is_frozen))

    @functools.cache
    def seconds(spec_json: str) -> float:
        device = pick_device(train_cfg.device)
        model = place_model(build_model(ArchSpec.from_dict(json.loads(spec_json))), device)
        n = min(len(data.train), CALIBRATION_BATCHES * train_cfg.batch_size)
        first = data.train.take(torch.arange(n)).to(device)
        with torch.random.fork_rng(devices=[]):
            return seconds_per_example(model, first, train_cfg, device)

    if budget.unit == "seconds":
        return lambda spec, epoch: seconds(spec.to_json())
    return lambda spec, epoch: flops(spec.to_json(), stem_frozen(epoch, frozen_from))

"""The epoch loop shared by train_static and train_dynamic (``fit``); no MLflow inside.

What differs between the two entry points is a ``TrainingPlan``: whether the model grows before
an epoch, and which training examples the epoch uses (the curriculum). A static run is the
default plan: no growth, every example, every epoch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from models.builder import FIT_IMAGES, SpecNet, count_parameters, fit_to_data, fitted_to_data
from models.flops import flops_per_example
from models.tta import with_tta
from pipeline.budget import timing
from pipeline.budget.meter import BudgetMeter, step_allowed
from pipeline.budget.replan import settle_seconds
from pipeline.data.dataset import Data
from pipeline.device import place_model
from pipeline.precision import grad_scaler
from pipeline.training import health, monitor
from pipeline.training.average import WeightAverage
from pipeline.training.config import TrainConfig, set_batchnorm_momentum
from pipeline.training.lookahead import Lookahead
from pipeline.training.loop import (
    EpochClock,
    EpochStats,
    LossTerms,
    StepRecipe,
    evaluate_split,
    train_one_epoch,
)
from pipeline.training.lr_schedule import LR_SCHEDULES
from pipeline.training.metrics import tier_accuracies
from pipeline.training.pace import CheckpointPace
from pipeline.training.probes import EpochProbe
from pipeline.training.state import ArchitectureTrace, FitState, RunProgress
from pipeline.training.stem import stem_bias_changes
from pipeline.training.training_plan import TrainingPlan


def schedule_progress(run: RunProgress, share: float, seconds: BudgetMeter | None) -> float:
    """The schedule's progress at ``share`` of the planned epochs trained: the run's
    (``RunProgress``), or for a seconds run the share of its seconds spent at the meter's last
    check where that is further on (the schedule follows the clock: ``pipeline/budget/meter.py``)."""
    progress = run.at(share)
    return max(progress, seconds.progress) if seconds is not None else progress


def learning_rate(cfg: TrainConfig, trace: ArchitectureTrace, progress: float) -> float:
    """The schedule's rate (``--lr-schedule``) at ``progress``; with ``--growth-rewarm w``, the rate after
    each growth event climbs linearly from near zero back to the schedule's over a fraction
    ``w`` of training, so the new layers' first steps do not take the full rate. It climbs from
    the progress the growth happened at (recorded with the event: a seconds run's plan and
    clock can place it elsewhere than its epoch over ``cfg.epochs``, which events recorded
    before that was kept fall back to)."""
    lr = LR_SCHEDULES[cfg.lr_schedule](cfg.lr, progress, cfg.warmup)
    if cfg.growth_rewarm > 0:
        for grown_at in {event.get("progress", event["epoch"] / cfg.epochs) for event in trace.events}:
            if grown_at <= progress < grown_at + cfg.growth_rewarm:
                lr *= (progress - grown_at + 1e-3) / cfg.growth_rewarm
    return lr


def fit(
    state: FitState,
    data: Data,
    cfg: TrainConfig,
    plan: TrainingPlan,
    *,
    val_tiers: torch.Tensor | None = None,
    on_epoch: Callable[[int, dict, FitState], None] | None = None,
    checkpoint: Callable[[FitState, TrainingPlan], None] | None = None,
    progress_bar: bool = False,
    meter: BudgetMeter | None = None,
    checkpoint_pace: CheckpointPace | None = None,
    probes: Sequence[EpochProbe] = (),
) -> FitState:
    """Run epochs ``state.epoch`` onwards to the run's planned epochs (``cfg.epochs``, or those a
    seconds run has re-planned to, kept in ``state.progress``); ``data`` must be on the device.

    ``on_epoch(epoch, metrics, state)`` sees every epoch's metrics (logging, pruning);
    ``checkpoint`` is called after the first epoch, after the last (or the one the run stops
    early at) and between as often as ``checkpoint_pace`` allows (by default after every epoch
    unless writing one is slow next to an epoch). A ``meter`` (``pipeline/budget/meter.BudgetMeter``)
    ends training before a step its FLOPs or seconds budget cannot pay for; with
    ``--stop-on-collapse`` a run that has died (``health.should_stop``) ends early. With
    ``--ema-decay``, validation sees the weight average, and at the end the model takes its
    weights; with ``--tta flip`` it reads each image and its mirror; a whitening stem is fitted
    first. ``probes`` (``probes.py``: early exits, label noise) add to each epoch's metrics.
    """
    state.progress = state.progress or RunProgress(cfg.epochs)
    _fit_to_training_images(state, data, plan)
    loop = _EpochLoop(state, data, cfg, plan, val_tiers=val_tiers, meter=meter, probes=probes)
    chance = health.top_share(data.val.y)
    parts = state.time_parts
    pace = checkpoint_pace or CheckpointPace()
    ended = state.stop_reason in ("collapsed", "budget")  # resumed after it had stopped early
    state.stop_reason = state.stop_reason if ended else "epochs"
    while not ended and state.epoch < state.progress.epochs:  # a seconds run may re-plan them
        epoch = state.epoch
        epoch_start = time.perf_counter()
        before = dict(parts)
        events = loop.grow(epoch)
        positions, weights = loop.diet(epoch)
        allows = loop.allows()
        with timing.timed(parts, "train"):
            stats = train_one_epoch(
                loop.forward,
                state.optimizer,
                data.train,
                positions,
                StepRecipe.of(cfg, state.precision, loop.scaler),
                EpochClock(loop.lr_at, epoch, state.progress.epochs, state.global_step, state.generator),
                loop.loss_terms(epoch, weights),
                allows=allows,
                after_step=loop.after_step(),
                progress_bar=progress_bar,
            )
        if stats.examples == 0:  # the budget could not pay for a single step of this epoch
            loop.undo_growth()  # the run ends on the network it trained, not on untrained layers
            state.stop_reason = "budget"
            _write_checkpoint(checkpoint, state, plan, pace)  # a resume finds it stopped
            break
        loop.after_training(epoch, stats, before)
        metrics = loop.validate(epoch, events, stats, positions, epoch_start)
        metrics.update(timing.epoch_metrics(before, parts))
        state.history.append({"epoch": epoch, **metrics})
        state.epoch = epoch + 1
        plan.after_epoch(epoch, metrics)
        if on_epoch is not None:
            with timing.timed(parts, "log"):
                on_epoch(epoch, metrics, state)
        if cfg.stop_on_collapse and health.should_stop(state.history, chance):
            state.stop_reason = "collapsed"
        elif meter is not None and meter.exhausted:
            state.stop_reason = "budget"
        ended = state.stop_reason != "epochs"
        # the last one always: --resume finishes a run stopped while its model was logged
        if ended or state.epoch >= state.progress.epochs or pace.due():
            _write_checkpoint(checkpoint, state, plan, pace)
    if state.average is not None:  # what was validated is what is logged and evaluated
        state.model.load_state_dict(state.average.model.state_dict())
    return state


def _fit_to_training_images(state: FitState, data: Data, plan: TrainingPlan) -> None:
    """Set a new run's first layer, where it is fitted to data (a whitening stem), from up to
    ``FIT_IMAGES`` of the training images the plan may train on, drawn with a fixed seed (a
    folder dataset's split is ordered by class): before the weight average copies the model and
    before it is compiled. A resumed run was fitted already. Its seconds are training's (airbench
    counts them too), and the run's."""
    if state.global_step > 0 or not fitted_to_data(state.model.spec):
        return
    positions = plan.fit_positions(data)
    draw = torch.randperm(len(positions), generator=torch.Generator().manual_seed(0))[:FIT_IMAGES]
    start = time.perf_counter()
    fit_to_data(state.model, data.train.x[positions[draw].sort().values.to(data.train.x.device)])
    seconds = time.perf_counter() - start
    state.time_parts["train"] = state.time_parts.get("train", 0.0) + seconds
    state.cumulative_s += seconds


def _write_checkpoint(
    checkpoint: Callable[[FitState, TrainingPlan], None] | None,
    state: FitState,
    plan: TrainingPlan,
    pace: CheckpointPace,
) -> None:
    """``checkpoint(state, plan)`` where the run has one, its seconds the run's checkpoint's."""
    if checkpoint is not None:
        with pace.writing(), timing.timed(state.time_parts, "checkpoint"):
            checkpoint(state, plan)


class _EpochLoop:
    """What ``fit`` sets up once for a run, and the parts of each epoch around its training
    steps: growth, the diet's examples, the budget's settling, validation with its probes. Each
    part's seconds go to ``state.time_parts`` (``pipeline/budget/timing.py``)."""

    def __init__(
        self,
        state: FitState,
        data: Data,
        cfg: TrainConfig,
        plan: TrainingPlan,
        *,
        val_tiers: torch.Tensor | None,
        meter: BudgetMeter | None,
        probes: Sequence[EpochProbe],
    ):
        self.state, self.data, self.cfg, self.plan = state, data, cfg, plan
        self.val_tiers, self.meter = val_tiers, meter
        self.parts = state.time_parts
        self.seconds = meter if meter is not None and meter.budget.unit == "seconds" else None
        self.last_step_progress = 0.0  # the schedule's progress at the last step's rate
        self.flops = flops_per_example(state.model, data.input_shape)
        self.device = data.train.x.device
        if state.scaler is None:
            state.scaler = grad_scaler(state.precision, self.device)
        self.scaler = state.scaler
        self.forward = _compiled(state.model, cfg)
        set_batchnorm_momentum(state.model, cfg.bn_momentum)
        plan.precision = state.precision
        self.probes = list(probes)
        if cfg.ema_decay > 0 and state.average is None:
            state.average = WeightAverage(state.model, cfg.ema_decay)
        if cfg.lookahead > 0 and state.lookahead is None:
            state.lookahead = Lookahead(state.model, cfg.lookahead)
        self.val_order = monitor.sample_order(data.val.y)
        self.watched = self._watched()
        self.before_growth: _Network | None = None  # what this epoch's growth replaced (grow)

    def _watched(self) -> set[int]:
        """The epochs whose validation reads the whole split: around each growth event, the last."""
        growth = {e + d for e in self.plan.growth_epochs() for d in (-1, 0)}
        return growth | {self.state.progress.epochs - 1}

    def lr_at(self, share: float) -> float:
        """The rate at ``share`` of the planned epochs trained; the progress it was taken at is
        kept for the epoch's metrics (a seconds run's ``budget/schedule_progress``)."""
        self.last_step_progress = self.lr_progress(share)
        return learning_rate(self.cfg, self.state.trace, self.last_step_progress)

    def lr_progress(self, share: float) -> float:
        return schedule_progress(self.state.progress, share, self.seconds)

    def grow(self, epoch: int) -> list[dict]:
        """The plan's growth before ``epoch``: the new model and optimizer; its events. What it
        replaced is kept until the epoch's steps are paid (``undo_growth``). Then the network
        the epoch trains: with ``--whiten-bias-epochs N`` the stem's bias only in the first N."""
        state = self.state
        self.before_growth = _Network.of(self)
        with timing.timed(self.parts, "growth"):
            model, optimizer, events = self.plan.before_epoch(epoch, state.model, state.optimizer)
        if model is not state.model:
            place_model(model, self.device)  # new layers take the layout of the old ones
            set_batchnorm_momentum(model, self.cfg.bn_momentum)
            self.flops = flops_per_example(model, self.data.input_shape)
            self.forward = _compiled(model, self.cfg)
            if state.average is not None:  # the old shape's average cannot follow the new one
                state.average = WeightAverage(model, state.average.decay)
            if state.lookahead is not None:  # nor its slow copy: it starts again from this one
                state.lookahead = Lookahead(model, state.lookahead.every, state.lookahead.steps)
        state.model, state.optimizer = model, optimizer
        if stem_bias_changes(model, epoch, self.cfg.whiten_bias_epochs):  # its backward pass too
            self.flops = flops_per_example(model, self.data.input_shape)
        grown_at = self.lr_progress(epoch / state.progress.epochs)  # as the epoch begins
        for event in events:  # where the re-warm starts (learning_rate)
            event["progress"] = grown_at
        state.trace.events.extend(events)
        return events

    def after_step(self) -> Callable[[float], None] | None:
        """What runs after each training step: the weight average's update or lookahead's sync
        (at the schedule's progress), or nothing."""
        average, lookahead = self.state.average, self.state.lookahead
        if average is not None:
            return lambda share: average.update()
        if lookahead is not None:
            return lambda share: lookahead.step(self.lr_progress(share))
        return None

    def undo_growth(self) -> None:
        """Back to the network and the plan's state from before this epoch's growth: a budget
        that cannot pay one step of the epoch ends the run there, and new layers that never
        trained would otherwise be what it logs and evaluates. Growth leaves the old model and
        its optimizer as they were (``models/growth.grow`` shares the unchanged modules, and no
        step has touched them since)."""
        if self.before_growth is not None:
            self.before_growth.restore(self)

    def diet(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The epoch's examples (the plan's diet) and their loss weights (None: all 1)."""
        with timing.timed(self.parts, "diet"):
            positions = self.plan.positions(epoch, self.state.model, self.data)
            return positions, self.plan.example_weights(epoch)

    def loss_terms(self, epoch: int, weights: torch.Tensor | None) -> LossTerms:
        """What the epoch's loss is made of beyond the head's cross-entropy."""
        return LossTerms(
            weights=None if weights is None else weights.to(self.device),
            example_losses=self.plan.wants_example_losses(epoch),
            exit_weights=self.plan.weights_for(self.state.model),
        )

    def allows(self) -> Callable[[int, int, Callable[[], float]], bool] | None:
        """The budget's stop rule for the epoch's steps, with what the run spent before them
        (FLOPs, or seconds that train); None without a budget."""
        meter, state = self.meter, self.state
        if meter is None:
            return None
        flops_spent = meter.budget.unit == "flops"
        meter.spent = state.cumulative_train_flops if flops_spent else timing.trained_s(self.parts)
        return functools.partial(step_allowed, meter, self.flops["train"], self.device)

    def after_training(self, epoch: int, stats: EpochStats, before: dict[str, float]) -> None:
        """With lookahead the model takes the slow weights; the plan sees the examples' losses; a
        seconds budget settles what the epoch spent and re-plans the run's epochs from it
        (``pipeline/budget/replan.py``). The epoch trained, so its growth stays: what it replaced
        is let go."""
        if self.state.lookahead is not None:  # the epoch ends on the slow weights
            self.state.lookahead.sync()
        self.before_growth = None
        if stats.losses is not None:
            with timing.timed(self.parts, "diet"):
                self.plan.record_losses(stats.order, stats.losses)
        if self.seconds is not None:
            replanned = settle_seconds(
                self.seconds,
                epoch,
                stats,
                (before, self.parts),
                self.plan,
                self.state.progress,
                self.cfg.batch_size,
            )
            if replanned:
                self.watched = self._watched()

    def validate(
        self, epoch: int, events: list[dict], stats: EpochStats, positions: torch.Tensor, epoch_start: float
    ) -> dict:
        """Validation (the whole split or the monitoring sample), the epoch's bookkeeping and
        its metrics, with what the run's probes measure."""
        state, data, cfg, meter = self.state, self.data, self.cfg, self.meter
        scored = with_tta(self.forward if state.average is None else state.average.model, cfg.tta)
        with timing.timed(self.parts, "val"):
            whole = (
                epoch in self.watched
                or bool(events)
                or any(probe.whole_validation for probe in self.probes)
                or (meter is not None and meter.exhausted)
            )
            n_val = monitor.examples_to_read(cfg.monitor_share, stats.examples, len(data.val), whole)
            read = self.val_order[:n_val] if n_val < len(data.val) else None
            split = data.val if read is None else data.val.take(read)
            val = evaluate_split(scored, split, cfg.eval_batch_size, precision=state.precision)
            tiers = self.val_tiers if read is None or self.val_tiers is None else self.val_tiers[read]
            by_tier = tier_accuracies(val, tiers, "val")
        state.global_step += stats.steps
        state.cumulative_train_flops += self.flops["train"] * stats.examples
        params = count_parameters(state.model)
        state.trace.record_epoch(epoch, state.model.spec, params, self.flops)
        epoch_s = time.perf_counter() - epoch_start
        state.cumulative_s += epoch_s
        metrics = {
            "train/loss": stats.loss,
            "train/acc": stats.acc,
            "val/loss": val.loss,
            "val/acc": val.acc,
            # a network that predicts one class for everything has died (pipeline/training/health.py)
            "val/top_class_share": health.top_share(val.predictions),
            "val/examples": len(split),
            **by_tier,
            "train/lr": stats.lr,
            "train/examples": stats.examples,
            "time/train_s": stats.seconds,
            "time/epoch_s": epoch_s,
            "time/cumulative_s": state.cumulative_s,
            "throughput/samples_per_s": stats.examples / max(stats.seconds, 1e-9),
            "model/params": params,
            "model/flops_per_example": self.flops["forward"],
            "train/flops_cumulative": state.cumulative_train_flops,
            **self.plan.epoch_info(epoch),
        }
        if self.seconds is not None:  # as planned after this epoch (re-planning)
            metrics["budget/planned_epochs"] = state.progress.epochs
            # where the rate stood at the epoch's last step: the clock pulls it past the plan
            metrics["budget/schedule_progress"] = self.last_step_progress
        with timing.timed(self.parts, "probe"):  # measured outside the seconds that train
            for probe in self.probes:
                metrics.update(probe.measure(state, scored, val, positions))
        return metrics


@dataclass
class _Network:
    """What ``_EpochLoop.grow`` replaces: the model with its optimizer, weight average, slow
    weights, FLOPs and forward pass, how many growth events the trace held and the plan's state."""

    model: SpecNet
    optimizer: torch.optim.Optimizer
    average: WeightAverage | None
    lookahead: Lookahead | None
    flops: dict
    forward: nn.Module
    events: int
    plan_state: dict

    @classmethod
    def of(cls, loop: _EpochLoop) -> _Network:
        state = loop.state
        events = len(state.trace.events)
        return cls(
            state.model,
            state.optimizer,
            state.average,
            state.lookahead,
            loop.flops,
            loop.forward,
            events,
            loop.plan.state_dict(),
        )

    def restore(self, loop: _EpochLoop) -> None:
        state = loop.state
        state.model, state.optimizer, state.average = self.model, self.optimizer, self.average
        state.lookahead = self.lookahead
        loop.flops, loop.forward = self.flops, self.forward
        del state.trace.events[self.events :]
        loop.plan.load_state_dict(self.plan_state)


def _compiled(model: SpecNet, cfg: TrainConfig) -> nn.Module:
    """What ``fit`` calls for forward passes: ``model`` itself, or with ``--compile`` a compiled
    wrapper that shares its parameters (so checkpoints and growth see the plain module)."""
    return torch.compile(model, mode=cfg.compile_mode) if cfg.compile else model

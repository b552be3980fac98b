"""What a finished training run logs about how it ended: its health verdict (and growth's dips)
and, for a run with a budget, what it was given, what it used and why it stopped."""

from __future__ import annotations

import click
import mlflow

from pipeline.budget import timing
from pipeline.data.dataset import Data
from pipeline.run.length import RunLength
from pipeline.training import health
from pipeline.training.config import TrainConfig
from pipeline.training.state import FitState


def log_health(state: FitState, data: Data, cfg: TrainConfig) -> health.Health:
    """The run's health verdict (tags ``health``, ``health_detail``; ``health/...`` metrics),
    each growth event's dip (``growth/dip`` at the event's epoch) and why it stopped (tag
    ``stop_reason``). A collapsed run says so in one line: it ends FINISHED, as a result.
    Returns the verdict."""
    verdict = health.judge(state, data.val.y, cfg.dip_margin)
    mlflow.set_tags({**verdict.tags(), "stop_reason": state.stop_reason or "epochs"})
    mlflow.log_metrics(verdict.metrics())
    for epoch, dip in verdict.growth_dips.items():
        mlflow.log_metric("growth/dip", dip, step=epoch)
    if verdict.verdict == "collapsed":
        ended = "stopped early" if state.stop_reason == "collapsed" else "ended"
        click.echo(f"health: this run {ended} collapsed ({verdict.describe()})", err=True)
    return verdict


def log_budget(length: RunLength, state: FitState) -> None:
    """What the run was given, what it used, and why it stopped (tag ``stop_reason``)."""
    budget = length.budget
    used = {
        "epochs": float(state.epoch),
        "flops": state.cumulative_train_flops,
        "seconds": timing.trained_s(state.time_parts),
    }[budget.unit]
    mlflow.log_metrics(
        {"budget/total": budget.amount, "budget/used": used, "budget/used_fraction": used / budget.amount}
    )
    mlflow.set_tags({"budget_unit": budget.unit, "stop_reason": state.stop_reason or "epochs"})

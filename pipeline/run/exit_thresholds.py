"""A trained run's early-exit thresholds: given or calibrated on the validation split, and what
adaptive inference then gets there, logged to the active MLflow run. The rules themselves are
pure: the options and calibration rules in ``pipeline/exits.py``, calibration and simulation on
cached logits in ``pipeline/exit_calibration.py``; this is the training run's step that applies
them.
"""

from __future__ import annotations

import json

import click
import mlflow
import torch

from models.flops import flops_per_example
from pipeline import exit_calibration, exits
from pipeline.data.tiers import TIER_NAMES
from pipeline.exits import ExitConfig


def set_exit_thresholds(
    model, val, exit_cfg: ExitConfig, batch_size: int, val_tiers: torch.Tensor | None
) -> None:
    """Give ``model`` its exit confidence measure and thresholds (``--exit-threshold``, or
    calibrated on ``val`` for ``--exit-acc-loss``) and log what adaptive inference gets on the
    validation split: ``val/acc_adaptive``, ``val/flops_adaptive``, ``val/exit_share_<exit>``
    and per tier (with each tier's loss bound). A tier-aware ``--exit-calibration`` on a run
    without difficulty tiers falls back to ``bound`` and says so (tag ``exit_calibration``: the
    rule used)."""
    logits = exit_calibration.all_exit_logits(model, val.x, batch_size)  # (K+1, N, classes)
    y = val.y.cpu()
    given = exit_cfg.thresholds_for(model.spec)
    measure = model.exit_confidence = exit_cfg.exit_confidence
    used = exit_cfg.exit_calibration  # the calibration rule, after any fallback
    if given is None and exits.calibration_rule(used).needs_tiers and val_tiers is None:
        used = exits.FALLBACK_CALIBRATION
        click.echo(
            f"exits: --exit-calibration {exit_cfg.exit_calibration} needs the validation split's "
            "difficulty tiers and this run has no difficulty scores (a score_difficulty run, "
            f"--scores-run), so its thresholds are calibrated with {used}",
            err=True,
        )
    model.exit_thresholds = (
        given
        if given is not None
        else exit_calibration.calibrate(
            logits, y, exit_cfg.exit_acc_loss, measure, rule=used, tiers=val_tiers
        )
    )
    flops = exit_calibration.exit_flops(model)
    predictions, taken = exit_calibration.simulate(logits, model.exit_thresholds, measure)
    metrics = exit_calibration.exit_summary(predictions, taken, y, flops, model.spec, "val/")
    # the loss at the thresholds, measured and as its upper bound, in points
    right_head, right = logits[-1].argmax(1) == y, predictions == y
    for rule, name in (("point", "val/exit_acc_loss"), ("bound", "val/exit_acc_loss_bound")):
        metrics[name] = exits.acc_loss(right_head, right, rule)
    metrics["val/flops_full"] = float(flops_per_example(model, model.spec.input_shape)["forward"])
    if val_tiers is not None:
        for t, name in enumerate(TIER_NAMES):
            mask = val_tiers.cpu() == t
            if mask.any():
                metrics.update(
                    exit_calibration.exit_summary(
                        predictions[mask], taken[mask], y[mask], flops, model.spec, "val/", f"_{name}"
                    )
                )
                metrics[f"val/exit_acc_loss_bound_{name}"] = exits.acc_loss(
                    right_head[mask], right[mask], "bound"
                )
    mlflow.log_metrics(metrics)
    mlflow.set_tag("exit_thresholds", json.dumps(list(model.exit_thresholds)))
    mlflow.set_tag("exit_thresholds_source", "given" if given is not None else "calibrated")
    if given is None:
        mlflow.set_tag("exit_calibration", used)
        if used != exit_cfg.exit_calibration:
            mlflow.set_tag("exit_calibration_fallback", f"{exit_cfg.exit_calibration}: no difficulty tiers")
        if all(t >= 1.0 for t in model.exit_thresholds):
            click.echo(
                f"exits: no threshold keeps --exit-calibration {used} within "
                f"--exit-acc-loss {exit_cfg.exit_acc_loss:g} on {len(y)} examples, so no example "
                "leaves early (a larger validation split, a larger budget or --exit-calibration "
                "point lets some out)",
                err=True,
            )
    mlflow.set_tag("exit_confidence", measure)

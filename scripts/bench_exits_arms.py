"""scripts/bench_exits.py's arms: training one, reading back what evaluate logged on it, and
re-choosing its exit thresholds from the validation split (the threshold choices compared);
the issue's targets, which the summary checks."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import mlflow
import numpy as np
import torch

from models.flops import flops_per_example
from models.io import load_model
from pipeline import exits, train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.tiers import TIER_NAMES
from pipeline.exits import ExitConfig
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig

ARMS = ("dynamic+exits", "dynamic", "static+exits", "static")
EXPERIMENT = "bench_exits"
# The targets.
MAX_FLOPS_RATIO = 0.5
MAX_ACC_LOSS_POINTS = 0.2
MIN_LATENCY_RATIO = 1.5
MIN_EASY_FIRST_EXIT = 0.8
MAX_HARD_FIRST_EXIT = 0.5  # "the hard tier mostly runs deep"
# Issue 14's calibration grid (one shared threshold, 0.7 -> 0.8 -> 0.9, finer only above 0.9),
# kept to compare against on the same trained models.
COARSE_CANDIDATES = np.unique(
    np.concatenate([np.linspace(0.0, 0.9, 10), 1 - np.geomspace(0.1, 1e-5, 41), [1.0]])
)
# Threshold choices to compare: (confidence measure, candidate grid, per-exit search, accuracy
# points allowed to be lost on validation (None: --exit-acc-loss's default), how the loss is
# read (--exit-calibration)). The "-loss0" variants are the user's other choice of budget
# (--exit-acc-loss 0), not a tuning on test; the "-bound" ones hold the loss's 95% upper
# confidence bound, not its point, within the budget (a bound at budget 0 never exits).
POINT_TIERS = exits.CalibrationRule("point-tiers", exits.point_loss, per_tier=True)
HARD_DEEP = exits.CalibrationRule("bound-hard-deep", exits.upper_bound_loss, hard_deep=MAX_HARD_FIRST_EXIT)
CALIBRATIONS = {
    "maxprob-coarse": ("maxprob", COARSE_CANDIDATES, False, None, "point"),
    "maxprob-fine": ("maxprob", exits.CANDIDATES, True, None, "point"),
    "entropy-coarse": ("entropy", COARSE_CANDIDATES, False, None, "point"),
    "entropy-fine": ("entropy", exits.CANDIDATES, True, None, "point"),
    "maxprob-fine-loss0": ("maxprob", exits.CANDIDATES, True, 0.0, "point"),
    "entropy-fine-loss0": ("entropy", exits.CANDIDATES, True, 0.0, "point"),
    "maxprob-fine-bound": ("maxprob", exits.CANDIDATES, True, None, "bound"),
    "entropy-fine-bound": ("entropy", exits.CANDIDATES, True, None, "bound"),
    # tier-aware (issue 14d): the bound on each validation tier too (--exit-calibration tiers);
    # the point on each tier; the bound plus at least half the hard tier past the first exit
    "maxprob-fine-tiers": ("maxprob", exits.CANDIDATES, True, None, "tiers"),
    "maxprob-fine-ptiers": ("maxprob", exits.CANDIDATES, True, None, POINT_TIERS),
    "maxprob-fine-harddeep": ("maxprob", exits.CANDIDATES, True, None, HARD_DEEP),
}


def train_arm(arm: str, seed: int, epochs: int, data_cfg: DataConfig, scores_run: str) -> str:
    """Train one arm for one seed; its run id."""
    train = TrainConfig(epochs=epochs, seed=seed)
    quiet = RunConfig(progress=False, experiment_name=EXPERIMENT)
    exit_cfg = ExitConfig(exits="stages" if arm.endswith("+exits") else "none")
    if arm.startswith("dynamic"):
        curriculum = DynamicCurriculumConfig(scores_run=scores_run)
        train_dynamic.run(data_cfg, train, GrowthConfig(), curriculum, quiet, exit_cfg)
    else:
        curriculum = CurriculumConfig(scores_run=scores_run)
        train_static.run(data_cfg, train, train_static.StaticConfig(), curriculum, quiet, exit_cfg)
    return mlflow.last_active_run().info.run_id


def arm_figures(run_id: str) -> dict:
    """What evaluate and training logged on a run that the benchmark reports."""
    metrics = mlflow.MlflowClient().get_run(run_id).data.metrics
    keep = ("test/", "val/acc", "final/", "time/total_s", "train/flops_cumulative")
    return {k: v for k, v in sorted(metrics.items()) if k.startswith(keep)}


def recalibrate(run_id: str, variant: str, data, val_tiers, acc_loss: float) -> dict:
    """The thresholds ``variant`` chooses for a trained run, from its weights and the validation
    split only, with what they get there (overall and per tier)."""
    measure, candidates, per_exit, loss, rule = CALIBRATIONS[variant]
    acc_loss = acc_loss if loss is None else loss
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.MlflowClient().download_artifacts(run_id, "model/model.safetensors", tmp)
        model = load_model(path)
    logits = exits.all_exit_logits(model, data.val.x)  # (K+1, N, classes)
    y = data.val.y
    thresholds = exits.calibrate(logits, y, acc_loss, measure, candidates, per_exit, rule, val_tiers)
    predictions, taken = exits.simulate(logits, thresholds, measure)
    right_head, right = logits[-1].argmax(1) == y, predictions == y
    val = {
        "acc_head": float(right_head.float().mean()),
        "acc_adaptive": float(right.float().mean()),
        "acc_loss_bound_points": exits.acc_loss(right_head, right, "bound"),
        "discordant_b_c_n": list(exits.discordant(right_head, right)),
        "exit1_share": float((taken == 0).float().mean()),
    }
    flops = torch.tensor(exits.exit_flops(model), dtype=torch.float64)
    full = float(flops_per_example(model, model.spec.input_shape)["forward"])
    val["flops_ratio"] = float(flops[taken].mean()) / full
    out = {
        "confidence": measure,
        "calibration": exits.calibration_rule(rule).name,
        "acc_loss_points_allowed": acc_loss,
        "thresholds": list(thresholds),
        "saved_thresholds": list(model.exit_thresholds or []),
        "val": val,
    }
    if val_tiers is not None:
        hard = val_tiers == TIER_NAMES.index("hard")
        for t, tier in enumerate(TIER_NAMES):
            val[f"exit1_share_{tier}"] = float((taken[val_tiers == t] == 0).float().mean())
            in_tier = val_tiers == t
            val[f"acc_loss_points_{tier}"] = exits.acc_loss(right_head[in_tier], right[in_tier], "point")
        # Not a calibration (the tier is unknown at inference): what keeping most of the hard
        # tier deep would cost, at the lowest shared threshold of the grid that does it.
        for t in sorted(float(c) for c in candidates):
            p, where = exits.simulate(logits, [t] * (len(logits) - 1), measure)
            if float((where[hard] == 0).float().mean()) < MAX_HARD_FIRST_EXIT:
                out["hard_mostly_deep"] = {
                    "threshold": t,
                    "acc_loss_points": 100 * (val["acc_head"] - float((p == y).float().mean())),
                    "flops_ratio": float(flops[where].mean()) / full,
                }
                break
    return out


def exit_curve(run_id: str) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path="evaluation/exit_curve.json", dst_path=tmp
            )
        except (mlflow.exceptions.MlflowException, OSError):
            return None
        return json.loads(Path(path).read_text())

"""The metrics a report compares: each one's title, how it prints, and which way is better."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.data.tiers import TIER_NAMES

TIME_TO_TARGET = "time/to_target_s"  # computed by the report from history.csv, not logged by training
TIERS = {"test/acc": "all", **{f"test/acc_{tier}": tier for tier in TIER_NAMES}}


@dataclass(frozen=True)
class MetricInfo:
    title: str
    kind: str  # how to print it: acc, seconds, flops, ms, plain
    higher_is_better: bool


METRICS: dict[str, MetricInfo] = {
    "test/acc": MetricInfo("test accuracy (all)", "acc", True),
    **{f"test/acc_{tier}": MetricInfo(f"test accuracy ({tier})", "acc", True) for tier in TIER_NAMES},
    "test/loss": MetricInfo("test loss", "plain", False),
    "val/acc": MetricInfo("final validation accuracy", "acc", True),
    "time/total_s": MetricInfo("wall-clock", "seconds", False),
    # The seconds of the training step, growth and the diet (pipeline/budget/timing.py): what an
    # equal-seconds budget gives both arms; validation and logging are left out.
    "time/trained_s": MetricInfo("seconds that trained", "seconds", False),
    "time/trained_share": MetricInfo("share of the seconds that trained", "acc", True),
    TIME_TO_TARGET: MetricInfo("time to target validation accuracy", "seconds", False),
    "train/flops_cumulative": MetricInfo("training FLOPs", "flops", False),
    "test/infer_ms_per_example": MetricInfo("inference time per example", "ms", False),
    # Under --label-noise, at the last epoch: flipped training examples the network gets right
    # (their original label) and those it has memorised (the wrong label it was taught).
    "noise/train_acc_flipped_original": MetricInfo(
        "flipped training labels: original predicted", "acc", True
    ),
    "noise/train_acc_flipped_noisy": MetricInfo("flipped training labels: memorised", "acc", False),
}
NOISE_METRICS = ("noise/train_acc_flipped_original", "noise/train_acc_flipped_noisy")
COST_METRICS = (
    "time/total_s",
    "time/trained_s",
    TIME_TO_TARGET,
    "train/flops_cumulative",
    "test/infer_ms_per_example",
)


def fmt(kind: str, value: float, diff: bool = False) -> str:
    """``value`` printed as a metric of ``kind`` (``MetricInfo.kind``); ``diff`` signs it, as a difference."""
    if value is None or not np.isfinite(value):
        return "n/a"
    sign = "+" if diff else ""
    if kind == "acc":
        return f"{value * 100:{sign}.2f}" + (" pp" if diff else "%")
    if kind == "seconds":
        return f"{value:{sign}.1f} s"
    if kind == "ms":
        return f"{value:{sign}.3f} ms"
    if kind == "flops":
        return f"{value:{sign}.3g}"
    return f"{value:{sign}.4g}"

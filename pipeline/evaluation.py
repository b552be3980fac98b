"""One model on one test split, what ``evaluate`` measures for each run: loss and accuracy
overall and per difficulty tier, per class and the confusion matrix; adaptive inference through
early exits; and latency per example. No MLflow."""

from __future__ import annotations

import functools
import time

import numpy as np
import pandas as pd
import torch
from torch import nn

from models.builder import SpecNet
from models.flops import flops_per_example
from pipeline import exit_calibration
from pipeline.data.dataset import Split
from pipeline.data.tiers import TIER_NAMES
from pipeline.device import synchronize
from pipeline.precision import autocast
from pipeline.training.loop import evaluate_split

TIMING_REPEATS = 3
# Latency is timed on at most this many examples per measurement (two batches of 512), spread
# over the split: three repeats for the split and each tier were six passes over a 10,000-example
# test split, 80% of evaluate's time; now they are about one.
TIMED_EXAMPLES = 1024
# Batch-1 latency is timed on this many test examples per measurement (spread over the split):
# enough for a stable median, few enough that four measurements per tier take seconds.
BATCH1_EXAMPLES = 1000


@torch.no_grad()
def inference_ms_per_example(
    model: nn.Module, x: torch.Tensor, batch_size: int, precision: str = "fp32", adaptive: bool = False
) -> float:
    """Median over repeats of the eval-mode time per example, in milliseconds, on up to
    ``TIMED_EXAMPLES`` of ``x``: the plain forward under the autocast of ``precision``
    (resolved), or adaptive inference through the exits."""
    if len(x) == 0:
        return float("nan")
    x = _spread(x, TIMED_EXAMPLES)
    model.eval()
    run = model.adaptive if adaptive else model
    with autocast(precision, x.device):
        run(x[:batch_size])  # warm-up
    times = []
    for _ in range(TIMING_REPEATS):
        start = time.perf_counter()
        with autocast(precision, x.device):
            for b in range(0, len(x), batch_size):
                run(x[b : b + batch_size])
        synchronize(x.device)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times)) / len(x)


def compute_test_metrics(
    model: nn.Module,
    test: Split,
    tiers: torch.Tensor | None,
    classes: list[str],
    batch_size: int,
    precision: str = "fp32",
) -> tuple[dict[str, float], pd.DataFrame, pd.DataFrame]:
    """Test metrics overall and per tier, per-class accuracy and the confusion matrix, with
    forward passes under the autocast of ``precision`` (resolved); ``model`` is the network as
    the run reads it (``models.tta.with_tta``), timed so too."""
    result = evaluate_split(model, test, batch_size, precision=precision)
    y = test.y.cpu()
    metrics = {
        "test/loss": result.loss,
        "test/acc": result.acc,
        "test/infer_ms_per_example": inference_ms_per_example(model, test.x, batch_size, precision),
    }
    if tiers is not None:
        for t, name in enumerate(TIER_NAMES):
            mask = tiers == t
            if mask.any():
                metrics[f"test/acc_{name}"] = float(result.correct[mask].float().mean())
                metrics[f"test/loss_{name}"] = float(result.per_example_loss[mask].mean())
                metrics[f"test/infer_ms_{name}"] = inference_ms_per_example(
                    model, test.x[mask.to(test.x.device)], batch_size, precision
                )
    n = len(classes)
    confusion = torch.zeros(n, n, dtype=torch.long)
    confusion.index_put_((y, result.predictions), torch.ones_like(y), accumulate=True)
    per_class = pd.DataFrame(
        {
            "class": classes,
            "examples": confusion.sum(1).numpy(),
            "accuracy": (confusion.diag().double() / confusion.sum(1).clamp_min(1)).numpy(),
        }
    )
    confusion_df = pd.DataFrame(confusion.numpy(), index=classes, columns=classes)
    confusion_df.index.name = "true \\ predicted"
    return metrics, per_class, confusion_df


def _spread(x: torch.Tensor, n: int) -> torch.Tensor:
    """Up to ``n`` examples of ``x`` taken evenly across it (the split is not sorted by class)."""
    step = max(1, len(x) // n)
    return x[::step][:n]


def adaptive_test_metrics(
    model: SpecNet, thresholds: tuple[float, ...], test: Split, tiers: torch.Tensor | None, batch_size: int
) -> tuple[dict[str, float], dict]:
    """Adaptive inference at ``thresholds`` (on ``model.exit_confidence``) on the test split,
    overall and per tier: the share leaving at each exit, accuracy, mean FLOPs per example, and
    measured latency per example at batch 1 (``infer_ms_b1``) and batched (``infer_ms``), with
    exits (``_adaptive``) and without. Also the accuracy-against-FLOPs curve over shared
    thresholds, and the calibrated point on it. Always fp32: exits compare confidences, which
    autocast would shift."""
    model.exit_thresholds = thresholds
    measure = model.exit_confidence
    logits = exit_calibration.all_exit_logits(model, test.x, batch_size)  # (K+1, N, classes)
    y = test.y.cpu()
    flops = exit_calibration.exit_flops(model)
    predictions, taken = exit_calibration.simulate(logits, thresholds, measure)
    with torch.no_grad():
        _, adaptive_taken = model.adaptive(test.x[:batch_size])  # the real path
    if not torch.equal(adaptive_taken.cpu(), taken[:batch_size]):
        raise RuntimeError("adaptive inference and its simulation disagree on where examples leave")
    metrics = exit_calibration.exit_summary(predictions, taken, y, flops, model.spec, "test/")
    metrics["test/flops_full"] = float(flops_per_example(model, model.spec.input_shape)["forward"])
    metrics["test/flops_ratio"] = metrics["test/flops_adaptive"] / metrics["test/flops_full"]
    for k, eid in enumerate(model.spec.exit_ids()):
        metrics[f"test/acc_{eid}"] = float((logits[k].argmax(1) == y).float().mean())
    timed = {"": test.x}
    if tiers is not None:
        for t, name in enumerate(TIER_NAMES):
            mask = tiers == t
            if mask.any():
                timed[f"_{name}"] = test.x[mask.to(test.x.device)]
                metrics.update(
                    exit_calibration.exit_summary(
                        predictions[mask], taken[mask], y[mask], flops, model.spec, "test/", f"_{name}"
                    )
                )
    for suffix, x in timed.items():
        sample = _spread(x, BATCH1_EXAMPLES)
        # Adaptive inference runs fp32: its thresholds were calibrated there.
        timing = functools.partial(inference_ms_per_example, model)
        metrics[f"test/infer_ms_b1{suffix}"] = timing(sample, 1)
        metrics[f"test/infer_ms_b1_adaptive{suffix}"] = timing(sample, 1, adaptive=True)
        metrics[f"test/infer_ms_adaptive{suffix}"] = timing(x, batch_size, adaptive=True)
    metrics["test/latency_ratio_b1"] = metrics["test/infer_ms_b1"] / metrics["test/infer_ms_b1_adaptive"]
    curve = {
        "exits": model.spec.exit_ids(),
        "exit_flops": flops,
        "flops_full": metrics["test/flops_full"],
        "acc_full": float((logits[-1].argmax(1) == y).float().mean()),
        "thresholds": list(thresholds),
        "confidence": measure,
        "acc_adaptive": metrics["test/acc_adaptive"],
        "flops_adaptive": metrics["test/flops_adaptive"],
        "curve": exit_calibration.curve(logits, y, flops, measure),
    }
    return metrics, curve

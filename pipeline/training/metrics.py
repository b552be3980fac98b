"""Per-epoch measurements beside loss and accuracy: accuracy per difficulty tier, per early exit,
and how much of the label noise the network has learned."""

from __future__ import annotations

import torch
from torch import nn

from models.builder import SpecNet
from pipeline.data.dataset import Data, Split
from pipeline.data.tiers import TIER_NAMES
from pipeline.exit_calibration import all_exit_logits
from pipeline.training.config import TrainConfig
from pipeline.training.loop import EvalResult, evaluate_split


def tier_accuracies(result: EvalResult, tiers: torch.Tensor | None, prefix: str) -> dict[str, float]:
    """Accuracy per difficulty tier (0 easy, 1 medium, 2 hard) of an evaluation."""
    if tiers is None:
        return {}
    out = {}
    for t, name in enumerate(TIER_NAMES):
        mask = tiers == t
        if mask.any():
            out[f"{prefix}/acc_{name}"] = float(result.correct[mask].float().mean())
    return out


def exit_accuracies(model: SpecNet, val: Split, batch_size: int) -> dict[str, float]:
    """``val/acc_<exit id>``: each early exit's accuracy on its own."""
    logits = all_exit_logits(model, val.x, batch_size)  # (K+1, N, classes)
    y = val.y.cpu()
    return {
        f"val/acc_{eid}": float((logits[k].argmax(1) == y).float().mean())
        for k, eid in enumerate(model.spec.exit_ids())
    }


# Examples of each kind (flipped, clean) the memorisation probe evaluates per epoch: enough for
# a standard error under 0.8 points, few enough to cost a fraction of an epoch.
NOISE_PROBE_SIZE = 4000


def noise_probe_positions(train: Split, size: int = NOISE_PROBE_SIZE) -> torch.Tensor:
    """Fixed training positions (P,): up to ``size`` flipped and ``size`` clean examples, the
    same every epoch and on resume (a generator of their own, not the run's)."""
    generator = torch.Generator().manual_seed(0)
    flipped = train.flipped.cpu()
    picks = []
    for mask in (flipped, ~flipped):
        members = torch.nonzero(mask).flatten()
        picks.append(members[torch.randperm(len(members), generator=generator)[:size]])
    return torch.cat(picks).sort().values


def noise_metrics(
    model: nn.Module,
    data: Data,
    positions: torch.Tensor,
    val: EvalResult,
    probe: torch.Tensor,
    cfg: TrainConfig,
    precision: str,
) -> dict[str, float]:
    """How much of the label noise the network has learned (memorisation) and met.

    On the probe's training examples: accuracy on the clean ones, and on the flipped ones
    against their original label (what it should say) and against the noisy label it was
    taught (what memorising says). ``trained_flipped_share``: flipped examples among those
    the epoch trained (a curriculum that holds noisy examples back keeps it below the rate).
    ``val_acc_original``: validation accuracy against the original labels."""
    train = data.train
    sample = train.take(probe)
    pred = evaluate_split(model, sample, cfg.eval_batch_size, precision=precision).predictions
    y, clean, flipped = sample.y.cpu(), sample.y_clean.cpu(), sample.flipped.cpu()
    out = {"noise/trained_flipped_share": float(train.flipped.cpu()[positions.cpu()].float().mean())}
    if (~flipped).any():
        out["noise/train_acc_clean"] = float((pred[~flipped] == y[~flipped]).float().mean())
    if flipped.any():
        out["noise/train_acc_flipped_original"] = float((pred[flipped] == clean[flipped]).float().mean())
        out["noise/train_acc_flipped_noisy"] = float((pred[flipped] == y[flipped]).float().mean())
    if data.val.y_clean is not None:
        out["noise/val_acc_original"] = float((val.predictions == data.val.y_clean.cpu()).float().mean())
    return out

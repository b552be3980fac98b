"""How stable the scores are: Spearman rank correlations between fold models, repeats and
scorers."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import spearmanr

from pipeline.difficulty.folds import CrossFitLedger


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two (N,) score vectors; NaN when either is constant."""
    if len(a) < 2 or float(a.std()) == 0 or float(b.std()) == 0:
        return math.nan
    return float(spearmanr(a.numpy(), b.numpy()).statistic)


def mean_pairwise_spearman(rows: torch.Tensor) -> float:
    """Mean Spearman correlation over all pairs of rows of (R, N); NaN for fewer than 2 rows."""
    values = [spearman(rows[i], rows[j]) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    return float(np.mean(values)) if values else math.nan


def stability_metrics(
    train_scores: dict[str, torch.Tensor], ledger: CrossFitLedger | None, repeats: int
) -> dict[str, float]:
    """Spearman rank correlations: fold models on the validation split, repeats on the
    training split (out-of-fold), and scorers against each other on the training split."""
    out = {}
    if ledger is not None:
        for scorer in ledger.scorers:
            out[f"stability/spearman_{scorer}_folds"] = mean_pairwise_spearman(
                ledger.per_model("val", scorer)
            )
            if repeats > 1:
                out[f"stability/spearman_{scorer}_repeats"] = mean_pairwise_spearman(
                    ledger.per_repeat("train", scorer)
                )
    names = list(train_scores)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            out[f"stability/spearman_{a}_vs_{b}"] = spearman(train_scores[a], train_scores[b])
    return out

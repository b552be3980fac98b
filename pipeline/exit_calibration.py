"""Measuring a network's exits, on cached logits: every exit's logits at once, adaptive inference
simulated from them, thresholds calibrated under a rule of ``exits.py`` (``--exit-calibration``),
the accuracy-against-FLOPs curve and the summary metrics. No MLflow."""

from __future__ import annotations

import numpy as np
import torch

from models.builder import SpecNet
from models.confidence import DEFAULT as DEFAULT_CONFIDENCE
from models.confidence import confidence
from models.flops import exit_flops_per_example
from models.spec import HEAD_ID, ArchSpec
from pipeline.device import eval_batch_size
from pipeline.exits import (
    DEFAULT_CALIBRATION,
    HARD_TIER,
    CalibrationRule,
    ExitError,
    calibration_rule,
    discordant,
)

# Candidate thresholds for calibration: every 0.01, then finer toward 1 (1 - 10^-2 .. 1 - 10^-6),
# where a confident network's accurate thresholds lie. A calibration searches them on cached
# logits, so a fine grid costs milliseconds.
CANDIDATES = np.unique(
    np.round(np.concatenate([np.linspace(0.0, 1.0, 101), 1 - np.geomspace(0.01, 1e-6, 41)]), 12)
)


@torch.no_grad()
def all_exit_logits(model: SpecNet, x: torch.Tensor, batch_size: int = 0) -> torch.Tensor:
    """(K+1, N, classes): every exit's logits and the head's, on the CPU (batch 0: the device's)."""
    model.eval()
    batch_size = eval_batch_size(batch_size, x.device)
    parts = [
        torch.stack([o.float() for o in model(x[b : b + batch_size], exits=True)]).cpu()
        for b in range(0, len(x), batch_size)
    ]
    return torch.cat(parts, dim=1)


def simulate(
    logits: torch.Tensor, thresholds, measure: str = DEFAULT_CONFIDENCE
) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``SpecNet.adaptive`` predicts and where each example leaves, from all exits' logits
    (K+1, N, classes) at once: the same rule, without rerunning the network per threshold."""
    taken = _taken(confidence(logits[:-1], measure), thresholds)
    predictions = logits.argmax(2).gather(0, taken.view(1, -1)).flatten()
    return predictions, taken


def _taken(conf: torch.Tensor, thresholds) -> torch.Tensor:
    """(N,) the exit each example leaves at, from the exits' confidences (K, N); K: the head."""
    k_exits, n = conf.shape
    taken = torch.full((n,), k_exits, dtype=torch.long)
    for k in reversed(range(k_exits)):  # the first exit that passes wins
        taken[conf[k] > thresholds[k]] = k
    return taken


def calibrate(
    logits: torch.Tensor,
    y: torch.Tensor,
    acc_loss_points: float,
    measure: str = DEFAULT_CONFIDENCE,
    candidates=CANDIDATES,
    per_exit: bool = True,
    rule: str | CalibrationRule = DEFAULT_CALIBRATION,
    tiers: torch.Tensor | None = None,
) -> tuple[float, ...]:
    """Thresholds at which adaptive inference loses at most ``acc_loss_points`` against the head,
    as ``rule`` reads the loss (``bound``: its upper confidence bound; ``point``: as measured) on
    the split ``logits`` (K+1, N, classes) come from, and on each of its tiers ``tiers`` (N,), 0
    easy to 2 hard, under a per-tier rule (``tiers``).

    First the lowest shared threshold whose loss, and that of every higher candidate, keeps the
    rule. Then (``per_exit``, K > 1) each exit in depth order lowers its own threshold down the
    candidates while the rule still holds, in passes until none moves: lowering a threshold only
    sends examples out earlier, so FLOPs never rise above the shared choice's. Where even the
    highest candidate fails (a bound wider than the budget), every threshold is 1.0: never exit,
    which is the head itself."""
    rule = calibration_rule(rule)
    tiers = tiers.cpu() if tiers is not None else None
    if rule.needs_tiers and tiers is None:
        raise ExitError(
            f"--exit-calibration {rule.name} needs the validation split's difficulty tiers "
            "(a score_difficulty run, --scores-run)"
        )
    k_exits = logits.shape[0] - 1
    conf = confidence(logits[:-1], measure)  # (K, N)
    correct = logits.argmax(2) == y.view(1, -1)  # (K+1, N)
    descending = sorted((float(t) for t in candidates), reverse=True)
    # where the loss must hold: the whole split, and each (non-empty) tier for a per-tier rule
    groups = [torch.ones_like(y, dtype=torch.bool)]
    if rule.per_tier:
        groups += [tiers == t for t in torch.unique(tiers).tolist()]
    hard = tiers == HARD_TIER if rule.hard_deep > 0 and bool((tiers == HARD_TIER).any()) else None

    def keeps_rule(thresholds: list[float]) -> bool:
        taken = _taken(conf, thresholds)
        right = correct.gather(0, taken.view(1, -1)).flatten()
        if hard is not None and float((taken[hard] > 0).double().mean()) < rule.hard_deep:
            return False
        return all(rule.loss(*discordant(correct[-1][g], right[g])) <= acc_loss_points + 1e-9 for g in groups)

    shared = 1.0  # never leave: the head itself
    for t in descending:
        if not keeps_rule([t] * k_exits):
            break
        shared = t
    thresholds = [shared] * k_exits
    moved = per_exit and k_exits > 1
    while moved:
        moved = False
        for k in range(k_exits):
            for t in (c for c in descending if c < thresholds[k]):
                if not keeps_rule([*thresholds[:k], t, *thresholds[k + 1 :]]):
                    break
                thresholds[k], moved = t, True
    return tuple(thresholds)


def curve(
    logits: torch.Tensor, y: torch.Tensor, flops: list[int], measure: str = DEFAULT_CONFIDENCE
) -> list[dict]:
    """Accuracy and mean FLOPs per example over shared thresholds (the candidates)."""
    k_exits, out = logits.shape[0] - 1, []
    flops_t = torch.tensor(flops, dtype=torch.float64)
    for t in CANDIDATES:
        predictions, taken = simulate(logits, [float(t)] * k_exits, measure)
        out.append(
            {
                "threshold": float(t),
                "acc": float((predictions == y).float().mean()),
                "flops": float(flops_t[taken].mean()),
            }
        )
    return out


def exit_summary(
    predictions: torch.Tensor,
    taken: torch.Tensor,
    y: torch.Tensor,
    flops: list[int],
    spec: ArchSpec,
    prefix: str,
    suffix: str = "",
) -> dict[str, float]:
    """Accuracy, mean FLOPs per example and the share leaving at each exit, as metrics
    (``test/acc_adaptive``, ``test/exit_share_exit1_easy`` with suffix ``_easy``)."""
    names = [*spec.exit_ids(), HEAD_ID]
    out = {
        f"{prefix}acc_adaptive{suffix}": float((predictions == y).float().mean()),
        f"{prefix}flops_adaptive{suffix}": float(torch.tensor(flops, dtype=torch.float64)[taken].mean()),
    }
    for k, name in enumerate(names):
        out[f"{prefix}exit_share_{name}{suffix}"] = float((taken == k).float().mean())
    return out


@torch.no_grad()
def exit_flops(model: SpecNet) -> list[int]:
    return exit_flops_per_example(model, model.spec.input_shape)

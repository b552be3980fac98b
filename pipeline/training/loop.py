"""The inner loops: one training epoch and one evaluation pass, plain functions with no MLflow.

Batches are taken by index from tensors already in memory; no DataLoader, no per-example
transforms, so the step is what costs.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from models.errors import UserError
from pipeline.data.augment import augment_batch, mixup_batch
from pipeline.data.dataset import Split
from pipeline.device import eval_batch_size, synchronize
from pipeline.exits import deep_supervision_loss
from pipeline.precision import autocast

# How often the training loop looks for a non-finite loss. Reading the loss forces a device
# sync, so on a GPU it is batched; on a CPU it costs nothing either way.
DIVERGENCE_CHECK_EVERY = 25


class DivergenceError(UserError, RuntimeError):
    """The loss became NaN or infinite; names the epoch and step."""

    def __init__(self, epoch: int, step: int, value: float):
        self.epoch, self.step, self.value = epoch, step, value
        super().__init__(f"loss became {value} at epoch {epoch}, global step {step}; lower --lr")


@dataclass
class EpochStats:
    loss: float
    acc: float
    examples: int
    steps: int
    seconds: float
    lr: float
    # With ``example_losses=True``: the positions in the order they were trained (P,) and the
    # loss each had in its step (P,), both on the CPU.
    order: torch.Tensor | None = None
    losses: torch.Tensor | None = None


@dataclass(frozen=True)
class StepRecipe:
    """What every training step does, the same on every epoch of a run: its batch size, input
    augmentation (``augment_batch``), label smoothing and mixup (the training loss only, so
    also the losses pruning sees), the gradient clipping (``clip_grad`` > 0 clips the global
    norm before each step, on the device: no host synchronisation) and the autocast dtype
    (resolved: fp32, bf16, fp16; fp16 needs ``scaler``). ``seed`` is the run's: alternating
    flips pick each image's first side from it."""

    batch_size: int
    augment: str = "none"
    label_smoothing: float = 0.0
    mixup: float = 0.0  # its alpha; 0: none
    clip_grad: float = 0.0
    precision: str = "fp32"
    scaler: torch.amp.GradScaler | None = None
    seed: int = 0

    @classmethod
    def of(cls, cfg, precision: str = "fp32", scaler: torch.amp.GradScaler | None = None) -> StepRecipe:
        """A ``TrainConfig``'s recipe at its resolved ``precision``."""
        return cls(
            cfg.batch_size,
            cfg.augment,
            cfg.label_smoothing,
            cfg.mixup,
            cfg.clip_grad,
            precision,
            scaler,
            cfg.seed,
        )


@dataclass(frozen=True)
class EpochClock:
    """Where an epoch sits in its run: ``lr_at(progress)`` is the rate at a fraction of training,
    ``global_step`` the steps before this epoch (for error messages), and ``generator`` (CPU)
    draws the order and the augmentation, so that it is the same on any device."""

    lr_at: Callable[[float], float]
    epoch: int
    epochs: int
    global_step: int
    generator: torch.Generator

    @classmethod
    def single(cls, lr: float, seed: int = 0) -> EpochClock:
        """A run of one epoch at the constant rate ``lr``, its order drawn from ``seed``: a
        probe of the training loop (``pipeline/run/length.py`` times one at rate 0)."""
        return cls(lambda _progress: lr, 0, 1, 0, torch.Generator().manual_seed(seed))


@dataclass(frozen=True)
class LossTerms:
    """What an epoch's loss is made of beyond cross-entropy on the head. ``weights`` (N,) on the
    device, one per training position, scale each example's loss (loss-aware pruning);
    ``example_losses`` returns each example's loss from its step; ``exit_weights`` (one per
    early exit of a model with exits): deep supervision, each example's loss the head's plus
    the weighted exits' (what pruning then sees too)."""

    weights: torch.Tensor | None = None
    example_losses: bool = False
    exit_weights: tuple[float, ...] | None = None


def train_one_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: Split,
    positions: torch.Tensor,
    recipe: StepRecipe,
    clock: EpochClock,
    terms: LossTerms | None = None,
    *,
    allows: Callable[[int, int, Callable[[], float]], bool] | None = None,
    after_step: Callable[[float], None] | None = None,
    progress_bar: bool = False,
) -> EpochStats:
    """One pass over ``positions`` (indices into ``split``) in a random order.

    ``split`` should already be on the model's device. ``allows(done, next, clock)``, asked
    before each step with the examples trained so far, the next batch's size and a clock of the
    epoch's seconds (the host's: on CUDA ahead of the device), ends the epoch early when it says
    no. With mixup the epoch's accuracy counts the label with the larger share.
    ``after_step(share)`` runs after each optimizer step with the share of the planned epochs
    trained by then (a weight average's update, lookahead's sync).
    """
    batch_size, generator = recipe.batch_size, clock.generator
    epoch, epochs, lr_at = clock.epoch, clock.epochs, clock.lr_at
    scaler, terms = recipe.scaler, terms or LossTerms()
    model.train()
    device = split.x.device
    order = positions[torch.randperm(len(positions), generator=generator)].to(device)
    n_batches = math.ceil(len(order) / batch_size)
    losses = torch.zeros(n_batches, device=device)
    per_example = torch.zeros(len(order), device=device) if terms.example_losses else None
    correct = torch.zeros((), device=device, dtype=torch.long)
    start = time.perf_counter()
    bar = _progress(n_batches, epoch, epochs, progress_bar)
    lr = lr_at(epoch / epochs)
    trained = n_batches
    for b in bar:
        idx = order[b * batch_size : (b + 1) * batch_size]
        if allows is not None and not allows(b * batch_size, len(idx), lambda: time.perf_counter() - start):
            trained = b
            break
        x, y, y_partner, lam = _batch(split, idx, recipe, clock)
        lr = lr_at((epoch + b / n_batches) / epochs)
        for group in optimizer.param_groups:  # growth's new layers may train at a multiple
            group["lr"] = lr * group.get("lr_scale", 1.0)
        with autocast(recipe.precision, device):
            batch_weights = None if terms.weights is None else terms.weights[idx]
            logits, loss, each = _loss(
                model, x, y, y_partner, lam, batch_weights, recipe.label_smoothing, terms
            )
        batch_loss = loss.detach() * len(idx) if each is None else each.sum()
        if per_example is not None:
            per_example[b * batch_size : b * batch_size + len(idx)] = each
        # The step: backward, clip, update; fp16 through its scaler
        optimizer.zero_grad(set_to_none=True)
        (loss if scaler is None else scaler.scale(loss)).backward()
        if scaler is not None and recipe.clip_grad > 0:
            scaler.unscale_(optimizer)  # clip the true gradient, not the scaled one
        clip_gradient(optimizer, recipe.clip_grad)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        if after_step is not None:
            after_step((epoch + (b + 1) / n_batches) / epochs)
        losses[b] = batch_loss
        counted = y if y_partner is None or lam >= 0.5 else y_partner  # the label with the larger share
        correct += (logits.detach().argmax(1) == counted).sum()
        if (b + 1) % DIVERGENCE_CHECK_EVERY == 0 or b == n_batches - 1:
            _check_finite(losses[: b + 1], epoch, clock.global_step)
    synchronize(device)
    seconds = time.perf_counter() - start
    n = min(len(order), trained * batch_size)
    mean = lambda total: float(total) / n if n else math.nan
    stats = EpochStats(mean(losses.sum()), mean(correct), n, trained, seconds, lr)
    if per_example is not None:
        stats.order, stats.losses = order[:n].cpu(), per_example[:n].cpu()
    return stats


def _loss(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    y_partner: torch.Tensor | None,
    lam: float,
    weights: torch.Tensor | None,
    label_smoothing: float,
    terms: LossTerms,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The head's logits, the batch's training loss and, where the epoch weighs examples, has
    exits or records each example's loss, each example's loss (detached; else None)."""
    exit_weights = terms.exit_weights
    outputs = model(x, exits=True) if exit_weights is not None else [model(x)]
    logits = outputs[-1]
    # autocast computes cross-entropy in fp32 whatever the logits' dtype
    if exit_weights is None and weights is None and not terms.example_losses:
        loss_of = functools.partial(nn.functional.cross_entropy, logits, label_smoothing=label_smoothing)
        return logits, _mixed(loss_of, y, y_partner, lam), None
    loss_of = functools.partial(
        deep_supervision_loss, outputs, weights=exit_weights or (), label_smoothing=label_smoothing
    )
    each = _mixed(loss_of, y, y_partner, lam)  # (B,)
    loss = (each * weights).mean() if weights is not None else each.mean()
    return logits, loss, each.detach()


def _progress(n_batches: int, epoch: int, epochs: int, shown: bool) -> tqdm:
    """The epoch's batches, behind a progress bar where one is ``shown``."""
    return tqdm(
        range(n_batches), desc=f"epoch {epoch + 1}/{epochs}", leave=False, disable=not shown, mininterval=1.0
    )


def _batch(
    split: Split, idx: torch.Tensor, recipe: StepRecipe, clock: EpochClock
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, float]:
    """A training batch: its augmented inputs and labels; with mixup, blended with itself in
    another order, the partner labels and the share ``lam`` of the first."""
    generator = clock.generator
    x = augment_batch(
        split.x[idx], recipe.augment, generator, positions=idx, epoch=clock.epoch, seed=recipe.seed
    )
    y = split.y[idx]
    if recipe.mixup <= 0:
        return x, y, None, 1.0
    x, partner, lam = mixup_batch(x, recipe.mixup, generator)
    return x, y, y[partner], lam


def clip_gradient(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    """Clip the global norm of the gradient of what trains to ``max_norm`` (0: no clipping). A
    frozen group (``--bn-scale-frozen``'s scales) never moves, so its gradient stays out of the
    norm, where it would shrink every other parameter's step."""
    if max_norm > 0:
        params = [
            p
            for group in optimizer.param_groups
            if not group.get("frozen")
            for p in group["params"]
            if p.grad is not None
        ]
        nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


def _mixed(loss_of: Callable, y: torch.Tensor, y_partner: torch.Tensor | None, lam: float) -> torch.Tensor:
    """``loss_of(y)``; with mixup's partner labels, ``lam`` times it plus ``1 - lam`` times
    ``loss_of(y_partner)``."""
    loss = loss_of(y)
    return loss if y_partner is None else lam * loss + (1 - lam) * loss_of(y_partner)


def _check_finite(losses: torch.Tensor, epoch: int, first_step: int) -> None:
    finite = torch.isfinite(losses)
    if not bool(finite.all()):
        bad = int(torch.nonzero(~finite)[0])
        raise DivergenceError(epoch, first_step + bad, float(losses[bad]))


@dataclass
class EvalResult:
    loss: float
    acc: float
    per_example_loss: torch.Tensor  # (N,) on CPU
    correct: torch.Tensor  # (N,) bool on CPU
    predictions: torch.Tensor  # (N,) int64 on CPU


@torch.no_grad()
def evaluate_split(
    model: nn.Module, split: Split, batch_size: int = 0, precision: str = "fp32"
) -> EvalResult:
    """Loss and accuracy of ``model`` on ``split`` in eval mode, with per-example results;
    forward passes under the autocast of ``precision`` (resolved); ``batch_size`` 0: the
    device's (``pipeline.device.eval_batch_size``)."""
    model.eval()
    batch_size = eval_batch_size(batch_size, split.x.device)
    losses, preds = [], []
    for start in range(0, len(split), batch_size):
        x = split.x[start : start + batch_size]
        y = split.y[start : start + batch_size]
        with autocast(precision, split.x.device):
            logits = model(x)
            losses.append(nn.functional.cross_entropy(logits, y, reduction="none"))
        preds.append(logits.argmax(1))
    per_example = torch.cat(losses).float().cpu()
    predictions = torch.cat(preds).cpu()
    correct = predictions == split.y.cpu()
    return EvalResult(
        float(per_example.mean()), float(correct.float().mean()), per_example, correct, predictions
    )

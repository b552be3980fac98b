"""Difficulty scores by cross-fitting: plain functions, no MLflow.

Each repeat splits the training split into ``k`` stratified folds; fold model ``f`` trains on
the other ``k - 1`` folds and scores fold ``f``. Validation and test examples get the mean over
all fold models, none of which saw them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from models.spec import ArchSpec
from pipeline.data.dataset import Data, Split
from pipeline.device import seed_everything
from pipeline.difficulty.folds import CrossFitLedger, Fold, check_folds, make_folds
from pipeline.difficulty.scorers import MODEL_SCORERS, logits_of, loss_score
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.probes import standard_probes
from pipeline.training.state import FitState, new_state
from pipeline.training.training_plan import TrainingPlan


class FoldPlan(TrainingPlan):
    """Static training restricted to one fold's training positions."""

    def __init__(self, fold: Fold):
        self.fold = fold

    def positions(self, epoch: int, model, data: Data) -> torch.Tensor:
        return self.fold.trained_on

    def fit_positions(self, data: Data) -> torch.Tensor:
        return self.fold.trained_on

    def to_dict(self) -> dict:
        return {"kind": "fold", "fold": self.fold.name, "trained_on": len(self.fold.trained_on)}


@dataclass
class ModelRecord:
    """What one fold model did; ``metrics`` is flat, for logging."""

    name: str
    repeat: int
    fold: int
    seed: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class CrossFitResult:
    ledger: CrossFitLedger
    models: list[ModelRecord]
    seconds: float


def _snapshot(scorer: str, epochs: int) -> int | None:
    """When ``scorer`` reads a fold model: after that many epochs, or None for the trained model."""
    after = MODEL_SCORERS[scorer].after_epochs
    return None if after is None or after >= epochs else after


def _score_model(
    ledger: CrossFitLedger,
    model_i: int,
    model: nn.Module,
    scorers: tuple[str, ...],
    targets: dict[str, tuple[Split, torch.Tensor]],
    batch_size: int,
) -> dict[str, torch.Tensor]:
    """Record ``scorers`` of ``model`` on each target split; returns the logits it computed."""
    logits: dict[str, torch.Tensor] = {}
    for split_name, (split, positions) in targets.items():
        if not scorers:
            break
        logits[split_name] = logits_of(model, split.x, batch_size)  # (N, classes)
        for scorer in scorers:
            values = MODEL_SCORERS[scorer].fn(logits[split_name], split.y.cpu())
            ledger.record(model_i, split_name, positions, scorer, values)
    return logits


def cross_fit(
    data: Data,
    spec: ArchSpec,
    train_cfg: TrainConfig,
    device: torch.device,
    *,
    folds: int,
    repeats: int,
    seed: int,
    scorers: tuple[str, ...],
    on_model: Callable[[int, ModelRecord], None] | None = None,
    progress_bar: bool = False,
) -> CrossFitResult:
    """Train ``repeats * folds`` fold models and record every model scorer's scores.

    ``data`` is on the CPU; train and validation (and test, when loaded) are scored. Only
    ``data.train`` at a fold's ``trained_on`` positions is ever trained on.
    """
    model_scorers = tuple(s for s in scorers if s in MODEL_SCORERS)
    all_folds = [f for r in range(repeats) for f in make_folds(data.train.y, folds, r, seed)]
    check_folds(all_folds, len(data.train))
    ledger = CrossFitLedger(all_folds, data.sizes(), model_scorers)
    on_device = data.to(device)
    train = on_device.train
    others = {name: data.split(name).to(device) for name in data.sizes() if name != "train"}
    early = {}  # epochs -> scorers read after that many epochs
    for scorer in model_scorers:
        early.setdefault(_snapshot(scorer, train_cfg.epochs), []).append(scorer)
    final = tuple(early.pop(None, ()))
    start = time.perf_counter()
    records = []
    for i, fold in enumerate(all_folds):
        held_out = train.take(fold.held_out)
        targets = {
            "train": (held_out, fold.held_out),
            **{name: (split, torch.arange(len(split))) for name, split in others.items()},
        }

        def on_epoch(epoch: int, metrics: dict, state: FitState, i=i, targets=targets) -> None:
            now = tuple(early.get(epoch + 1, ()))
            _score_model(ledger, i, state.model, now, targets, train_cfg.eval_batch_size)

        cfg = dataclasses.replace(train_cfg, seed=fold.seed)
        seed_everything(fold.seed, cfg.deterministic)
        model_start = time.perf_counter()
        state = fit(
            new_state(spec, cfg, device),
            on_device,
            cfg,
            FoldPlan(fold),
            on_epoch=on_epoch,
            progress_bar=progress_bar,
            probes=standard_probes(on_device, cfg),
        )
        logits = _score_model(ledger, i, state.model, final, targets, train_cfg.eval_batch_size)
        held_logits = logits.get("train")
        if held_logits is None:
            held_logits = logits_of(state.model, held_out.x, train_cfg.eval_batch_size)
        y_held = held_out.y.cpu()
        last = state.history[-1]
        record = ModelRecord(
            fold.name,
            fold.repeat,
            fold.fold,
            fold.seed,
            {
                "fold/heldout_loss": float(loss_score(held_logits, y_held).mean()),
                "fold/heldout_acc": float((held_logits.argmax(1) == y_held).float().mean()),
                "fold/val_acc": last["val/acc"],
                "fold/train_loss": last["train/loss"],
                "fold/trained_on": len(fold.trained_on),
                "fold/held_out": len(fold.held_out),
                "fold/train_s": time.perf_counter() - model_start,
            },
        )
        records.append(record)
        if on_model is not None:
            on_model(i, record)
    ledger.check_complete()
    return CrossFitResult(ledger, records, time.perf_counter() - start)

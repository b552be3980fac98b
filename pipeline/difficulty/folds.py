"""Cross-fitting's bookkeeping: stratified folds of the training split, and the ledger of which
fold model trained on and scored which example (it refuses a score from a model that trained on
the example)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from pipeline.cli import ConfigError
from pipeline.data.dataset import Data


class CrossFitError(AssertionError):
    """Broken fold bookkeeping: a bug, never a user error, so it is not a ValueError."""


@dataclass(frozen=True)
class Fold:
    """One fold model's share of the training split, as sorted positions into it."""

    repeat: int
    fold: int
    seed: int  # the fold model's weight and data-order seed
    trained_on: torch.Tensor  # (M,) int64
    held_out: torch.Tensor  # (N - M,) int64

    @property
    def name(self) -> str:
        return f"r{self.repeat}f{self.fold}"


def model_seed(seed: int, repeat: int, fold: int, folds: int) -> int:
    """Distinct seeds for every (run seed, repeat, fold), so two run seeds share no model."""
    return seed * 100_003 + repeat * folds + fold


def make_folds(labels: torch.Tensor, folds: int, repeat: int, seed: int) -> list[Fold]:
    """``folds`` stratified folds of the training split for one repeat.

    Each class's members are shuffled and dealt round-robin, continuing the count from class
    to class, so fold sizes differ by at most one and every fold holds every class in
    proportion.
    """
    n = len(labels)
    if not 2 <= folds <= n:
        raise ConfigError(f"--folds {folds} must be between 2 and the {n} training examples")
    generator = torch.Generator().manual_seed(seed * 100_003 + repeat)
    assignment = torch.empty(n, dtype=torch.long)
    dealt = 0
    for cls in torch.unique(labels).tolist():
        members = torch.nonzero(labels == cls).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        assignment[members] = (torch.arange(len(members)) + dealt) % folds
        dealt += len(members)
    out = []
    for f in range(folds):
        out.append(
            Fold(
                repeat,
                f,
                model_seed(seed, repeat, f, folds),
                trained_on=torch.nonzero(assignment != f).flatten(),
                held_out=torch.nonzero(assignment == f).flatten(),
            )
        )
    check_folds(out, n)
    return out


def check_folds(folds: list[Fold], n: int) -> None:
    """Each fold's trained and held-out positions are disjoint and cover the split; within a
    repeat the held-out parts partition it. Raises CrossFitError otherwise."""
    by_repeat: dict[int, torch.Tensor] = {}
    for fold in folds:
        trained = torch.zeros(n, dtype=torch.bool)
        trained[fold.trained_on] = True
        if trained[fold.held_out].any():
            raise CrossFitError(f"fold {fold.name} holds out positions it also trains on")
        if len(fold.trained_on) + len(fold.held_out) != n:
            raise CrossFitError(f"fold {fold.name} does not cover the {n} training positions")
        counts = by_repeat.setdefault(fold.repeat, torch.zeros(n, dtype=torch.long))
        counts[fold.held_out] += 1
    for repeat, counts in by_repeat.items():
        if not bool((counts == 1).all()):
            raise CrossFitError(f"repeat {repeat}: held-out folds do not partition the training split")


class CrossFitLedger:
    """Which fold model scored which example of which split, and with what score.

    ``values[split][scorer]`` is (models, N) with NaN where a model did not score an example.
    """

    def __init__(self, folds: list[Fold], sizes: dict[str, int], scorers: tuple[str, ...]):
        self.folds = folds
        self.sizes = dict(sizes)
        self.scorers = tuple(scorers)
        m = len(folds)
        self.values = {
            split: {s: torch.full((m, n), math.nan) for s in scorers} for split, n in sizes.items()
        }
        self.scored = {
            split: {s: torch.zeros(m, n, dtype=torch.bool) for s in scorers} for split, n in sizes.items()
        }
        self._trained = []
        for fold in folds:
            mask = torch.zeros(sizes["train"], dtype=torch.bool)
            mask[fold.trained_on] = True
            self._trained.append(mask)

    def record(
        self, model: int, split: str, positions: torch.Tensor, scorer: str, scores: torch.Tensor
    ) -> None:
        """Store ``model``'s ``scorer`` scores of ``positions`` of ``split``."""
        positions = positions.cpu()
        if split == "train" and bool(self._trained[model][positions].any()):
            bad = int(positions[self._trained[model][positions]][0])
            raise CrossFitError(
                f"model {self.folds[model].name} trained on training position {bad} and must not score it"
            )
        if bool(self.scored[split][scorer][model, positions].any()):
            raise CrossFitError(f"model {self.folds[model].name} scored a {split} example twice")
        self.scored[split][scorer][model, positions] = True
        self.values[split][scorer][model, positions] = scores.float().cpu()

    def check_complete(self) -> None:
        """Every training example scored once per repeat, by its held-out model; every other
        example by every model."""
        repeats = sorted({f.repeat for f in self.folds})
        for scorer in self.scorers:
            for split in self.sizes:
                scored = self.scored[split][scorer]
                if split == "train":
                    for fold, row in zip(self.folds, scored):
                        if row[fold.trained_on].any() or not row[fold.held_out].all():
                            raise CrossFitError(
                                f"model {fold.name}: {scorer} scores are not exactly its held-out fold"
                            )
                    per_repeat = torch.stack([scored[self._models(r)].sum(0) for r in repeats])
                    if not bool((per_repeat == 1).all()):
                        raise CrossFitError(
                            f"some training examples lack exactly one {scorer} score per repeat"
                        )
                elif not bool(scored.all()):
                    raise CrossFitError(f"some {split} examples were not scored by every model")

    def _models(self, repeat: int) -> list[int]:
        return [i for i, f in enumerate(self.folds) if f.repeat == repeat]

    def per_model(self, split: str, scorer: str) -> torch.Tensor:
        return self.values[split][scorer]  # (models, N)

    def per_repeat(self, split: str, scorer: str) -> torch.Tensor:
        """(repeats, N): each repeat's score, the one held-out model's on train, the mean of
        its fold models elsewhere."""
        values = self.values[split][scorer]
        repeats = sorted({f.repeat for f in self.folds})
        return torch.stack([values[self._models(r)].nanmean(0) for r in repeats])

    def combined(self, split: str, scorer: str) -> torch.Tensor:
        """(N,) the mean over repeats of ``per_repeat``."""
        return self.per_repeat(split, scorer).mean(0)


def fold_table(ledger: CrossFitLedger, data: Data, path: Path) -> Path:
    """Which stable training index each fold model held out (and scored)."""
    rows = [
        pd.DataFrame(
            {
                "repeat": f.repeat,
                "fold": f.fold,
                "seed": f.seed,
                "held_out_index": data.train.index[f.held_out].numpy(),
            }
        )
        for f in ledger.folds
    ]
    pd.concat(rows, ignore_index=True).to_parquet(path, index=False)
    return path

"""Difficulty scores by cross-fitting, and tiers cut from them: plain functions, no MLflow.

Every score reads "higher = harder":

- ``loss``: cross-entropy of the true class under a model that never trained on the example.
- ``el2n``: EL2N (Paul et al. 2021), ``||softmax(f(x)) - onehot(y)||_2``, from the same fold
  models snapshotted after their first epoch ("early in training"). The published EL2N is
  *in-sample* (a network scores the examples it is training on); ours is out-of-fold exactly
  like ``loss``, so it can be compared with ``loss`` and applied to val/test the same way. No
  scorer here is in-sample.
- ``input``: zlib-compressed size of the uint8 pixels, a model-free control: busy images
  compress worse.

Cross-fitting: each repeat splits the training split into ``k`` stratified folds; fold model
``f`` trains on the other ``k - 1`` folds and scores fold ``f``. Validation and test examples
get the mean over all fold models, none of which saw them. ``CrossFitLedger`` keeps which
model trained on and scored which position, and refuses a training-split score from a model
that trained on that example.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from models.spec import ArchSpec
from pipeline.data.config import DataError
from pipeline.data.dataset import Data, Split
from pipeline.loop import seed_everything
from pipeline.training.config import ConfigError, TrainConfig
from pipeline.training.epoch_loop import TrainingPlan, fit
from pipeline.training.metrics import TIER_NAMES
from pipeline.training.state import FitState, new_state

# The EL2N snapshot: after this many epochs of the fold model's own training. Paul et al.
# score at ~10% of a long run; with 2-3 epoch scoring models the first epoch is that point.
EL2N_AFTER_EPOCHS = 1


class CrossFitError(AssertionError):
    """Broken fold bookkeeping: a bug, never a user error, so it is not a ValueError."""


# --- scorers -----------------------------------------------------------------------------


def loss_score(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, C), (N,) -> (N,) cross-entropy of the true class."""
    return nn.functional.cross_entropy(logits.float(), y, reduction="none")


def el2n_score(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, C), (N,) -> (N,) L2 norm of the softmax minus the one-hot label."""
    probs = logits.float().softmax(dim=1)
    onehot = nn.functional.one_hot(y, probs.shape[1]).float()
    return (probs - onehot).norm(dim=1)


def input_complexity(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N,) bytes of each image after zlib level 9 (PNG's compressor)."""
    if images.dtype != torch.uint8:
        raise TypeError(f"input_complexity needs uint8 pixels, got {images.dtype}")
    flat = images.reshape(len(images), -1).numpy()
    return torch.tensor([len(zlib.compress(row.tobytes(), 9)) for row in flat], dtype=torch.float32)


@dataclass(frozen=True)
class ModelScorer:
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    after_epochs: int | None  # snapshot after this many epochs; None: the trained model


MODEL_SCORERS = {
    "loss": ModelScorer(loss_score, None),
    "el2n": ModelScorer(el2n_score, EL2N_AFTER_EPOCHS),
}
INPUT_SCORERS = {"input": input_complexity}
SCORERS = (*MODEL_SCORERS, *INPUT_SCORERS)


def parse_scorers(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise ConfigError(f"--scorers {text!r} names no scorer (known: {', '.join(SCORERS)})")
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise ConfigError(f"--scorers: unknown scorer {unknown[0]!r} (known: {', '.join(SCORERS)})")
    if len(set(names)) != len(names):
        raise ConfigError(f"--scorers {text!r} names a scorer twice")
    return names


@torch.no_grad()
def logits_of(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """(N, C, H, W) -> (N, classes) logits in eval mode, on the CPU."""
    model.eval()
    out = [model(x[i : i + batch_size]).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.empty(0)


# --- folds -------------------------------------------------------------------------------


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


# --- training the fold models ------------------------------------------------------------


class FoldPlan(TrainingPlan):
    """Static training restricted to one fold's training positions."""

    def __init__(self, fold: Fold):
        self.fold = fold

    def positions(self, epoch: int, model, data: Data) -> torch.Tensor:
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


def subset(split: Split, positions: torch.Tensor) -> Split:
    positions = positions.to(split.x.device)
    return Split(split.x[positions], split.y[positions], split.index[positions])


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
        held_out = subset(train, fold.held_out)
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


# --- tiers -------------------------------------------------------------------------------


def parse_fractions(text: str) -> tuple[float, float, float]:
    """``"0.333,0.333,0.334"`` -> the easy, medium and hard shares, checked to sum to one."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--tier-fractions {text!r} must be {len(TIER_NAMES)} comma-separated numbers (easy,medium,hard)"
        ) from None
    if len(values) != len(TIER_NAMES):
        raise ConfigError(
            f"--tier-fractions {text!r} has {len(values)} fraction(s); it needs "
            f"{len(TIER_NAMES)}: {','.join(TIER_NAMES)}"
        )
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(f"--tier-fractions {text!r}: every fraction must be positive")
    total = sum(values)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"--tier-fractions {text!r} sums to {total:g}; the fractions must sum to 1")
    return tuple(v / total for v in values)


def boundaries(n: int, fractions: tuple[float, ...]) -> list[int]:
    """Positions in the ranking where each tier after the first starts, rounded cumulatively
    so that the tier sizes always add up to ``n``."""
    cumulative = np.cumsum(fractions)[:-1]
    return [round(n * c) for c in cumulative]


@dataclass(frozen=True)
class TierCuts:
    """Score thresholds between tiers, per class (or one set under key -1 for all classes)."""

    scorer: str
    fractions: tuple[float, ...]
    per_class: bool
    cuts: dict[int, tuple[float, ...]]  # class id (or -1) -> one cut per tier boundary

    def to_dict(self, classes: list[str] | None = None) -> dict:
        def label(c: int) -> str:
            return "all" if c == -1 else (classes[c] if classes else str(c))

        return {
            "scorer": self.scorer,
            "fractions": list(self.fractions),
            "per_class": self.per_class,
            "tiers": list(TIER_NAMES),
            "rule": "tier = number of cut points <= score; train tiers are exact ranks "
            "(score, then index) and the cut points midway between neighbouring ranks",
            "cuts": {label(c): list(v) for c, v in sorted(self.cuts.items())},
        }


def rank_order(scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Positions sorted by score, ties broken by the stable index: the same on any machine."""
    by_index = torch.argsort(index, stable=True)
    return by_index[torch.argsort(scores[by_index], stable=True)]


def fit_tiers(
    scores: torch.Tensor,
    labels: torch.Tensor,
    index: torch.Tensor,
    scorer: str,
    fractions: tuple[float, ...],
    per_class: bool,
) -> tuple[torch.Tensor, TierCuts]:
    """Tiers of the training split by rank (exact fractions within each group) and the cut
    points that reproduce them on other splits."""
    scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise DataError(f"{scorer} scores contain NaN or infinite values; cannot cut tiers")
    tiers = torch.empty(len(scores), dtype=torch.long)
    cuts: dict[int, tuple[float, ...]] = {}
    groups = torch.unique(labels).tolist() if per_class else [-1]
    for group in groups:
        members = torch.nonzero(labels == group).flatten() if per_class else torch.arange(len(scores))
        order = members[rank_order(scores[members], index[members])]
        sorted_scores = scores[order]
        n = len(order)
        starts = boundaries(n, fractions)
        group_cuts = []
        for b in starts:
            if b <= 0:
                group_cuts.append(-math.inf)
            elif b >= n:
                group_cuts.append(math.inf)
            else:
                group_cuts.append(float((sorted_scores[b - 1] + sorted_scores[b]) / 2))
        cuts[group] = tuple(group_cuts)
        rank_tier = torch.zeros(n, dtype=torch.long)
        for b in starts:
            rank_tier[b:] += 1
        tiers[order] = rank_tier
    return tiers, TierCuts(scorer, tuple(fractions), per_class, cuts)


def apply_tiers(scores: torch.Tensor, labels: torch.Tensor, cuts: TierCuts) -> torch.Tensor:
    """Tiers of any split from cut points fitted on the training split."""
    scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise DataError(f"{cuts.scorer} scores contain NaN or infinite values; cannot assign tiers")
    tiers = torch.zeros(len(scores), dtype=torch.long)
    keys = labels.tolist() if cuts.per_class else [-1] * len(labels)
    missing = sorted(set(keys) - set(cuts.cuts))
    if missing:
        raise DataError(f"no tier cut points for class {missing[0]}: it is absent from the training split")
    thresholds = torch.tensor([cuts.cuts[k] for k in keys], dtype=torch.float64).reshape(len(scores), -1)
    tiers += (scores[:, None] >= thresholds).sum(1)
    return tiers


# --- stability ---------------------------------------------------------------------------


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two (N,) score vectors; NaN when either is constant."""
    if len(a) < 2 or float(a.std()) == 0 or float(b.std()) == 0:
        return math.nan
    return float(spearmanr(a.numpy(), b.numpy()).statistic)


def mean_pairwise_spearman(rows: torch.Tensor) -> float:
    """Mean Spearman correlation over all pairs of rows of (R, N); NaN for fewer than 2 rows."""
    values = [spearman(rows[i], rows[j]) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    return float(np.mean(values)) if values else math.nan

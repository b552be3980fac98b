"""Curricula: which training examples each epoch uses. Pure: no MLflow inside.

A ``Curriculum`` turns per-example difficulty (a score, higher = harder, and a tier 0/1/2 for
easy/medium/hard, both in training-position order) into the training positions of each epoch:

- ``none``: every example, every epoch (the static baseline).
- ``tiers``: the project's core design: easy examples only, then easy+medium, then all, with
  the stage boundaries at the model's growth epochs (or thirds of ``a * epochs``); with a third
  boundary the easy examples then retire and the rest of training uses medium and hard ones.
- ``linear``, ``quad``, ``root``, ``step``, ``exp``, ``log``: the pacing functions of Wu, Dyer &
  Neyshabur 2021, "When do curricula work?" (ICLR): the first ``ceil(g(t) * N)`` examples of
  the difficulty-sorted data at training progress ``t = epoch / epochs``.
- ``self-paced``: the model's own loss picks the examples (Kumar, Packer & Koller 2010): at the
  start of each epoch the lowest-loss fraction ``g(t)`` of the training set.

``order`` gives the controls: ``curriculum`` is easy first, ``anti`` hard first and ``random``
a fixed random permutation drawn from ``seed``. Every control takes exactly as many examples per
epoch as the curriculum it mirrors, so only the choice of examples differs.

``hold_back`` > 0 keeps the hardest such share of the training set out of every epoch (with
any pacing but self-paced, ``none`` included): under label noise the highest-loss examples are
mostly wrong labels (Han et al. 2018, "Co-teaching", train on small-loss examples). Each order
holds back the end of its own order: ``anti`` the easiest, ``random`` a random share.
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from pipeline.difficulty.tiers import TIER_NAMES
from pipeline.loop import evaluate

if TYPE_CHECKING:
    from pipeline.data.dataset import Data

# The paper's c: the exp and log pacings change by a factor e^10 over [0, a].
PACING_C = 10.0
# ceil(g * N) less a tolerance, so that 0.2 * 1000 = 200.00000000000003 takes 200 examples.
COUNT_TOLERANCE = 1e-9


class CurriculumError(ValueError):
    """A curriculum option or input that cannot work; the message names it and the fix."""


# --- pacing functions --------------------------------------------------------------------
# Each maps training progress t in [0, 1] to the fraction of the sorted data in use, with
# a = fraction of training at which all data is in use and b = starting fraction. The paper
# writes them for N examples and T steps; with s = t / a they read g = b + (1 - b) * h(s).


def check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 < value <= 1):
        raise CurriculumError(f"curriculum {name}={value!r} must be a fraction in (0, 1]")
    return float(value)


def check_rejoin(value: float) -> float:
    """``--rejoin``: a fraction of training at its end, in [0, 1)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 <= value < 1):
        raise CurriculumError(f"--rejoin {value!r} must be a fraction in [0, 1) of training at its end")
    return float(value)


def check_hold_back(value: float) -> float:
    """``--hold-back``: a share of the training set, in [0, 1)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) and 0 <= value < 1):
        raise CurriculumError(f"--hold-back {value!r} must be a share in [0, 1) of the training examples")
    return float(value)


def _pacing(formula: Callable[[float, float], float]) -> Callable[[float, float, float], float]:
    """A pacing function from its formula in s = t / a: validated, exactly 1 from t = a on,
    and clipped to [b, 1] (the paper clips at N; the floor only absorbs rounding in ``log``)."""

    @functools.wraps(formula)
    def pace(t: float, a: float, b: float) -> float:
        a, b = check_fraction("a", a), check_fraction("b", b)
        if not t >= 0:
            raise CurriculumError(f"training progress t={t!r} must be in [0, 1]")
        if t >= a:
            return 1.0
        return min(1.0, max(b, formula(t / a, b)))

    return pace


@_pacing
def linear(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT) · t
    return b + (1 - b) * s


@_pacing
def quad(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT)^2 · t^2
    return b + (1 - b) * s * s


@_pacing
def root(s: float, b: float) -> float:
    # Nb + N(1-b)/(aT)^(1/2) · t^(1/2)
    return b + (1 - b) * math.sqrt(s)


@_pacing
def step(s: float, b: float) -> float:
    # Nb + N·floor(t/(aT)): b until t = a, then everything.
    return b + math.floor(s)


@_pacing
def exp(s: float, b: float) -> float:
    # Nb + N(1-b)/(e^c - 1) · (exp(c·t/(aT)) - 1), c = 10
    return b + (1 - b) * math.expm1(PACING_C * s) / math.expm1(PACING_C)


@_pacing
def log(s: float, b: float) -> float:
    # Nb + N(1-b) · (1 + (1/c)·log(t/(aT) + e^-c)), c = 10; equals b at t = 0 up to rounding.
    return b + (1 - b) * (1 + math.log(s + math.exp(-PACING_C)) / PACING_C)


PACINGS: dict[str, Callable[[float, float, float], float]] = {
    "linear": linear,
    "quad": quad,
    "root": root,
    "step": step,
    "exp": exp,
    "log": log,
}
CURRICULUM_PACINGS = ("none", "tiers", *PACINGS, "self-paced")
ORDERS = ("curriculum", "anti", "random")
# The ``tiers`` stage after a third boundary: easy examples retired, medium and hard in use.
RETIRED_STAGE = 3


def get_pacing(name: str) -> Callable[[float, float, float], float]:
    if name not in PACINGS:
        raise CurriculumError(f"unknown pacing function {name!r} (known: {', '.join(PACINGS)})")
    return PACINGS[name]


def _digest(*arrays: np.ndarray | None) -> str:
    h = hashlib.sha256()
    for array in arrays:
        h.update(b"none" if array is None else np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


# --- the curriculum ----------------------------------------------------------------------


class Curriculum:
    """Which training positions each epoch uses.

    ``difficulty`` (N,) float and ``tiers`` (N,) long (0 easy, 1 medium, 2 hard) are in
    training-position order. Difficulty pacings need ``difficulty`` (except with ``order
    ="random"``), ``tiers`` needs ``tiers``; with ``tiers`` given, every pacing reports the tier
    mix it uses. ``a`` sets when all data is in use (and the default tier boundaries), ``b`` the
    starting fraction of the difficulty and self-paced pacings. ``boundaries=[e1, e2]``: epochs
    before e1 use tier 0, before e2 tiers 0-1, then all; ``[e1, e2, e3]``: from e3 on, tiers 1-2
    (the easy examples retire). ``self_paced_pacing`` names the pacing
    function that gives self-paced its fraction. ``rejoin`` > 0: the final such fraction of
    training uses every tier again (the retired easy examples rejoin, so the run ends on the
    full data it is evaluated on).
    """

    def __init__(
        self,
        difficulty: torch.Tensor | None = None,
        tiers: torch.Tensor | None = None,
        *,
        pacing: str = "tiers",
        order: str = "curriculum",
        a: float = 0.8,
        b: float = 0.2,
        seed: int = 0,
        boundaries: Sequence[int] | None = None,
        self_paced_pacing: str = "linear",
        eval_batch_size: int = 1024,
        rejoin: float = 0.0,
        hold_back: float = 0.0,
    ):
        if pacing not in CURRICULUM_PACINGS:
            raise CurriculumError(
                f"unknown curriculum pacing {pacing!r} (known: {', '.join(CURRICULUM_PACINGS)})"
            )
        if order not in ORDERS:
            raise CurriculumError(f"unknown curriculum order {order!r} (known: {', '.join(ORDERS)})")
        get_pacing(self_paced_pacing)
        self.pacing, self.order, self.seed = pacing, order, int(seed)
        self.a, self.b = check_fraction("a", a), check_fraction("b", b)
        self.rejoin = check_rejoin(rejoin)
        self.hold_back = check_hold_back(hold_back)
        self.self_paced_pacing = self_paced_pacing
        self.eval_batch_size = int(eval_batch_size)
        if self.eval_batch_size < 1:
            raise CurriculumError(f"curriculum eval_batch_size={eval_batch_size} must be positive")

        self.difficulty = None if difficulty is None else self._check_difficulty(difficulty)
        self.tiers = None if tiers is None else self._check_tiers(tiers)
        sizes = {len(v) for v in (self.difficulty, self.tiers) if v is not None}
        if len(sizes) > 1:
            raise CurriculumError(
                f"difficulty has {len(self.difficulty)} rows but tiers has {len(self.tiers)}; "
                "both must cover the training split in position order"
            )
        self.n: int | None = sizes.pop() if sizes else None

        if pacing == "tiers" and self.tiers is None:
            raise CurriculumError(
                "curriculum pacing 'tiers' needs tiers (the score step's tier_id per example)"
            )
        if pacing in PACINGS and order != "random" and self.difficulty is None:
            raise CurriculumError(f"curriculum pacing {pacing!r} needs difficulty scores (order {order!r})")
        if self.hold_back and pacing == "self-paced":
            raise CurriculumError(
                "--hold-back needs a fixed order (tiers, none or a pacing function), not self-paced"
            )
        if self.hold_back and self.difficulty is None:
            # Every order's epoch sizes come from what the easy-first order keeps.
            raise CurriculumError("--hold-back needs difficulty scores (the score step's table)")
        self.boundaries = None if boundaries is None else self._check_boundaries(boundaries)
        self._kept: dict[str, np.ndarray] = {}  # order -> mask of the positions it does not hold back
        self._ordering: np.ndarray | None = None  # static pacings: positions, first used first
        self._used: dict[int, dict] = {}  # self-paced: what each epoch actually used

    # --- validation ----------------------------------------------------------------------

    @staticmethod
    def _check_difficulty(difficulty: torch.Tensor) -> np.ndarray:
        d = torch.as_tensor(difficulty).detach().cpu().double().numpy()
        if d.ndim != 1 or len(d) == 0:
            raise CurriculumError(f"difficulty must be a non-empty (N,) tensor, got shape {tuple(d.shape)}")
        if np.isnan(d).any():
            raise CurriculumError(
                f"difficulty has {int(np.isnan(d).sum())} NaN score(s), e.g. at position "
                f"{int(np.flatnonzero(np.isnan(d))[0])}; rescore or drop the example"
            )
        return d

    @staticmethod
    def _check_tiers(tiers: torch.Tensor) -> np.ndarray:
        t = torch.as_tensor(tiers).detach().cpu()
        if t.ndim != 1 or len(t) == 0 or t.is_floating_point() or t.is_complex():
            raise CurriculumError(
                f"tiers must be a non-empty (N,) integer tensor, got {t.dtype} {tuple(t.shape)}"
            )
        t = t.long().numpy()
        bad = (t < 0) | (t >= len(TIER_NAMES))
        if bad.any():
            raise CurriculumError(
                f"tiers must be 0, 1 or 2 ({'/'.join(TIER_NAMES)}); got {int(t[bad][0])} at position "
                f"{int(np.flatnonzero(bad)[0])}"
            )
        return t

    @staticmethod
    def _check_boundaries(boundaries: Sequence[int]) -> list[int]:
        bounds = list(boundaries)
        if len(bounds) not in (2, 3) or not all(isinstance(e, int | np.integer) for e in bounds):
            raise CurriculumError(
                f"tier boundaries {bounds} must be two or three epochs [e1, e2(, e3)] "
                "(medium joins, hard joins, easy retires)"
            )
        bounds = [int(e) for e in bounds]
        if bounds[0] < 0 or bounds != sorted(bounds):
            raise CurriculumError(
                f"tier boundaries {bounds} must be non-negative and in order (e1 <= e2 <= e3)"
            )
        return bounds

    def validate(self, epochs: int) -> Curriculum:
        """Fail before training if the curriculum cannot run ``epochs`` epochs."""
        if not isinstance(epochs, int | np.integer) or epochs < 1:
            raise CurriculumError(f"epochs must be a positive integer, got {epochs!r}")
        if self.boundaries is not None:
            for e in self.boundaries:
                if e >= epochs:
                    raise CurriculumError(
                        f"tier boundary epoch {e} is past the last epoch {epochs - 1} of --epochs {epochs}"
                    )
        return self

    def _check_epoch(self, epoch: int, epochs: int) -> None:
        self.validate(epochs)
        if not 0 <= epoch < epochs:
            raise CurriculumError(f"epoch {epoch} is outside 0..{epochs - 1} (--epochs {epochs})")

    def _check_size(self, data: Data | None) -> int:
        if data is not None:
            size = len(data.train)
            if self.n is None:
                self.n = size
            elif size != self.n:
                raise CurriculumError(
                    f"the difficulty inputs cover {self.n} examples but the training split has {size}; "
                    "score the same dataset, split and subset"
                )
        if self.n is None:
            raise CurriculumError("the training set size is unknown; pass data= or difficulty/tiers")
        return self.n

    # --- counts and orderings ------------------------------------------------------------

    def tier_boundaries(self, epochs: int) -> list[int]:
        """The epochs at which medium, then hard examples enter (``tiers`` pacing)."""
        if self.boundaries is not None:
            self.validate(epochs)
            return list(self.boundaries)
        # Thirds of a * epochs: epoch e is in stage k once e >= k * a * epochs / 3.
        return [math.ceil(k * self.a * epochs / 3 - COUNT_TOLERANCE) for k in (1, 2)]

    def first_rejoined(self, epochs: int) -> int:
        """The first epoch of the ``rejoin`` tail (``epochs`` when there is none)."""
        return math.ceil(epochs * (1 - self.rejoin) - COUNT_TOLERANCE) if self.rejoin > 0 else epochs

    def stage(self, epoch: int, epochs: int) -> int:
        """``tiers`` pacing: 0 easy only, 1 easy+medium, 2 all, 3 medium+hard (easy retired);
        2 again in the ``rejoin`` tail."""
        if epoch >= self.first_rejoined(epochs):
            return 2
        return sum(epoch >= e for e in self.tier_boundaries(epochs))

    def _tiers_in_use(self, stage: int) -> np.ndarray:
        """Which examples a ``tiers`` stage uses, as a mask over training positions."""
        return self.tiers >= 1 if stage == RETIRED_STAGE else self.tiers <= stage

    def target_fraction(self, epoch: int, epochs: int) -> float:
        """The pacing function's fraction at progress epoch / epochs (1 for none and tiers)."""
        if self.pacing in PACINGS:
            return PACINGS[self.pacing](epoch / epochs, self.a, self.b)
        if self.pacing == "self-paced":
            return PACINGS[self.self_paced_pacing](epoch / epochs, self.a, self.b)
        return 1.0

    def count(self, epoch: int, epochs: int) -> int:
        """How many examples the epoch uses: the same for every order."""
        self._check_epoch(epoch, epochs)
        n = self._check_size(None)
        if self.pacing == "tiers":
            # The easy-first order's count, so that every control takes as many examples.
            return int((self._tiers_in_use(self.stage(epoch, epochs)) & self._kept_mask("curriculum")).sum())
        kept = n - self.held_back_count()
        fraction = self.target_fraction(epoch, epochs)
        return min(kept, max(1, math.ceil(fraction * kept - COUNT_TOLERANCE)))

    def held_back_count(self) -> int:
        """How many training examples ``hold_back`` keeps out of every epoch."""
        return math.ceil(self.hold_back * self._check_size(None) - COUNT_TOLERANCE) if self.hold_back else 0

    def _kept_mask(self, order: str) -> np.ndarray:
        """Positions that ``order`` uses at all: all but the last ``held_back_count`` of its order
        by difficulty alone (curriculum: the hardest; anti: the easiest; random: a random share)."""
        if order not in self._kept:
            n, held = self._check_size(None), self.held_back_count()
            mask = np.ones(n, dtype=bool)
            if held:
                mask[self._rank(self.difficulty, None, order)[n - held :]] = False
            self._kept[order] = mask
        return self._kept[order]

    def _rank(self, key: np.ndarray | None, tier: np.ndarray | None, order: str = "") -> np.ndarray:
        """Positions sorted by (tier, key, position) ascending, or by the fixed permutation for
        the random order; ``anti`` negates the sort keys, ties still going to the lower position.
        ``order``: another order than the curriculum's own."""
        n, order = self._check_size(None), order or self.order
        if order == "random":
            generator = torch.Generator().manual_seed(self.seed)
            return torch.randperm(n, generator=generator).numpy()
        sign = -1 if order == "anti" else 1
        keys = [np.arange(n)]  # np.lexsort sorts by the last key first
        if key is not None:
            keys.append(sign * key)
        if tier is not None:
            keys.append(sign * tier)
        return np.lexsort(keys)

    def _static_positions(self, epoch: int, epochs: int) -> np.ndarray:
        if self.pacing == "none":
            return np.flatnonzero(self._kept_mask(self.order))
        k = self.count(epoch, epochs)
        if k == 0:
            raise CurriculumError(
                f"no training example is in tier {TIER_NAMES[0]!r}, so epoch {epoch} would be empty; "
                "move the first tier boundary to 0 or rescore"
            )
        if self._ordering is None:
            ordering = self._rank(self.difficulty, self.tiers if self.pacing == "tiers" else None)
            self._ordering = ordering[self._kept_mask(self.order)[ordering]]
        if self.pacing == "tiers" and self.stage(epoch, epochs) == RETIRED_STAGE:
            # The window slides to the end of the order: the hardest k (anti: the easiest k;
            # random: another random k), so each control drops what it has seen longest.
            return np.sort(self._ordering[len(self._ordering) - k :])
        return np.sort(self._ordering[:k])

    @torch.no_grad()
    def _self_paced_positions(
        self, epoch: int, epochs: int, model: nn.Module | None, data: Data | None
    ) -> np.ndarray:
        n, k = self._check_size(data), self.count(epoch, epochs)
        if k == n:
            return np.arange(n)
        if self.order == "random":
            return np.sort(self._rank(None, None)[:k])
        if model is None or data is None:
            raise CurriculumError("curriculum pacing 'self-paced' needs the model and data each epoch")
        was_training = model.training
        try:
            loss = evaluate(model, data.train, self.eval_batch_size).per_example_loss  # (N,), eval mode
        finally:
            model.train(was_training)
        return np.sort(self._rank(loss.double().numpy(), None)[:k])

    def positions(
        self, epoch: int, epochs: int, model: nn.Module | None = None, data: Data | None = None
    ) -> torch.Tensor:
        """Sorted training positions (CPU int64) for ``epoch`` of ``epochs``.

        ``self-paced`` needs ``model`` and ``data`` (``data.train`` on the model's device) and
        evaluates the model's per-example loss; the other pacings only check ``data``'s size.
        """
        self._check_epoch(epoch, epochs)
        self._check_size(data)
        if self.pacing == "self-paced":
            pos = self._self_paced_positions(epoch, epochs, model, data)
            self._used[epoch] = self._describe(pos)
        else:
            pos = self._static_positions(epoch, epochs)
        return torch.from_numpy(pos).long()

    # --- reporting -----------------------------------------------------------------------

    def _describe(self, pos: np.ndarray) -> dict:
        """Count, fraction and tier mix of one epoch's positions, keyed by metric names."""
        n = self._check_size(None)
        out = {"count": len(pos), "fraction": len(pos) / n}
        if self.tiers is None:
            return out
        counts = np.bincount(self.tiers[pos], minlength=len(TIER_NAMES))
        totals = np.bincount(self.tiers, minlength=len(TIER_NAMES))
        out["tiers_present"] = "+".join(name for name, c in zip(TIER_NAMES, counts) if c)
        for name, c, total in zip(TIER_NAMES, counts, totals):
            out[f"tier_{name}_share"] = float(c / max(1, len(pos)))  # of the epoch's examples
            if total:
                out[f"tier_{name}_coverage"] = float(c / total)  # of that tier's examples
        return out

    def _epoch_row(self, epoch: int, epochs: int) -> dict:
        self._check_epoch(epoch, epochs)
        row: dict = {"epoch": epoch, "progress": epoch / epochs}
        if self.pacing == "tiers":
            row["stage"] = self.stage(epoch, epochs)
        if self.n is None:  # none, self-paced or random before any data was seen
            return {**row, "fraction": self.target_fraction(epoch, epochs), "count": None}
        if self.pacing == "self-paced":
            k = self.count(epoch, epochs)
            return {**row, "count": k, "fraction": k / self.n, **self._used.get(epoch, {})}
        return {**row, **self._describe(self._static_positions(epoch, epochs))}

    def schedule_table(self, epochs: int) -> list[dict]:
        """Per epoch: fraction and count in use, tier stage, tiers present, each tier's share of
        the epoch and coverage. Self-paced tier mixes appear once the epoch has been run."""
        self.validate(epochs)
        return [self._epoch_row(epoch, epochs) for epoch in range(epochs)]

    def epoch_info(self, epoch: int, epochs: int) -> dict[str, float]:
        """The epoch's ``curriculum/...`` metrics."""
        row = self._epoch_row(epoch, epochs)
        return {
            f"curriculum/{key}": float(value)
            for key, value in row.items()
            if key not in ("epoch", "progress", "count", "tiers_present") and value is not None
        }

    # --- configuration and checkpoints ---------------------------------------------------

    def to_dict(self) -> dict:
        """The configuration, JSON-serialisable; with the inputs it rebuilds the curriculum."""
        return {
            "kind": "curriculum",
            "pacing": self.pacing,
            "order": self.order,
            "a": self.a,
            "b": self.b,
            "seed": self.seed,
            "boundaries": self.boundaries,
            "self_paced_pacing": self.self_paced_pacing,
            "eval_batch_size": self.eval_batch_size,
            "size": self.n,
            # Only when set, so checkpoints written before these options still resume.
            **({"rejoin": self.rejoin} if self.rejoin else {}),
            **({"hold_back": self.hold_back} if self.hold_back else {}),
        }

    @classmethod
    def from_dict(
        cls, config: dict, difficulty: torch.Tensor | None = None, tiers: torch.Tensor | None = None
    ) -> Curriculum:
        options = {k: v for k, v in config.items() if k not in ("kind", "size")}
        return cls(difficulty, tiers, **options)

    def inputs_digest(self) -> str:
        """What the orderings depend on: a resumed run must see the same scores."""
        return _digest(self.difficulty, self.tiers)

    def state_dict(self) -> dict:
        return {
            "config": self.to_dict(),
            "inputs": self.inputs_digest(),
            "used": {str(epoch): row for epoch, row in self._used.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what self-paced epochs used; refuse a checkpoint of another curriculum."""
        saved, mine = dict(state["config"]), self.to_dict()
        if saved.get("size") is None or mine["size"] is None:
            saved.pop("size", None)
            mine.pop("size")
        differ = [
            f"{k} {saved.get(k)!r} (checkpoint) vs {mine.get(k)!r}"
            for k in sorted(set(saved) | set(mine))
            if saved.get(k) != mine.get(k)
        ]
        if differ:
            raise CurriculumError(
                f"the checkpoint's curriculum differs: {'; '.join(differ)}; resume with its options"
            )
        if state["inputs"] != self.inputs_digest():
            raise CurriculumError(
                "the checkpoint was made with other difficulty scores or tiers; "
                "resume with the same score run"
            )
        self._used = {int(epoch): dict(row) for epoch, row in state["used"].items()}

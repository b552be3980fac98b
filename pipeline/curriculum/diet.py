"""The data diet: a run's curriculum and its loss-aware pruning, built together.

The project's rule lives here, in one place. On a growing network the tiers curriculum works
through the tiers before the first growth and uses every example from it on
(``growth_boundaries``; ``--retire-easy`` retires the easy ones there instead); pruning starts
the epoch after the first growth (or at a retirement) and stops where retired examples rejoin
(``make_pruner``); and pruning belongs to the
curriculum, so a run without one prunes nothing by default and isolates growth
(``curriculum_pruning``). ``build_diet`` builds the curriculum and the pruner from a run's
options, its scores, its growth events and its epochs, and fails before any training if they
cannot work. Pure: no MLflow inside (``inputs`` finds and loads the scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from pipeline.curriculum.base import Curriculum
from pipeline.curriculum.checks import CurriculumError, check_hold_back, check_rejoin
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.curriculum.pruning import LossPruner, PruningError
from pipeline.curriculum.strategies import make_curriculum
from pipeline.training.config import TrainConfig

if TYPE_CHECKING:
    from models.schedule import GrowthEvent
    from pipeline.data.dataset import Data
    from pipeline.difficulty.scores_table import ScoresTable


def growth_boundaries(events: list[GrowthEvent], retire_easy: bool = False) -> list[int] | None:
    """Tier boundaries tied to growth: the start network works through the curriculum (medium
    examples join a third and hard ones two thirds of the way to the first growth event), and
    from the first growth on every example is in use, loss-aware pruning (``make_pruner``)
    skipping part of what the network has already learned. ``retire_easy``: the easy examples
    retire at the first growth instead (a third boundary there), the default until CIFAR-10.

    Why every example stays: on CIFAR-10 the retirement broke training. Training accuracy fell
    to 0.14 in the growth epoch on every seed (validation 0.57 -> 0.20 on one), and the runs
    ended 6 to 8 points below those that kept the easy third (seeds 500-502, 12 epochs, test:
    70.45% against 76.61%, docs/results/cifar10/): where the scorer is weak, its easy third is
    what the network has not yet learned, and medium and hard examples alone teach it the
    wrong cues. On full Fashion-MNIST, where the easy third is learned by the growth, retiring
    it saved compute at the same accuracy for the FLOPs (static-12's FLOPs, tuning seeds 0-2:
    -0.43 points against static-12 retired, -0.47 kept; at 12 epochs on fresh seeds 100-102 the
    same accuracy, -0.03 points, for 0.59x static-12's FLOPs against 0.41x: keeping them is
    dearer there, never ruinous). Pruning by loss retires what is
    learned on any dataset; the scorer's tiers only know what a small model found easy.
    Holding hard examples back until the network is complete left it too few epochs to catch
    up on Fashion-MNIST (1.35 points below static)."""
    first = first_growth(events)
    if first is None:
        return None
    return [first // 3, 2 * first // 3] + ([first] if retire_easy else [])


def first_growth(events: list[GrowthEvent]) -> int | None:
    """The epoch of the first growth event, or None for a run that does not grow."""
    return min((event.epoch for event in events), default=None)


def diet_of_growth(events: list[GrowthEvent], retire_easy: bool = False) -> dict:
    """The curriculum options that give a run without growth the diet a growing run with
    ``events`` derives from them (the tiers curriculum control): its tier boundaries and the
    epoch its pruning starts."""
    boundaries = growth_boundaries(events, retire_easy) or []
    first = first_growth(events)
    start = first if retire_easy else pruning_after_growth(first)
    return {
        "tier_boundaries": ",".join(str(e) for e in boundaries),
        **({"prune_from": max(1, start)} if first is not None else {}),
    }


def pruning_after_growth(first: int | None) -> int | None:
    """The epoch pruning starts on a run whose easy examples stay: the one after the first
    growth, so that the network and its diet never change in the same epoch.

    Why not at the growth itself (the default until issue 35): on CIFAR-10 the two changes
    together knocked training down. Pruning makes a batch harder (30% of the learned examples
    out, the rest of them weighted up by 1/0.7) just as the grown network takes its first
    steps; the growth epoch collapsed (seed 606 fp32, 600 bf16) or dipped by 10 to 50 points
    (607-609, 700 bf16 with the re-warm), while the same seeds pruning one epoch later, or not
    at all, dipped by none (docs/results/cifar10/)."""
    return None if first is None else first + 1


def retires_easy(cfg: CurriculumConfig) -> bool:
    """Whether a run's growth-tied tiers retire the easy examples (a dynamic run's option)."""
    return isinstance(cfg, DynamicCurriculumConfig) and cfg.retire_easy


def curriculum_pruning(pacing: str) -> float:
    """The default dynamic run's pruning rate for a run with ``pacing``: pruning belongs to the
    curriculum, so a run without one (``none``) prunes nothing and isolates growth."""
    return 0.0 if pacing == "none" else DynamicCurriculumConfig().prune


def curriculum_label(pacing: str, order: str, prune: float, hold_back: float = 0.0) -> str:
    """The curriculum's part of a variant's name: ``+tiers``, ``+tiers-random``,
    ``+tiers+prune0.3``, ``+linear+hold0.33``, or '' for neither curriculum nor pruning."""
    held = f"+hold{hold_back:.2g}" if hold_back else ""
    pruning = f"+prune{prune:g}" if prune else ""
    if pacing == "none":
        return ("" if order == "curriculum" or not hold_back else f"-{order}") + held + pruning
    return f"+{pacing}" + ("" if order == "curriculum" else f"-{order}") + held + pruning


def name_label(pacing: str, order: str, prune: float, hold_back: float = 0.0) -> str:
    """``curriculum_label`` for a run's name: the pruning that goes with the pacing by default
    (``curriculum_pruning``) left out, so names stay short enough for the UI's columns
    (``dynamic-default+tiers-s0``); the variant tag keeps it."""
    return curriculum_label(pacing, order, 0.0 if prune == curriculum_pruning(pacing) else prune, hold_back)


def needs_scores(cfg: CurriculumConfig) -> bool:
    """Whether the diet needs a score_difficulty run: any curriculum, or a held-back share."""
    needs = cfg.pacing != "none" or check_hold_back(cfg.hold_back) > 0
    check_rejoin(cfg.rejoin)  # also where no curriculum is built (--pacing none)
    return needs


@dataclass
class CurriculumSetup:
    """What a training run takes from a score_difficulty run."""

    curriculum: Curriculum | None
    val_tiers: torch.Tensor | None  # tier per validation example, for val/acc_<tier>
    scores_run_id: str
    pacing: str
    order: str
    pruner: LossPruner | None = None
    hold_back: float = 0.0

    def tags(self) -> dict[str, str]:
        return {"scores_run_id": self.scores_run_id, "pacing": self.pacing, "order": self.order}

    def label(self) -> str:
        """The curriculum's part of a run's variant name, e.g. ``+tiers``, ``+tiers-random`` or
        ``+tiers+prune0.3``."""
        rate = self.pruner.rate if self.pruner is not None else 0
        return curriculum_label(self.pacing, self.order, rate, self.hold_back)


def make_pruner(
    cfg: CurriculumConfig,
    train_cfg: TrainConfig,
    curriculum: Curriculum | None,
    n_train: int,
    grows_from: int | None = None,
) -> LossPruner | None:
    """The run's loss-aware pruning, or None with ``--prune 0``.

    By default (``--prune-from 0``) it starts when the tiers curriculum retires the easy
    examples, or where none retire the epoch after the first growth (``grows_from``,
    ``pruning_after_growth``), else at epoch 1: until then the network is still learning the
    examples pruning would skip. When that is
    so late that the annealing tail leaves no epoch to prune, the run does not prune (its
    plan.json says ``"pruning": null``); a ``--prune-from`` that prunes no epoch is an error."""
    if cfg.prune == 0:
        return None
    if cfg.prune_from < 0:
        raise PruningError(f"--prune-from must be an epoch (0 for automatic), got {cfg.prune_from}")
    start = cfg.prune_from
    retired_from = curriculum.retired_from if curriculum is not None else None
    if start == 0:
        after_growth = pruning_after_growth(grows_from)
        start = max(1, next((e for e in (retired_from, after_growth) if e is not None), 1))
    # Pruning's losses of the retired easy examples are stale, so it stops where they rejoin.
    anneal = max(cfg.prune_anneal, curriculum.rejoined_share if curriculum is not None else 0.0)
    pruner = LossPruner(n_train, cfg.prune, anneal, start, train_cfg.seed)
    if not any(pruner.active(epoch, train_cfg.epochs) for epoch in range(train_cfg.epochs)):
        if cfg.prune_from == 0:
            return None
        raise PruningError(
            f"--prune-from {start} prunes no epoch: --prune-anneal {cfg.prune_anneal:g} keeps "
            f"the epochs from {pruner.first_annealed(train_cfg.epochs)} of {train_cfg.epochs} whole"
        )
    return pruner


def build_diet(
    cfg: CurriculumConfig,
    table: ScoresTable | None,
    data: Data,
    events: list[GrowthEvent],
    train_cfg: TrainConfig,
) -> CurriculumSetup:
    """The run's curriculum and pruner for ``train_cfg.epochs`` epochs, from its options, its
    scores ``table`` (None: no score run) and its growth ``events``; fails before any training."""
    if cfg.curriculum_seed < -1:
        raise CurriculumError(
            f"--curriculum-seed must be -1 (the run's --seed) or a seed >= 0, got {cfg.curriculum_seed}"
        )
    run_id = table.run_id if table is not None else ""
    val_tiers = table.tiers_for(data.val, "val") if table is not None else None
    n = len(data.train)
    grows_from = first_growth(events)
    if not needs_scores(cfg):
        pruner = make_pruner(cfg, train_cfg, None, n, grows_from)
        return CurriculumSetup(None, val_tiers, run_id, "none", cfg.order, pruner)
    if table is None:
        raise CurriculumError(f"--pacing {cfg.pacing} needs difficulty scores (a score_difficulty run)")
    curriculum = make_curriculum(
        table.scores_for(data.train, "train", cfg.difficulty_score),
        table.tiers_for(data.train, "train"),
        epochs=train_cfg.epochs,
        n=n,
        pacing=cfg.pacing,
        order=cfg.order,
        a=cfg.pacing_a,
        b=cfg.pacing_b,
        seed=cfg.curriculum_seed if cfg.curriculum_seed >= 0 else train_cfg.seed,
        boundaries=cfg.boundaries() or growth_boundaries(events, retires_easy(cfg)),
        eval_batch_size=train_cfg.eval_batch_size,
        rejoin=cfg.rejoin,
        hold_back=cfg.hold_back,
    )
    pruner = make_pruner(cfg, train_cfg, curriculum, n, grows_from)
    return CurriculumSetup(curriculum, val_tiers, run_id, cfg.pacing, cfg.order, pruner, cfg.hold_back)

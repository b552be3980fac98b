"""The curriculum's options: which examples each epoch uses (pacing, order, tiers), loss-aware
pruning, and the dynamic run's defaults of both. Every field is a click option and an MLproject
parameter (``pipeline.cli.opt``); ``pipeline/curriculum/diet.py`` builds a run's diet from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.cli import opt
from pipeline.curriculum.checks import CurriculumError

PRUNE_HELP = (
    "loss-aware pruning (InfoBatch): share of the well-learned examples (loss below the mean) "
    "left out each epoch, the rest weighted up; 0: off"
)


@dataclass(frozen=True)
class CurriculumConfig:
    scores_run: str = opt("auto", "score_difficulty run id or runs:/ URI; auto: the newest one for this data")
    pacing: str = opt("none", "none, tiers, linear, quad, root, step, exp, log or self-paced")
    order: str = opt("curriculum", "curriculum (easy first), anti (hard first) or random (matched control)")
    pacing_a: float = opt(0.8, "fraction of training after which all data is in use")
    pacing_b: float = opt(0.2, "fraction of the data in use at the start (pacing functions)")
    tier_boundaries: str = opt(
        "",
        "epochs e1,e2[,e3]: medium joins at e1, hard at e2, easy retires at e3; empty: tied to "
        "growth (e1, e2 before the first growth event)",
    )
    difficulty_score: str = opt("loss", "scores-table column that orders examples by difficulty")
    curriculum_seed: int = opt(
        -1,
        "seed of the random-order control; -1: the run's --seed, so that each seed of a study "
        "draws its own random order (a fixed one would make every control the same permutation)",
    )
    prune: float = opt(0.0, PRUNE_HELP)
    prune_anneal: float = opt(0.125, "final fraction of training that trains on every chosen example")
    rejoin: float = opt(
        0.0,
        "final fraction of training on every example: the easy examples the tiers curriculum "
        "retired rejoin, and pruning stops (0: never)",
    )
    hold_back: float = opt(
        0.0,
        "share of the hardest training examples no epoch uses (the random order holds back as "
        "many at random): under label noise they are mostly wrong labels; 0: none",
    )
    prune_from: int = opt(
        0,
        "first epoch that prunes; 0: when the easy examples retire, else the epoch after the "
        "first growth, else 1; "
        "no pruning if that leaves no epoch before the annealing tail",
    )

    def boundaries(self) -> list[int] | None:
        if not self.tier_boundaries.strip():
            return None
        try:
            return [int(v) for v in self.tier_boundaries.split(",")]
        except ValueError:
            raise CurriculumError(
                f"--tier-boundaries {self.tier_boundaries!r} must be two or three epochs like 3,6 or 3,6,8"
            ) from None


@dataclass(frozen=True)
class DynamicCurriculumConfig(CurriculumConfig):
    # The project's design: easy examples first, harder ones joining as the model grows, and
    # from the epoch after the first growth the grown network skips part of what it has already
    # learned (not in the growth epoch itself: pipeline/curriculum/diet.py's pruning_after_growth).
    # Pruning 0.3 (InfoBatch) leaves out about a fifth of each epoch's examples; on full
    # Fashion-MNIST with the default schedule it ended as accurate as no pruning (seeds 0/1/2:
    # 0.9322/0.9260/0.9302 against 0.9318/0.9260/0.9304) in 0.90x the wall-clock.
    pacing: str = opt("tiers", "none, tiers, linear, quad, root, step, exp, log or self-paced")
    prune: float = opt(0.3, PRUNE_HELP)
    # The easy examples used to retire at the first growth; on CIFAR-10 that broke training (6 to
    # 8 points, pipeline/curriculum/diet.py's growth_boundaries says why), so they stay.
    retire_easy: bool = opt(
        False,
        "the tiers curriculum retires the easy examples at the first growth (with no "
        "--tier-boundaries); false: every example stays, loss-aware pruning skips the learned ones",
    )

"""main's presets: which runs each study makes (data size, epochs, seeds, schedules, the diets
of the dynamic and static runs, the equal-cost and equal-FLOPs comparisons, label noise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from models.schedule import NAMED_SCHEDULES
from pipeline.curriculum.diet import curriculum_pruning, name_label


class Diet(NamedTuple):
    """A run's data diet: pacing, order and the hardest share held back (``--hold-back``)."""

    pacing: str
    order: str
    hold_back: float = 0.0

    def dynamic_label(self) -> str:
        """The diet's part of a dynamic run's name, with the pruning its pacing goes with."""
        return name_label(self.pacing, self.order, curriculum_pruning(self.pacing), self.hold_back)


# The static control every variant is paired with: all data, no curriculum.
BASELINE_DIET = Diet("none", "curriculum")

# The noise preset's curricula hold back the hardest third (the hard tier's size): the score
# step's loss finds 97% of wrong labels at 40% noise (AUC, 5,000-example probe), and 95% of its
# hard tier is flipped there; a third is a curriculum's choice, not the known noise rate.
NOISE_HOLD_BACK = 0.33


@dataclass(frozen=True)
class Preset:
    subset: int
    epochs: int
    seeds: tuple[int, ...]
    schedules: tuple[str, ...]
    # data diets of the dynamic runs; each schedule runs with every one of them
    curricula: tuple[Diet, ...]
    # diets of the static control; BASELINE_DIET is the matched baseline
    static_curricula: tuple[Diet, ...]
    # diets of dynamic runs given the matched baseline's training seconds of the same seed
    # (--budget run:ID:s): the comparison at equal wall-clock, which the Conclusion states
    equal_cost: tuple[Diet, ...] = ()
    # label-noise rates (each its own data, scores and runs) and their kind
    label_noise: tuple[float, ...] = (0.0,)
    noise_kind: str = "symmetric"
    # besides equal epochs, every run again at the static run's training FLOPs (--budget)
    equal_flops: bool = False
    # fractions of the static run's training FLOPs at which the matched static baseline and the
    # equal_cost diets train again, both given the same FLOPs: the comparison at a tight budget
    budget_fractions: tuple[float, ...] = ()


PRESETS = {
    # The full study's shape, small enough for a laptop (13 min 47 s on 2 idle cores, timed
    # whole with scripts/run): the full study's 12 epochs and
    # schedule, so growth, the curriculum's stages and pruning fall where they do there, on
    # 10,000 training examples rather than on short runs (the old preset, 4,000 examples for 6
    # epochs, squeezed growth and the curriculum into too few epochs and showed every curriculum
    # variant 3 points below static). Static, the default dynamic variant, its random-order
    # control and the dynamic variant given static's seconds, three seeds. Too small to tell the
    # full study's direction (smoke_caveat): on its data the quarter-budget line once read -0.29
    # points (CI -0.51 to -0.07, seeds 110-112) where the full study read +0.37.
    # And the two again at a quarter of static's training FLOPs: where the full-data frontier
    # (seeds 100-104, docs/measurements.md) found the grown network ahead, chosen from it
    # and not from this preset's seeds.
    "quick": Preset(
        subset=10000,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=("default",),
        curricula=(Diet("tiers", "curriculum"), Diet("tiers", "random")),
        static_curricula=(BASELINE_DIET,),
        equal_cost=(Diet("tiers", "curriculum"),),
        budget_fractions=(0.25,),
    ),
    # The study: full data, every named schedule with and without the curriculum, both
    # controls, and the curriculum alone on the static network; and the quarter budget.
    "full": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=tuple(s for s in NAMED_SCHEDULES if s != "none"),
        curricula=(
            Diet("none", "curriculum"),
            Diet("tiers", "curriculum"),
            Diet("tiers", "random"),
            Diet("tiers", "anti"),
        ),
        static_curricula=(BASELINE_DIET, Diet("tiers", "curriculum")),
        equal_cost=(Diet("tiers", "curriculum"),),
        budget_fractions=(0.25,),
    ),
    # Where curricula are said to shine (Wu et al., ICLR 2021: under 20-60% label noise the
    # easy-to-hard curriculum beat random order by a wide margin): at 0, 20 and 40% symmetric
    # noise, five seeds, at equal epochs and again at the static run's training FLOPs, static;
    # the dynamic run with an easy-first linear pacing that never uses the hardest third (the
    # tiers curriculum of the time retired the easy examples, which under noise leaves a diet of
    # mostly wrong labels: 12 points below static at 40%); its random-order control, which holds
    # back a random third; and static holding back the same hardest third, which tells
    # holding back from ordering and growth. Full data: hours on 2 cores.
    "noise": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2, 3, 4),
        schedules=("default",),
        curricula=(
            Diet("linear", "curriculum", NOISE_HOLD_BACK),
            Diet("linear", "random", NOISE_HOLD_BACK),
        ),
        static_curricula=(BASELINE_DIET, Diet("none", "curriculum", NOISE_HOLD_BACK)),
        label_noise=(0.0, 0.2, 0.4),
        noise_kind="symmetric",
        equal_flops=True,
    ),
}


# The size at which the README's figures were measured; below it main says what it cannot tell.
FULL_STUDY_SEEDS = 5


def smoke_caveat(preset: Preset) -> str:
    """What a preset smaller than the full study cannot tell, said under its Conclusion: its
    lines describe its own runs, and their direction need not be the full study's."""
    if preset.subset == 0 and len(preset.seeds) >= FULL_STUDY_SEEDS:
        return ""
    data = "all examples" if preset.subset == 0 else f"{preset.subset:,} examples a split"
    return (
        f"Too small to tell: {len(preset.seeds)} seed(s) on {data}. These lines say what these runs "
        "did, not which way the full study goes (on the quick preset's data one line once read "
        "-0.29 points where the full study read +0.37); the answer is `study` on full data with "
        f"{FULL_STUDY_SEEDS} or more seeds (README, Results)."
    )

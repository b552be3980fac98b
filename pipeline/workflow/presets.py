"""main's presets: the studies each one runs. A preset is a study's grid (arms, each at its
budgets, and seeds) on a data size and length, run once per growth schedule and per label-noise
level; ``pipeline/study/grid.py`` says what each arm and budget is.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.schedule import NAMED_SCHEDULES

# The start network each named schedule grows (the one it names its positions after); the
# others grow the default start, ``minimal``.
SCHEDULE_STARTS = {
    "default-bn": "minimal-bn",
    "resnet": "resnet-start",
    "resnet-widen": "resnet-narrow",
    "resnet-short": "resnet-short-start",
    "resnet-short-widen": "resnet-short-narrow",
    "resnet-short-whiten-widen": "resnet-short-whiten-narrow",
    "short-convs-widen": "short-convs-narrow",
}


def start_of(schedule: str) -> str:
    return SCHEDULE_STARTS.get(schedule, "minimal")


@dataclass(frozen=True)
class Preset:
    subset: int
    epochs: int
    seeds: tuple[int, ...]
    schedules: tuple[str, ...]  # one study each, every one with the same grid
    # the study's --arms and --budgets: what trains, and at what cost (an arm with @ names its own)
    arms: str
    budgets: str
    # label-noise rates (each its own data, scores and studies) and their kind
    label_noise: tuple[float, ...] = (0.0,)
    noise_kind: str = "symmetric"


PRESETS = {
    # The full study's shape, small enough for a laptop (about 14 min on 2 idle cores): the full
    # study's 12 epochs and schedule, so growth, the curriculum's stages and pruning fall where
    # they do there, on 10,000 training examples rather than on short runs (the old preset, 4,000
    # examples for 6 epochs, squeezed growth and the curriculum into too few epochs and showed
    # every curriculum variant 3 points below static). Static; the growing network with the
    # default curriculum at equal epochs, at static's seconds and at a quarter of static's
    # training FLOPs (static trains again at that quarter); its random-order control at equal
    # epochs; three seeds. Too small to tell the full study's direction (smoke_caveat): on its
    # data the quarter-budget line once read -0.29 points (CI -0.51 to -0.07, seeds 110-112)
    # where the full study read +0.37. The quarter: where the full-data frontier (seeds 100-104,
    # docs/measurements.md) found the grown network ahead, chosen from it, not from these seeds.
    "quick": Preset(
        subset=10000,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=("default",),
        arms="static,dynamic,dynamic-random@epochs",
        budgets="epochs,seconds,flops:0.25",
    ),
    # The study: full data, every named schedule (one study each, each with its own static
    # reference); at equal epochs growth alone, the curriculum alone (static on the growing
    # arm's diet), the default, and both order controls; the default again at static's seconds
    # and at a quarter of static's FLOPs.
    "full": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=tuple(s for s in NAMED_SCHEDULES if s != "none"),
        arms=(
            "static,static-curriculum@epochs,dynamic-growth-only@epochs,dynamic,"
            "dynamic-random@epochs,dynamic-anti@epochs"
        ),
        budgets="epochs,seconds,flops:0.25",
    ),
    # Where curricula are said to shine (Wu et al., ICLR 2021: under 20-60% label noise the
    # easy-to-hard curriculum beat random order by a wide margin): at 0, 20 and 40% symmetric
    # noise, five seeds, at equal epochs and again at the static run's training FLOPs, static;
    # the growing network with an easy-first linear pacing that never uses the hardest third
    # (the tiers curriculum of the time retired the easy examples, which under noise leaves a
    # diet of mostly wrong labels: 12 points below static at 40%); its random-order control,
    # which holds back a random third; and static holding back the same hardest third, which
    # tells holding back from ordering and growth. Full data: hours on 2 cores.
    "noise": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2, 3, 4),
        schedules=("default",),
        arms="static,static-hold-back,dynamic-hold-back,dynamic-hold-back-random",
        budgets="epochs,flops:1",
        label_noise=(0.0, 0.2, 0.4),
        noise_kind="symmetric",
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

"""A study's grid: its arms (what trains), its budgets (how long) and its seeds, and the cells
they make, one training run each. Pure: no MLflow, no Optuna, no data.

Budgets are relative to the study's reference cell, static at ``--epochs`` of the same seed:

- ``epochs``: ``--epochs`` each, the arms' equal-epochs comparison;
- ``flops:F``: F times the reference run's training FLOPs (computed before training: they are
  a function of the network and the data), so ``flops:1`` is equal compute;
- ``seconds``: the seconds that trained of the same seed's reference run (``--budget
  run:ID:s``), the comparison at equal wall-clock on this machine; the static arm has none (its
  reference is that run).

Static at ``flops:1`` is the reference run too (the same training to the same step), so it is
not trained twice: comparisons at ``flops:1`` are set against the reference.

An arm trains at every budget of ``--budgets`` unless it names its own (``dynamic-random@epochs``,
``dynamic@epochs+seconds+flops:0.25``): a control need not be repeated at every cost.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from pipeline.cli import ConfigError
from pipeline.curriculum.config import DynamicCurriculumConfig

REFERENCE_ARM = "static"
REFERENCE_BUDGET = "epochs"
MAX_SEEDS = 1000  # far beyond any study's; a typo like 300-3000000 is refused, not expanded


@dataclass(frozen=True)
class Arm:
    """One arm: the training step it runs and the options it sets on top of the study's."""

    name: str
    kind: str  # "static" (train_static on the network the growth ends in) or "dynamic"
    about: str
    # CurriculumConfig options of a static arm, DynamicCurriculumConfig options of a growing one
    curriculum: dict = field(default_factory=dict)
    growth: dict = field(default_factory=dict)  # GrowthConfig options over the study's
    train: dict = field(default_factory=dict)  # TrainConfig options over the study's recipe
    # A static arm whose curriculum's tiers and pruning start fall where the study's schedule
    # grows (``diet_of_growth``): the growing arm's diet without the growth.
    diet_of_growth: bool = False
    only: tuple[Budget, ...] = ()  # the budgets it trains at, where not every one of --budgets
    # The arm this one is the control of (a random order for a curriculum): where both train,
    # the report also sets that arm against this one directly (``control_comparisons``).
    control_of: str = ""

    @property
    def is_reference(self) -> bool:
        return self.name == REFERENCE_ARM

    def budgets(self, asked: tuple[Budget, ...]) -> tuple[Budget, ...]:
        """The budgets it trains at: its own where it names them, else ``asked``."""
        return self.only or asked


# The label-noise arms hold back the hardest third, the hard tier's size: the score step's loss
# finds 97% of wrong labels at 40% noise (AUC, 5,000-example probe), and 95% of its hard tier is
# flipped there; a third is a curriculum's choice, not the known noise rate.
NOISE_HOLD_BACK = 0.33


# One registry of the arms a study can train; a lever is one more entry here.
ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("static", "static", "the network the growth ends in, trained whole from the start"),
        Arm("dynamic", "dynamic", "the growing network with the default curriculum"),
        Arm(
            "dynamic-random",
            "dynamic",
            "the curriculum's control: the same pacing and pruning, examples in a random order",
            curriculum={"order": "random"},
            control_of="dynamic",
        ),
        Arm(
            "dynamic-anti",
            "dynamic",
            "the curriculum reversed: the same pacing and pruning, the hardest examples first",
            curriculum={"order": "anti"},
            control_of="dynamic",
        ),
        Arm(
            "dynamic-growth-only",
            "dynamic",
            "growth alone: every example every epoch, no pruning",
            curriculum={"pacing": "none", "prune": 0.0},
        ),
        Arm(
            "static-curriculum",
            "static",
            "the curriculum alone: the final network, static, on the growing arm's diet (its tiers "
            "and pruning start where the schedule grows), which tells the curriculum from growth",
            curriculum={"pacing": "tiers", "prune": DynamicCurriculumConfig.prune},
            diet_of_growth=True,
        ),
        Arm(
            "static-hold-back",
            "static",
            f"static holding back the hardest {NOISE_HOLD_BACK:g} of the examples, which tells "
            "holding back from ordering and growth",
            curriculum={"hold_back": NOISE_HOLD_BACK},
        ),
        Arm(
            "dynamic-hold-back",
            "dynamic",
            f"easy first at a linear pace, never using the hardest {NOISE_HOLD_BACK:g} (for noisy "
            "labels, where curricula are said to shine)",
            curriculum={"pacing": "linear", "hold_back": NOISE_HOLD_BACK},
        ),
        Arm(
            "dynamic-hold-back-random",
            "dynamic",
            f"dynamic-hold-back's control: the same pacing, a random {NOISE_HOLD_BACK:g} held back "
            "and a random order",
            curriculum={"pacing": "linear", "order": "random", "hold_back": NOISE_HOLD_BACK},
            control_of="dynamic-hold-back",
        ),
        Arm(
            "dynamic-preserve",
            "dynamic",
            "new layers start as identities (a zero batchnorm scale in a residual block)",
            growth={"growth_init": "preserve"},
        ),
    )
}


@dataclass(frozen=True, order=True)
class Budget:
    kind: str  # epochs, flops or seconds
    fraction: float = 1.0  # of the reference run's FLOPs (flops only)

    @property
    def label(self) -> str:
        return f"flops:{self.fraction:g}" if self.kind == "flops" else self.kind

    @property
    def static_trains(self) -> bool:
        """Whether the static arm has a cell of its own at this budget: not at its own seconds
        or its own FLOPs, which are the reference run's."""
        return self.kind == "epochs" or (self.kind == "flops" and self.fraction != 1.0)


def parse_budget(text: str) -> Budget:
    text = text.strip()
    if text in ("epochs", "seconds"):
        return Budget(text)
    kind, _, value = text.partition(":")
    if kind == "flops":
        try:
            fraction = float(value)
        except ValueError:
            fraction = math.nan
        # A cell's key names its budget to 6 significant digits: a share that needs more would
        # share a key with another, or (1.0000001) pass for the reference itself.
        if math.isfinite(fraction) and fraction > 0 and float(f"{fraction:g}") == fraction:
            return Budget("flops", fraction)
    raise ConfigError(
        f"--budgets: {text!r} is not a budget; use epochs, seconds or flops:F with F > 0 and "
        "at most 6 significant digits "
        "(a share of the static reference run's FLOPs)"
    )


def parse_seeds(text: str) -> tuple[int, ...]:
    """``300-304``, ``300,302`` or a mix (``300-302,310``); each seed once, in order."""
    seeds: dict[int, None] = {}  # ordered, each once
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, dash, last = part.partition("-")
        try:
            span = range(int(first), int(last) + 1) if dash else [int(first)]
        except ValueError:
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range like 300-304") from None
        if len(seeds) + len(span) > MAX_SEEDS:
            raise ConfigError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds; a study trains every one")
        seeds.update(dict.fromkeys(span))
    if not seeds:
        raise ConfigError("--seeds is empty: name the seeds the study trains, e.g. 300-304")
    if any(not 0 <= s < 2**32 for s in seeds):
        raise ConfigError(f"--seeds {text!r}: seeds must be in 0 .. 2^32 - 1")
    return tuple(seeds)


def parse_arms(text: str) -> tuple[Arm, ...]:
    """``static,dynamic,dynamic-random@epochs``: the arms, each once, an arm with ``@`` limited
    to the budgets it names (``+`` between them)."""
    chosen: dict[str, Arm] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, at, own = (s.strip() for s in part.partition("@"))
        if name not in ARMS:
            raise ConfigError(f"--arms: unknown arm {name!r} (known: {', '.join(ARMS)})")
        if name in chosen:
            raise ConfigError(f"--arms {text!r}: {name} is named twice")
        only = tuple(dict.fromkeys(parse_budget(b) for b in own.split("+"))) if at else ()
        if at and name == REFERENCE_ARM and Budget(REFERENCE_BUDGET) not in only:
            only = (Budget(REFERENCE_BUDGET), *only)  # the reference always trains
        chosen[name] = dataclasses.replace(ARMS[name], only=only)
    if REFERENCE_ARM not in chosen:
        raise ConfigError(f"--arms {text!r}: include {REFERENCE_ARM}, the reference every budget is set by")
    return tuple(chosen.values())


@dataclass(frozen=True)
class Cell:
    arm: str
    budget: Budget
    seed: int

    @property
    def key(self) -> str:
        """The cell's name in the store: ``dynamic@flops:0.5#300``."""
        return f"{self.arm}@{self.budget.label}#{self.seed}"

    @property
    def reference(self) -> Cell:
        return Cell(REFERENCE_ARM, Budget(REFERENCE_BUDGET), self.seed)

    @property
    def needs_reference_run(self) -> bool:
        """Its budget is the reference run's seconds, so that run must have finished first."""
        return self.budget.kind == "seconds"

    @staticmethod
    def from_key(key: str) -> Cell:
        arm, _, rest = key.partition("@")
        budget, _, seed = rest.rpartition("#")
        return Cell(arm, parse_budget(budget), int(seed))


def _asked(arm: Arm, budgets: tuple[Budget, ...]) -> tuple[Budget, ...]:
    """The budgets an arm trains at: the reference's own first, then those asked for (of
    the reference, only those it does not already train at as the reference run)."""
    if not arm.is_reference:
        return tuple(dict.fromkeys(arm.budgets(budgets)))
    own = (b for b in arm.budgets(budgets) if b.static_trains)
    return tuple(dict.fromkeys((Budget(REFERENCE_BUDGET), *own)))


def cells(arms: tuple[Arm, ...], budgets: tuple[Budget, ...], seeds: tuple[int, ...]) -> list[Cell]:
    """Every cell of the grid, in the order workers should take them: each seed's reference
    first (the seconds cells wait for it), then the other cells seed by seed, the seconds cells
    last (by then their references have long finished). The reference trains whatever the
    budgets; every other cell is one the budgets ask for."""
    grid = [Cell(arm.name, budget, seed) for seed in seeds for arm in arms for budget in _asked(arm, budgets)]
    return sorted(grid, key=lambda c: (c != c.reference, c.needs_reference_run, seeds.index(c.seed)))


def budget_option(cell: Cell, reference_flops: float, reference_run_id: str) -> str:
    """The training step's ``--budget`` for a cell ('' trains ``--epochs``)."""
    if cell.budget.kind == "epochs":
        return ""
    if cell.budget.kind == "flops":
        return f"{cell.budget.fraction * reference_flops:.17g}flops"
    if not reference_run_id:
        raise ValueError(f"cell {cell.key} needs its reference run's id")
    return f"run:{reference_run_id}:s"


@dataclass(frozen=True)
class Comparison:
    """One arm at one budget against the run it is matched to, paired by seed: static's, or
    the arm's control's (``Arm.control_of``) at the same budget."""

    arm: str
    budget: Budget
    against: Budget  # the budget of the run it is set against
    against_arm: str = REFERENCE_ARM

    @property
    def name(self) -> str:
        return f"{self.arm}@{self.budget.label} vs {self.against_arm}@{self.against.label}"

    @property
    def key(self) -> str:
        """The comparison as a metric's path: ``dynamic/epochs``, or against a control
        ``dynamic/epochs/vs-dynamic-random``."""
        key = f"{self.arm}/{self.budget.label.replace(':', '')}"
        return key if self.against_arm == REFERENCE_ARM else f"{key}/vs-{self.against_arm}"


def comparisons(arms: tuple[Arm, ...], budgets: tuple[Budget, ...]) -> list[Comparison]:
    """Every arm but the reference, at each of its budgets, against static at the same budget
    where static trains at it (equal epochs, a share of its FLOPs), else against the reference
    run (its seconds: equal wall-clock; its FLOPs: equal compute). The study's family: what a
    confirmation preregisters and Holm corrects over."""
    reference = next(a for a in arms if a.is_reference)
    static_budgets = set(_asked(reference, budgets))
    out = []
    for arm in arms:
        if arm.is_reference:
            continue
        for budget in _asked(arm, budgets):
            against = budget if budget in static_budgets else Budget(REFERENCE_BUDGET)
            out.append(Comparison(arm.name, budget, against))
    return out


def control_comparisons(arms: tuple[Arm, ...], budgets: tuple[Budget, ...]) -> list[Comparison]:
    """Each arm that another arm of the study is the control of (``Arm.control_of``) against
    that control, at each budget both train at: the curriculum against a random order, matched
    on everything but the order. Outside the family of ``comparisons`` (static cancels in them,
    so they follow from it): reported beside it, corrected among themselves."""
    named = {arm.name: arm for arm in arms}
    out = []
    for control in arms:
        controlled = named.get(control.control_of)
        if controlled is None:
            continue
        shared = [b for b in _asked(controlled, budgets) if b in _asked(control, budgets)]
        out += [Comparison(controlled.name, budget, budget, control.name) for budget in shared]
    return out

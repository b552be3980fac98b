"""A training run's health: did it learn, dip, die or diverge? A pure function of the per-epoch
history and the growth events, so a resumed run is judged on the same numbers; no MLflow inside.

Verdicts, worst first:

- ``diverged``: the loss became non-finite (the loop raises ``DivergenceError``; the run fails).
- ``collapsed``: validation accuracy sits at chance (what always predicting the most frequent
  class scores) after having been clearly above it, or the network predicts one class for
  (nearly) everything, for ``COLLAPSE_PATIENCE`` epochs in a row or at the run's end. A
  plain network whose ReLUs all died this way (loss exactly ln C) does not come back.
- ``dipped``: validation accuracy fell by more than ``--dip-margin`` from one epoch to the next
  (at a growth event, a curriculum stage change, or anywhere), whether or not it recovered.
- ``ok``: none of these.

Each drop is attributed to what changed at the start of its epoch: the growth events applied
then, a curriculum stage change, or the easy tier's retirement.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

VERDICTS = ("ok", "dipped", "collapsed", "diverged")
# Consecutive epochs at chance that make a run collapsed (and stop it): one such epoch can be a
# bad step that the next epoch repairs; two in a row, after having learned, is a dead network.
COLLAPSE_PATIENCE = 2
# "At chance": within this much validation accuracy of the constant prediction's.
CHANCE_MARGIN = 0.05
# "Clearly above chance": the run once stood this far above it, so falling back is a collapse.
LEARNED_MARGIN = 2 * CHANCE_MARGIN
# One predicted class for at least this share of the validation split: a constant prediction.
CONSTANT_SHARE = 0.99


@dataclass(frozen=True)
class Drop:
    """Validation accuracy falling from one epoch's end to the next one's."""

    epoch: int  # the (0-based) epoch at whose end accuracy is lower
    before: float
    after: float
    cause: str  # what changed at the start of ``epoch``: "after growth (...)", ...
    recovered: bool  # a later epoch got back to ``before`` (within the dip margin)

    @property
    def size(self) -> float:
        return self.before - self.after

    def describe(self) -> str:
        back = "recovered" if self.recovered else "not recovered"
        # Epochs counted from 1, as the learning curves and the progress bar count them.
        return (
            f"val/acc {self.before:.3f} -> {self.after:.3f} in epoch {self.epoch + 1} ({self.cause}; {back})"
        )


@dataclass(frozen=True)
class Health:
    verdict: str
    worst: Drop | None  # the largest drop over the dip margin, if any
    collapsed_at: int | None  # the first epoch of the run's final stretch at chance
    growth_dips: dict[int, float]  # growth epoch -> val/acc at its end minus the epoch before's

    def describe(self) -> str:
        """One line: the verdict and its evidence."""
        if self.verdict == "collapsed":
            return f"collapsed: validation accuracy at chance from epoch {self.collapsed_at + 1}" + (
                f"; {self.worst.describe()}" if self.worst else ""
            )
        if self.verdict == "dipped":
            return f"dipped: {self.worst.describe()}"
        return self.verdict

    def metrics(self) -> dict[str, float]:
        """Run-level ``health/...`` metrics: the worst drop, and growth's dips."""
        out = {"health/collapsed": float(self.verdict == "collapsed")}
        if self.worst is not None:
            out.update(
                {
                    "health/worst_drop": self.worst.size,
                    "health/worst_drop_epoch": float(self.worst.epoch),
                    "health/worst_drop_recovered": float(self.worst.recovered),
                }
            )
        if self.growth_dips:
            dips = list(self.growth_dips.values())
            out["growth/dip_median"] = statistics.median(dips)
            out["growth/dip_worst"] = min(dips)
        return out

    def tags(self) -> dict[str, str]:
        return {"health": self.verdict, "health_detail": self.describe()}


def top_share(values) -> float:
    """The share of the most frequent value of ``values`` (a 1-d int tensor): of labels, the
    accuracy of always predicting the most frequent class (chance); of predictions, how close
    the network is to predicting one class for everything."""
    counts = values.bincount()
    return float(counts.max()) / max(1, int(counts.sum()))


def at_chance(row: dict, chance: float, peak: float) -> bool:
    """Whether an epoch's validation shows a dead network: accuracy at chance after having
    been clearly above it, or one class predicted for (nearly) everything."""
    acc = row["val/acc"]
    if acc > chance + CHANCE_MARGIN:
        return False
    return peak >= chance + LEARNED_MARGIN or row.get("val/top_class_share", 0.0) >= CONSTANT_SHARE


def collapse_start(history: list[dict], chance: float) -> int | None:
    """The first epoch of the epochs at chance that the history ends with; None when its last
    epoch is not at chance."""
    peak, dead_since = -math.inf, None
    for row in history:
        if at_chance(row, chance, peak):
            dead_since = row["epoch"] if dead_since is None else dead_since
        else:
            dead_since = None
        peak = max(peak, row["val/acc"])
    return dead_since


def should_stop(history: list[dict], chance: float) -> bool:
    """Collapsed for ``COLLAPSE_PATIENCE`` epochs in a row: the rest of the budget is wasted."""
    start = collapse_start(history, chance)
    return start is not None and history[-1]["epoch"] - start + 1 >= COLLAPSE_PATIENCE


def assess(history: list[dict], events: list[dict], chance: float, dip_margin: float) -> Health:
    """The run's verdict from its per-epoch history (``epoch``, ``val/acc``, optionally
    ``val/top_class_share`` and ``curriculum/...``) and its growth events (each with ``epoch``)."""
    drops = [
        _drop(history, i, events, dip_margin)
        for i in range(1, len(history))
        if history[i - 1]["val/acc"] - history[i]["val/acc"] > dip_margin
    ]
    worst = max(drops, key=lambda d: d.size, default=None)
    acc = {row["epoch"]: row["val/acc"] for row in history}
    dips = {
        e: acc[e] - acc[e - 1]
        for e in sorted({int(ev["epoch"]) for ev in events})
        if e in acc and e - 1 in acc
    }
    dead = collapse_start(history, chance)
    if dead is not None:  # the final stretch at chance reaches the end: the run ended dead
        return Health("collapsed", worst, dead, dips)
    return Health("dipped" if drops else "ok", worst, None, dips)


def judge(state, val_labels, dip_margin: float) -> Health:
    """``assess`` of a training state (its history and growth events), chance taken from the
    validation labels ``val_labels``: what a finished run, a tune trial and a screen report."""
    return assess(state.history, state.trace.events, top_share(val_labels), dip_margin)


def _drop(history: list[dict], i: int, events: list[dict], dip_margin: float) -> Drop:
    before, after = history[i - 1]["val/acc"], history[i]["val/acc"]
    epoch = history[i]["epoch"]
    recovered = any(row["val/acc"] >= before - dip_margin for row in history[i + 1 :])
    return Drop(epoch, before, after, _cause(history[i - 1], history[i], events), recovered)


EASY_SHARE = "curriculum/tier_easy_share"


def _cause(previous: dict, row: dict, events: list[dict]) -> str:
    """What changed at the start of ``row``'s epoch."""
    causes = []
    grown = [ev for ev in events if int(ev["epoch"]) == row["epoch"]]
    if grown:
        causes.append("growth (" + ", ".join(_event_layer(ev) for ev in grown) + ")")
    stage, before = row.get("curriculum/stage"), previous.get("curriculum/stage")
    if stage is not None and stage != before:
        if (
            previous.get("curriculum/tier_easy_share", 0) > 0
            and row.get("curriculum/tier_easy_share", 1) == 0
        ):
            causes.append("the easy tier's retirement")
        else:
            causes.append(f"curriculum stage {int(stage)}")
    return "after " + " and ".join(causes) if causes else "with no growth or curriculum change before it"


def _event_layer(event: dict) -> str:
    layer = event.get("layer")
    return str(event.get("layer_id") or (layer.get("id") if isinstance(layer, dict) else None) or "?")

"""tune's search space: an Optuna trial -> a growth schedule, a curriculum pacing and a learning rate.

Pure: no MLflow, no training. ``suggest`` asks the trial for every choice and returns a
``Candidate``; ``check`` says whether the candidate can be trained (the schedule's every stage
builds) and raises ``GrowthError`` with one line naming the reason when it cannot, so tune
records such a trial as pruned without training it.

The schedule has ``n_growth`` events (0 .. ``max_events``), one per slot ``growth<k>``, each a
layer type and the epoch before which it is inserted. Slots are applied in order of their
epochs (ties keep slot order), so any draw of epochs is a valid order. Layers go to their
type's default place: feature-map layers (conv, pool, batchnorm, residual) after the last of
those, fc and dropout just before the head. Each type's size is searched where its entry in
models/layers/ has a ``Search`` (conv channels, fc features, dropout p), from a small set
rather than a range: the networks are small, and a categorical choice keeps every trial's
architecture one of a few comparable widths. The one invalid kind left in this space is a
schedule with more pools than the input can halve (28x28 takes 4 halvings; minimal uses two).

Parameter names are stable; they are the columns of the study's trials table:

    n_growth, growth<k>_epoch, growth<k>_layer, growth<k>_channels | _features | _p,
    pacing, pacing_a (pacing != none), pacing_b (pacing functions and self-paced), lr
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import optuna

from models.layers import GROWABLE_TYPES, LAYERS
from models.schedule import GrowthEvent, validate_schedule
from models.spec import ArchSpec
from pipeline.cli import ConfigError
from pipeline.curriculum.pacing import PACINGS
from pipeline.curriculum.strategies import CURRICULUM_PACINGS

# tune's default --layer-types: every type whose entry says it is searched.
DEFAULT_LAYER_TYPES = ",".join(name for name, kind in LAYERS.items() if kind.searched)
PACING_A = (0.3, 1.0)  # all data in use after this fraction of training
PACING_B = (0.1, 0.6)  # fraction of the data in use at the start
# Pacings whose b (starting fraction) matters.
PACINGS_WITH_B = (*PACINGS, "self-paced")


@dataclass(frozen=True)
class SearchSpace:
    """What the study searches; every field is stored with the study so workers agree on it."""

    epochs: int  # fixed per trial: the budget a trial may use (Hyperband's max resource)
    max_events: int
    layer_types: tuple[str, ...]
    pacings: tuple[str, ...]
    lr_low: float
    lr_high: float

    def validate(self) -> SearchSpace:
        unknown = [t for t in self.layer_types if t not in GROWABLE_TYPES]
        if unknown or not self.layer_types:
            raise ConfigError(
                f"--layer-types {','.join(self.layer_types)!r}: use some of {', '.join(GROWABLE_TYPES)}"
            )
        unknown = [p for p in self.pacings if p not in CURRICULUM_PACINGS]
        if unknown or not self.pacings:
            raise ConfigError(
                f"--pacings {','.join(self.pacings)!r}: use some of {', '.join(CURRICULUM_PACINGS)}"
            )
        if self.max_events < 0:
            raise ConfigError(f"--max-events must be 0 or more, got {self.max_events}")
        if self.max_events > 0 and self.epochs < 2:
            raise ConfigError(
                f"--max-events {self.max_events} needs --epochs >= 2 (growth happens between "
                f"epochs); got --epochs {self.epochs}, or pass --max-events 0"
            )
        if not 0 < self.lr_low <= self.lr_high:
            raise ConfigError(
                f"learning-rate range [{self.lr_low}, {self.lr_high}] must be positive and ordered"
            )
        return self

    def to_dict(self) -> dict:
        return {
            "epochs": self.epochs,
            "max_events": self.max_events,
            "layer_types": list(self.layer_types),
            "pacings": list(self.pacings),
            "lr_low": self.lr_low,
            "lr_high": self.lr_high,
        }


@dataclass(frozen=True)
class Candidate:
    """One trial's choices, before any check."""

    events: tuple[GrowthEvent, ...]
    pacing: str
    pacing_a: float | None  # None: the pacing does not use it
    pacing_b: float | None
    lr: float

    def schedule(self) -> str:
        """The compact schedule string, which ``parse_schedule`` (``--schedule``) reads back."""
        return ";".join(event.to_compact() for event in self.events)


def split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _layer(trial: optuna.trial.BaseTrial, slot: int, kind: str) -> dict:
    search = LAYERS[kind].search
    if search is None:  # pool (max, 2x2), batchnorm and residual have nothing else to choose
        return {"type": kind}
    name = f"growth{slot}_{search.param}"
    if search.span is not None:
        value = round(trial.suggest_float(name, *search.span), 3)
    else:
        value = trial.suggest_categorical(name, search.choices)
    return {"type": kind, search.field: value}


def suggest(trial: optuna.trial.BaseTrial, space: SearchSpace) -> Candidate:
    """Ask ``trial`` for one candidate of ``space`` (define-by-run: only the parameters it uses)."""
    n_events = trial.suggest_int("n_growth", 0, space.max_events) if space.max_events else 0
    slots = []
    for slot in range(1, n_events + 1):
        epoch = trial.suggest_int(f"growth{slot}_epoch", 1, space.epochs - 1)
        kind = trial.suggest_categorical(f"growth{slot}_layer", space.layer_types)
        slots.append((epoch, slot, _layer(trial, slot, kind)))
    events = tuple(GrowthEvent(epoch, layer) for epoch, _, layer in sorted(slots, key=lambda s: s[:2]))
    pacing = (
        trial.suggest_categorical("pacing", space.pacings) if len(space.pacings) > 1 else space.pacings[0]
    )
    a = round(trial.suggest_float("pacing_a", *PACING_A), 4) if pacing != "none" else None
    b = round(trial.suggest_float("pacing_b", *PACING_B), 4) if pacing in PACINGS_WITH_B else None
    if space.lr_low == space.lr_high:
        lr = space.lr_low
    else:
        lr = trial.suggest_float("lr", space.lr_low, space.lr_high, log=True)
    return Candidate(events, pacing, a, b, lr)


def check(candidate: Candidate, start: ArchSpec, epochs: int) -> ArchSpec:
    """The candidate's final spec; raises GrowthError (one line) when a stage cannot be built."""
    return validate_schedule(start, candidate.events, epochs)


def describe(spec: ArchSpec) -> str:
    """A short architecture string for tables: ``conv1(32) pool1 conv2(64) fc1(128) drop1(0.3)``."""
    parts = []
    for layer in spec.layers:
        search = LAYERS[layer["type"]].search
        size = search.field if search is not None else None
        parts.append(f"{layer['id']}({layer[size]})" if size else layer["id"])
    return " ".join(parts)


def restrict_pacings(requested: Sequence[str], have_scores: bool) -> tuple[str, ...]:
    """The pacings the study can honestly search: without difficulty scores only ``none``."""
    if have_scores:
        return tuple(requested)
    return ("none",) if "none" in requested else ()

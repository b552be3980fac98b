"""The growth schedule: events that each insert a layer before an epoch, their forms, the named
schedules, and the specs a schedule passes through (checked against the run's epochs);
models/growth.py grows a model by one event.

A growing model starts from a spec (usually the ``minimal`` one) and, before chosen epochs,
gains one layer per event. Epochs count from 0, as in the training loop: an event at epoch
``e`` is applied before epoch ``e`` runs, i.e. after ``e`` epochs of training, so ``e`` must lie
in ``1 .. epochs - 1``. Several events may share an epoch; they apply in schedule order.

A schedule is data. ``parse_schedule`` accepts three forms:

* a registered name (``NAMED_SCHEDULES``: default, early, late, deep, wide-fc, default-bn,
  resnet, none), a function of the number of epochs;
* a JSON list of flat objects, the layer as in a spec plus ``epoch`` and optional ``position``
  and ``id``: ``[{"epoch": 3, "type": "conv", "out_channels": 64, "position": "after:pool1"}]``;
* a compact string, events separated by ``;``::

      event    := EPOCH ":" [ID "="] TYPE ["(" args ")"] ["@" POSITION]
      args     := value ("," value)*  [ "," key "=" value ... ]   (positional values first)
      POSITION := "after:" ID | "before:" ID | "head"

  Positional values fill the type's fields in the order of its ``LayerType.fields``
  (models/layers/; conv: out_channels, kernel_size; pool: kind, size; dropout: p; fc:
  out_features). Example: ``3:conv(64)@after:pool1;5:res1=residual@after:pool2;7:dropout(0.3)``.

Without a position, feature-map layers (``LayerType.feature_map``: conv, pool, ...) go after
the last feature-map layer (before the first fc), and the others (fc, dropout) just before the
head. Without an id, one is generated from the type's ``id_prefix``: conv2, pool2, res1, drop1
(one past the highest number in use).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models import resnet
from models.errors import UserError
from models.layers import GROWABLE_TYPES, LAYER_TYPES, LAYERS
from models.spec import HEAD_ID, ArchSpec, SpecError, infer_shapes, normalise_layer


class GrowthError(UserError):
    """A schedule or growth event that cannot work; one line naming the event and the reason."""


@dataclass(frozen=True)
class GrowthEvent:
    """Insert ``layer`` (a spec layer without its id: type and fields) before epoch ``epoch``."""

    epoch: int
    layer: dict
    position: str | None = None  # after:<id>, before:<id> or head; None: the type's default place
    id: str | None = None  # None: generated from the type (conv2, res1, ...)

    def __post_init__(self) -> None:
        if not isinstance(self.epoch, int) or isinstance(self.epoch, bool):
            raise GrowthError(f"growth epoch must be an integer, got {self.epoch!r}")
        if not isinstance(self.layer, dict) or not isinstance(self.layer.get("type"), str):
            raise GrowthError(f"growth event at epoch {self.epoch}: layer {self.layer!r} needs a 'type'")
        layer = dict(self.layer)  # a private copy: the event must not change under its owner
        if "id" in layer:  # the id may ride in the layer, as in a spec; it is kept apart here
            layer_id = layer.pop("id")
            if self.id is not None and self.id != layer_id:
                raise GrowthError(
                    f"growth event at epoch {self.epoch}: two ids, {layer_id!r} and {self.id!r}"
                )
            object.__setattr__(self, "id", layer_id)
        object.__setattr__(self, "layer", layer)
        for name in ("position", "id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise GrowthError(
                    f"growth event at epoch {self.epoch}: {name} must be a string, got {value!r}"
                )

    def __hash__(self) -> int:  # the layer dict is unhashable; the JSON form is canonical
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    @property
    def type(self) -> str:
        return self.layer["type"]

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"epoch": self.epoch, **self.layer}
        if self.id is not None:
            out["id"] = self.id
        if self.position is not None:
            out["position"] = self.position
        return out

    @classmethod
    def from_dict(cls, data: dict) -> GrowthEvent:
        if not isinstance(data, dict) or "epoch" not in data or "type" not in data:
            raise GrowthError(f"growth event {data!r} must be an object with 'epoch' and 'type'")
        layer = {k: v for k, v in data.items() if k not in ("epoch", "position")}
        return cls(data["epoch"], layer, data.get("position"))

    def to_compact(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.layer.items() if k != "type")
        return (
            f"{self.epoch}:"
            + (f"{self.id}=" if self.id else "")
            + self.type
            + (f"({args})" if args else "")
            + (f"@{self.position}" if self.position else "")
        )


# --- parsing -----------------------------------------------------------------------------

_EVENT_PATTERN = re.compile(
    r"(?P<epoch>[+-]?\d+)\s*:\s*(?:(?P<id>[A-Za-z]\w*)\s*=\s*)?(?P<type>[A-Za-z]\w*)\s*"
    r"(?:\((?P<args>[^()]*)\))?\s*(?:@\s*(?P<position>\S+))?"
)


def _value(text: str) -> int | float | str:
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _parse_compact_event(text: str) -> GrowthEvent:
    match = _EVENT_PATTERN.fullmatch(text.strip())
    if match is None:
        raise GrowthError(
            f"growth event {text.strip()!r} does not read EPOCH:[ID=]TYPE[(ARGS)][@POSITION], "
            "e.g. 3:conv(64)@after:pool1"
        )
    kind = match["type"]
    if kind not in LAYERS:
        raise GrowthError(
            f"growth event {text.strip()!r}: unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)})"
        )
    names = list(LAYERS[kind].fields)
    layer: dict[str, Any] = {"type": kind}
    args = [a.strip() for a in (match["args"] or "").split(",") if a.strip()]
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if eq:
            key = key.strip()
        elif any("=" in a for a in args[:i]):
            raise GrowthError(f"growth event {text.strip()!r}: positional value {arg!r} after a key=value")
        elif i >= len(names):
            raise GrowthError(
                f"growth event {text.strip()!r}: {kind} takes at most {len(names)} positional "
                f"value(s) ({', '.join(names) or 'none'})"
            )
        else:
            key, value = names[i], arg
        if key in layer:
            raise GrowthError(f"growth event {text.strip()!r}: {key} is given twice")
        layer[key] = _value(value.strip())
    return GrowthEvent(int(match["epoch"]), layer, match["position"], match["id"])


def _check_layer(event: GrowthEvent) -> None:
    if event.type in LAYERS and not LAYERS[event.type].growable:
        raise GrowthError(
            f"growth event {event.to_compact()}: a {event.type} layer is a network's head, there from "
            f"its start; growth inserts one of {', '.join(GROWABLE_TYPES)}"
        )
    try:
        normalise_layer({"id": event.id or "new", **event.layer})
    except SpecError as err:
        raise GrowthError(f"growth event {event.to_compact()}: {err}") from None


def parse_schedule(text: str, epochs: int | None = None) -> list[GrowthEvent]:
    """Events from a registered name (needs ``epochs``), a JSON list or file, or a compact string.

    Checks each event on its own (known type and fields); ``validate_schedule`` checks the whole.
    """
    text = text.strip()
    if not text:
        return []
    if text in NAMED_SCHEDULES:
        if epochs is None:
            raise GrowthError(f"schedule {text!r} depends on the number of epochs; pass epochs")
        return named_schedule(text, epochs)
    if text.startswith(("[", "{")):
        raw, source = text, "schedule JSON"
    elif text.endswith(".json"):
        if not Path(text).is_file():
            raise GrowthError(f"schedule file {text} does not exist")
        raw, source = Path(text).read_text(), text
    elif ":" not in text:
        raise GrowthError(
            f"unknown schedule {text!r} (known: {', '.join(NAMED_SCHEDULES)}; or give a JSON "
            "list or a compact string such as 3:conv(64)@after:pool1;5:residual)"
        )
    else:
        events = [_parse_compact_event(part) for part in text.split(";") if part.strip()]
        for event in events:
            _check_layer(event)
        return events
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise GrowthError(f"{source} is not valid JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:  # json recurses per nesting level: a bracket bomb is bad input, not a bug
        raise GrowthError(f"{source} is nested too deeply to be read") from None
    if not isinstance(data, list):
        raise GrowthError(f"{source} must be a list of growth events")
    events = [GrowthEvent.from_dict(item) for item in data]
    for event in events:
        _check_layer(event)
    return events


def schedule_to_json(events: Sequence[GrowthEvent]) -> str:
    """The JSON list form, which ``parse_schedule`` reads back to equal events."""
    return json.dumps([event.to_dict() for event in events])


# --- named schedules ---------------------------------------------------------------------
# Each grows the minimal spec (conv1 pool1 pool2 fc1); a function of the run length so that
# growth keeps its place in training whatever --epochs is.


def _epoch_at(fraction: float, epochs: int) -> int:
    return min(epochs - 1, max(1, math.floor(fraction * epochs + 0.5)))


def _timed(epochs: int, steps: list[tuple[float, dict, str]]) -> list[GrowthEvent]:
    if epochs < 2:
        raise GrowthError(f"a growth schedule needs --epochs >= 2 (growth happens between epochs): {epochs}")
    return [
        GrowthEvent(_epoch_at(fraction, epochs), dict(layer), position) for fraction, layer, position in steps
    ]


_CONV2 = {"id": "conv2", "type": "conv", "out_channels": 64}
_RES1 = {"id": "res1", "type": "residual"}
_DROP1 = {"id": "drop1", "type": "dropout", "p": 0.3}
# minimal -> default spec: the 14x14 conv stage between the pools, the residual block at 7x7,
# dropout before the head. Each of them preserves the function (conv2 as an identity on
# conv1's 32 channels, fc1 widened with zero weights for conv2's 32 new ones; res1 with a
# zero-gamma last batchnorm; dropout is the identity in eval mode).
_TO_DEFAULT = [(_CONV2, "after:pool1"), (_RES1, "after:pool2"), (_DROP1, "head")]


# When the default schedule grows (fraction of training).
DEFAULT_GROWTH_AT = 3 / 12


def _to_default_at(epochs: int, fractions: tuple[float, float, float]) -> list[GrowthEvent]:
    return _timed(epochs, [(f, layer, pos) for f, (layer, pos) in zip(fractions, _TO_DEFAULT)])


def _default(epochs: int) -> list[GrowthEvent]:
    """Into the default spec in one step a quarter of the way in: the minimal network takes
    the cheap first epochs (and the curriculum's easy-first stages), the complete network all
    the rest.

    Measured on full Fashion-MNIST (12 epochs, tiers curriculum, seeds 0/1/2, val/acc): all
    three layers at epoch 3 end at 0.9318/0.9260/0.9304; staggered (conv2 at 3, the residual
    block and dropout at 5) at 0.9272/0.9264/0.9276; all at epoch 4 at 0.9304/0.9268/0.9286
    for 5% less time; all at epoch 2 at 0.9298 (seed 0) for 8% more. What the complete network
    misses is epochs: every layer held back costs accuracy, the minimal network's epochs cost
    little (0.36 of a complete one on 2 CPU threads)."""
    return _to_default_at(epochs, (DEFAULT_GROWTH_AT,) * 3)


def _early(epochs: int) -> list[GrowthEvent]:
    """Into the default spec within the first quarter: most epochs train the full network."""
    return _to_default_at(epochs, (1 / 12, 2 / 12, 3 / 12))


def _late(epochs: int) -> list[GrowthEvent]:
    """Into the default spec between 40% and 80%: most epochs train a small, cheap network."""
    return _to_default_at(epochs, (0.4, 0.6, 0.8))


def _deep(epochs: int) -> list[GrowthEvent]:
    """A residual block at each of 14x14 and 7x7 and a third conv: conv1 pool1 conv2 res1 pool2
    conv3(128) res2 fc1 drop1, over the first half."""
    return _timed(
        epochs,
        [
            (0.1, _CONV2, "after:pool1"),
            (0.2, _RES1, "after:conv2"),
            (0.3, {"id": "conv3", "type": "conv", "out_channels": 128}, "after:pool2"),
            (0.4, {"id": "res2", "type": "residual"}, "after:conv3"),
            (0.5, _DROP1, "head"),
        ],
    )


def _wide_fc(epochs: int) -> list[GrowthEvent]:
    """Grows the classifier instead of a residual block: conv1 pool1 conv2 pool2 fc1 fc2(256) drop1."""
    return _timed(
        epochs,
        [
            (0.15, _CONV2, "after:pool1"),
            (0.35, {"id": "fc2", "type": "fc", "out_features": 256}, "head"),
            (0.5, _DROP1, "head"),
        ],
    )


def _default_bn(epochs: int) -> list[GrowthEvent]:
    """The default schedule with conv2 a convbn: grows the spec minimal-bn into default-bn."""
    return [
        dataclasses.replace(e, layer={**e.layer, "type": "convbn"}) if e.type == "conv" else e
        for e in _default(epochs)
    ]


def _resnet(epochs: int) -> list[GrowthEvent]:
    """resnet-start into resnet (models/resnet.py): the two missing blocks of every stage, all
    a quarter of the way in, as the default schedule grows."""
    return _timed(epochs, [(DEFAULT_GROWTH_AT, layer, position) for layer, position in resnet.growth_steps()])


NAMED_SCHEDULES: dict[str, Callable[[int], list[GrowthEvent]]] = {
    "default": _default,
    "early": _early,
    "late": _late,
    "deep": _deep,
    "wide-fc": _wide_fc,
    "default-bn": _default_bn,
    "resnet": _resnet,
    "none": lambda epochs: [],
}


def named_schedule(name: str, epochs: int) -> list[GrowthEvent]:
    if name not in NAMED_SCHEDULES:
        raise GrowthError(f"unknown schedule {name!r} (known: {', '.join(NAMED_SCHEDULES)})")
    return NAMED_SCHEDULES[name](epochs)


# --- specs -------------------------------------------------------------------------------


def _fail(event: GrowthEvent, problem: str) -> GrowthError:
    return GrowthError(f"growth event {event.to_compact()}: {problem}")


def _new_id(spec: ArchSpec, kind: str) -> str:
    prefix = LAYERS[kind].id_prefix
    numbers = [int(m[1]) for lid in spec.layer_ids() if (m := re.fullmatch(rf"{prefix}(\d+)", lid))]
    return f"{prefix}{max(numbers, default=0) + 1}"


def _index(spec: ArchSpec, layer: dict, event: GrowthEvent) -> int:
    ids = spec.layer_ids()
    position = event.position
    if position is None:
        if LAYERS[layer["type"]].feature_map:
            fcs = [i for i, lay in enumerate(spec.layers) if lay["type"] == "fc"]
            return fcs[0] if fcs else len(ids)
        return len(ids)
    if position in ("head", f"before:{HEAD_ID}"):
        return len(ids)
    where, _, ref = position.partition(":")
    if where not in ("after", "before") or not ref or ref == HEAD_ID:
        raise _fail(
            event, f"position {position!r} must be after:<id>, before:<id> or head (nothing follows the head)"
        )
    if ref not in ids:
        raise _fail(event, f"position {position!r} names no layer (layers: {', '.join([*ids, HEAD_ID])})")
    return ids.index(ref) + (where == "after")


def insert_event(spec: ArchSpec, event: GrowthEvent) -> tuple[ArchSpec, int]:
    """The spec with the event's layer inserted, and the layer's index; raises GrowthError."""
    if event.type not in LAYERS:
        raise _fail(event, f"unknown layer type {event.type!r} (known: {', '.join(LAYER_TYPES)})")
    layer_id = event.id or _new_id(spec, event.type)
    if layer_id in spec.layer_ids():
        raise _fail(event, f"layer id {layer_id!r} is already in use")
    try:
        layer = normalise_layer({**event.layer, "id": layer_id})
    except SpecError as err:
        raise _fail(event, str(err)) from None
    index = _index(spec, layer, event)
    layers = list(spec.layers)
    layers.insert(index, layer)
    name = spec.name if spec.name.endswith("+grown") else f"{spec.name}+grown"
    grown = spec.with_layers(layers, name)
    try:
        infer_shapes(grown)
    except SpecError as err:
        raise _fail(event, str(err)) from None
    return grown, index


def apply_event(spec: ArchSpec, event: GrowthEvent) -> ArchSpec:
    """The spec with the event's layer inserted; raises GrowthError if it cannot be built."""
    return insert_event(spec, event)[0]


def final_spec(start: ArchSpec, events: Sequence[GrowthEvent]) -> ArchSpec:
    spec = start
    for event in events:
        spec = apply_event(spec, event)
    return spec


def spec_at_epoch(start: ArchSpec, events: Sequence[GrowthEvent], epoch: int) -> ArchSpec:
    """The spec that trains during (0-based) epoch ``epoch``: every event at or before it applied."""
    return final_spec(start, [event for event in events if event.epoch <= epoch])


def validate_schedule(start: ArchSpec, events: Sequence[GrowthEvent], epochs: int) -> ArchSpec:
    """Check a whole schedule against a run of ``epochs`` epochs; returns the final spec."""
    try:
        infer_shapes(start)
    except SpecError as err:
        raise GrowthError(f"start spec: {err}") from None
    spec, previous = start, 1
    for event in events:
        if event.epoch < 1:
            raise GrowthError(
                f"growth epoch {event.epoch} of {event.to_compact()} must be >= 1: growth "
                "happens before an epoch, and epoch 0 trains the start spec"
            )
        if event.epoch >= epochs:
            usable = f"use 1..{epochs - 1}" if epochs >= 2 else "a 1-epoch run cannot grow"
            raise GrowthError(
                f"growth epoch {event.epoch} is past --epochs {epochs} ({event.to_compact()}; "
                f"growth happens before an epoch, so {usable})"
            )
        if event.epoch < previous:
            raise GrowthError(
                f"growth events out of order: {event.to_compact()} comes after an event at "
                f"epoch {previous}; sort the schedule by epoch"
            )
        spec = apply_event(spec, event)
        previous = event.epoch
    return spec

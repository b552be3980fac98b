"""The growth schedule: events that each insert a layer, or widen one, before an epoch, their
forms, the named schedules, and the specs a schedule passes through (checked against the run's
epochs); models/growth.py grows a model by one event.

A growing model starts from a spec (usually the ``minimal`` one) and, before chosen epochs,
gains one layer per event, or widens one: a ``widen`` event names an existing layer by its id
and the width it grows to (``5:s2b1=widen(32)``, JSON ``{"epoch": 5, "type": "widen", "id":
"s2b1", "width": 32}``); the layers after it that keep their input's width (a pool, a residual
block) widen with it, and the first that sets its own width reads the wider input.

Epochs count from 0, as in the training loop: an event at epoch ``e`` is applied before epoch
``e`` runs, i.e. after ``e`` epochs of training, so ``e`` must lie in ``1 .. epochs - 1``.
Several events may share an epoch; they apply in schedule order.

A schedule is data. ``parse_schedule`` accepts three forms:

* a registered name (``NAMED_SCHEDULES``: default, early, late, deep, wide-fc, default-bn,
  resnet, resnet-widen, resnet-short, resnet-short-widen, resnet-short-whiten-widen,
  short-convs-widen, none), a
  function of the number of epochs;
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
from pathlib import Path

from models import resnet, resnet_short, short_convs
from models.growth_event import (
    WIDEN,
    WIDTH_FIELDS,
    GrowthError,
    GrowthEvent,
    check_event,
    check_widening,
    parse_compact_event,
)
from models.layers import LAYER_TYPES, LAYERS
from models.spec import HEAD_ID, ArchSpec, SpecError, infer_shapes, normalise_layer


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
        events = [parse_compact_event(part) for part in text.split(";") if part.strip()]
        for event in events:
            check_event(event)
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
        check_event(event)
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


def _inserted(epochs: int, steps: list[tuple[dict, str]]) -> list[GrowthEvent]:
    """Every (layer, position) of ``steps`` inserted a quarter of the way in, as the default
    schedule grows."""
    return _timed(epochs, [(DEFAULT_GROWTH_AT, layer, position) for layer, position in steps])


def _widened(epochs: int, steps: list[tuple[str, int]]) -> list[GrowthEvent]:
    """Every (layer, width) of ``steps`` widened a quarter of the way in, as ``_inserted``."""
    return _timed(
        epochs,
        [(DEFAULT_GROWTH_AT, {"type": WIDEN, "id": layer, "width": width}, None) for layer, width in steps],
    )


def _resnet(epochs: int) -> list[GrowthEvent]:
    """resnet-start into resnet (models/resnet.py): the two missing blocks of every stage."""
    return _inserted(epochs, resnet.growth_steps())


def _resnet_widen(epochs: int) -> list[GrowthEvent]:
    """resnet-narrow into resnet: every stage widened to its final width."""
    return _widened(epochs, resnet.widening_steps())


def _resnet_short(epochs: int) -> list[GrowthEvent]:
    """resnet-short-start into resnet-short (models/resnet_short.py): each group's residual block."""
    return _inserted(epochs, resnet_short.growth_steps())


def _resnet_short_widen(epochs: int) -> list[GrowthEvent]:
    """resnet-short-narrow into resnet-short: every layer that sets a width widened to the baseline's."""
    return _widened(epochs, resnet_short.widening_steps())


def _resnet_short_whiten_widen(epochs: int) -> list[GrowthEvent]:
    """resnet-short-whiten-narrow into resnet-short-whiten: each group's convolution widened."""
    return _widened(epochs, resnet_short.widening_steps(whiten=True))


def _short_convs_widen(epochs: int) -> list[GrowthEvent]:
    """short-convs-narrow into short-convs (models/short_convs.py): every convolution widened."""
    return _widened(epochs, short_convs.widening_steps())


NAMED_SCHEDULES: dict[str, Callable[[int], list[GrowthEvent]]] = {
    "default": _default,
    "early": _early,
    "late": _late,
    "deep": _deep,
    "wide-fc": _wide_fc,
    "default-bn": _default_bn,
    "resnet": _resnet,
    "resnet-widen": _resnet_widen,
    "resnet-short": _resnet_short,
    "resnet-short-widen": _resnet_short_widen,
    "resnet-short-whiten-widen": _resnet_short_whiten_widen,
    "short-convs-widen": _short_convs_widen,
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
    """The spec the event grows (the layer inserted, or widened), and that layer's index;
    raises GrowthError."""
    if event.widens:
        return _widen_layer(spec, event)
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
    return _checked(spec, layers, event), index


def _widen_layer(spec: ArchSpec, event: GrowthEvent) -> tuple[ArchSpec, int]:
    check_widening(event)
    ids = spec.layer_ids()
    if event.id not in ids:
        raise _fail(event, f"it widens {event.id!r}, which is no layer (layers: {', '.join(ids)})")
    index = ids.index(event.id)
    layer = spec.layers[index]
    field = next((f for f in WIDTH_FIELDS if f in LAYERS[layer["type"]].fields), None)
    if field is None:
        raise _fail(event, f"a {layer['type']} layer has no width to widen ({' or '.join(WIDTH_FIELDS)})")
    width = infer_shapes(spec)[index + 1][0]  # what the layer puts out now
    if event.layer["width"] <= width:
        raise _fail(event, f"{event.id!r} is {width} wide already; a {WIDEN} event only widens")
    layers = list(spec.layers)
    layers[index] = {**layer, field: event.layer["width"]}
    return _checked(spec, layers, event), index


def _checked(spec: ArchSpec, layers: list[dict], event: GrowthEvent) -> ArchSpec:
    name = spec.name if spec.name.endswith("+grown") else f"{spec.name}+grown"
    grown = spec.with_layers(layers, name)
    try:
        infer_shapes(grown)
    except SpecError as err:
        raise _fail(event, str(err)) from None
    return grown


def apply_event(spec: ArchSpec, event: GrowthEvent) -> ArchSpec:
    """The spec with the event's layer inserted or widened; raises GrowthError if it cannot be
    built."""
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

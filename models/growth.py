"""The growth engine: a schedule of layer insertions and a function that grows a model by one.

A growing model starts from a spec (usually the ``minimal`` one) and, before chosen epochs,
gains one layer per event. Epochs count from 0, as in the training loop: an event at epoch
``e`` is applied before epoch ``e`` runs, i.e. after ``e`` epochs of training, so ``e`` must lie
in ``1 .. epochs - 1``. Several events may share an epoch; they apply in schedule order.

A schedule is data. ``parse_schedule`` accepts three forms:

* a registered name (``NAMED_SCHEDULES``: default, early, late, deep, wide-fc, none), a function
  of the number of epochs;
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

``grow`` keeps every module whose ``layer_signature`` is unchanged (the same parameter objects,
so optimizer state stays attached). With ``init="preserve"`` the new layer starts as an identity
where it can (Net2Net, Chen et al. 2016; AutoGrow, Wen et al. 2020), so the grown network
computes the same function in eval mode and the loss does not jump.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.builder import SpecNet, count_parameters, layer_signature, make_exit, make_head, make_layer
from models.layers import LAYER_TYPES, LAYERS, widen_linear
from models.spec import HEAD_ID, ArchSpec, SpecError, exit_shapes, infer_shapes, normalise_layer

GROWTH_INITS = ("preserve", "random")


class GrowthError(ValueError):
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


NAMED_SCHEDULES: dict[str, Callable[[int], list[GrowthEvent]]] = {
    "default": _default,
    "early": _early,
    "late": _late,
    "deep": _deep,
    "wide-fc": _wide_fc,
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


def _insert(spec: ArchSpec, event: GrowthEvent) -> tuple[ArchSpec, int]:
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
    return _insert(spec, event)[0]


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


def output_nonnegative(spec: ArchSpec) -> list[bool]:
    """Whether each layer's output is known to be >= 0, which is what lets a ReLU layer be an
    identity (``LayerType.nonneg``); the (normalised) input may be negative."""
    nonneg, out = False, []
    for layer in spec.layers:
        sign = LAYERS[layer["type"]].nonneg
        nonneg = nonneg if sign is None else sign
        out.append(nonneg)
    return out


# --- growing a model ---------------------------------------------------------------------


def _assemble(
    spec: ArchSpec, modules: dict[str, nn.Module], exit_modules: dict[str, nn.Module] | None = None
) -> SpecNet:
    """A SpecNet over existing modules, without building (and randomly initialising) new ones.

    Mirrors ``SpecNet.__init__``: a spec and a ``layers`` ModuleDict in spec order, head last.
    """
    return SpecNet(spec, modules, exit_modules)


def grow(model: SpecNet, event: GrowthEvent, init: str = "preserve") -> tuple[SpecNet, dict]:
    """Insert the event's layer; returns the grown model and a JSON-serialisable report.

    Every layer whose signature (type, fields, input shape) is unchanged keeps its module object,
    so its parameters, and the optimizer state attached to them, carry over. New and changed
    layers are new modules on the model's device and dtype.

    ``init="preserve"`` makes the new layer an identity in eval mode where the network allows it
    (see ``LayerType.identity``); extra channels or features start random and the layer that reads
    them gets zero weights for them, so the function is kept while they can learn. A layer
    whose input changed in any other way (a pool shrank the map, a layer narrowed it, an input
    that may be negative meets a ReLU) is re-initialised and ``preserved`` is False.
    ``init="random"``: the new and every changed layer get PyTorch's default initialisation.
    """
    if init not in GROWTH_INITS:
        raise GrowthError(f"growth init {init!r}: use one of {', '.join(GROWTH_INITS)}")
    old_spec = model.spec
    spec, index = _insert(old_spec, event)
    layer = spec.layers[index]
    old_layers = {lay["id"]: lay for lay in old_spec.layers}
    old_in = dict(zip([*old_spec.layer_ids(), HEAD_ID], infer_shapes(old_spec)))
    new_in = infer_shapes(spec)
    reference = next(model.parameters())

    def fresh(lay: dict | None, in_shape: tuple[int, ...]) -> nn.Module:
        module = make_layer(lay, in_shape) if lay is not None else make_head(in_shape, spec.num_classes)
        return module.to(device=reference.device, dtype=reference.dtype)

    new_module = fresh(layer, new_in[index])
    if init == "preserve":
        nonneg_in = index > 0 and output_nonnegative(spec)[index - 1]
        preserved = LAYERS[layer["type"]].identity(new_module, layer, new_in[index], nonneg_in)
    else:
        preserved = layer["type"] == "dropout"  # the identity in eval mode whatever its init
    modules, reinitialised, widened = {layer["id"]: new_module}, [], []
    for i, (lay, in_shape) in enumerate(zip([*spec.layers, None], new_in)):
        if i == index:
            continue
        lid = lay["id"] if lay is not None else HEAD_ID
        if lay is None:
            unchanged = layer_signature(None, old_in[HEAD_ID]) == layer_signature(None, in_shape)
        else:
            unchanged = layer_signature(old_layers[lid], old_in[lid]) == layer_signature(lay, in_shape)
        if unchanged:
            modules[lid] = model.layers[lid]
            continue
        modules[lid] = fresh(lay, in_shape)
        widen = LAYERS[lay["type"]].widen if lay is not None else widen_linear
        # Only a preserving new layer changes shapes by pure widening; after anything else, or
        # once the chain is broken, the old weights would read different features.
        if init == "preserve" and preserved and widen(model.layers[lid], modules[lid], old_in[lid], in_shape):
            widened.append(lid)
        else:
            reinitialised.append(lid)
            preserved = False
    # An exit whose input keeps its shape keeps its modules; one whose map changed starts afresh.
    exit_modules = {}
    old_exit_in = dict(zip(old_spec.exit_ids(), exit_shapes(old_spec)))
    for entry, in_shapes in zip(spec.exits, exit_shapes(spec)):
        if old_exit_in[entry["id"]][0] == in_shapes[0]:
            exit_modules[entry["id"]] = model.exits[entry["id"]]
        else:
            fresh_exit = make_exit(entry, in_shapes, spec.num_classes)
            exit_modules[entry["id"]] = fresh_exit.to(device=reference.device, dtype=reference.dtype)
            reinitialised.append(f"exits.{entry['id']}")
    grown = _assemble(spec, modules, exit_modules)
    grown.train(model.training)
    info = {
        "event": event.to_dict(),
        "epoch": event.epoch,
        "layer_id": layer["id"],
        "layer": dict(layer),
        "index": index,
        "init": init,
        "preserved": bool(preserved),
        "params_before": count_parameters(model),
        "params_after": count_parameters(grown),
        "reinitialised": reinitialised,
        "widened": widened,
    }
    return grown, info


# --- a stage's head becomes an exit --------------------------------------------------------


def stage_exit(spec: ArchSpec, grown: ArchSpec) -> dict | None:
    """The exit that keeps ``spec``'s classifier when the network grows into ``grown``: it reads
    the last layer the two share before the first insertion, and its layers are the rest of
    ``spec`` (what computed the stage's prediction from there). None where nothing can be
    carried: growth before the first layer, growth only after the last (the head still reads
    the same layer), or an exit already at that point."""
    old_ids, new_ids = spec.layer_ids(), grown.layer_ids()
    common = 0
    while common < min(len(old_ids), len(new_ids)) and spec.layers[common] == grown.layers[common]:
        common += 1
    if common == 0 or common >= len(old_ids):
        return None
    after = old_ids[common - 1]
    if any(entry["after"] == after for entry in spec.exits):
        return None
    numbers = [int(m[1]) for eid in spec.exit_ids() if (m := re.fullmatch(r"exit(\d+)", eid))]
    return {
        "id": f"exit{max(numbers, default=0) + 1}",
        "after": after,
        "layers": [dict(layer) for layer in spec.layers[common:]],
    }


def _with_exit(spec: ArchSpec, entry: dict) -> ArchSpec:
    ids = spec.layer_ids()
    exits = sorted([*spec.exits, entry], key=lambda e: ids.index(e["after"]))
    return spec.with_exits(exits)


def stage_exits(start: ArchSpec, events: Sequence[GrowthEvent]) -> ArchSpec:
    """``start`` grown by ``events`` with each stage's head kept as an exit (``carry_stage_head``
    at every epoch that grows): the final spec of a run with ``--exits stages``."""
    spec = start
    for epoch in sorted({event.epoch for event in events}):
        grown = final_spec(spec, [event for event in events if event.epoch == epoch])
        entry = stage_exit(spec, grown)
        spec = _with_exit(grown, entry) if entry is not None else grown
    return spec


def carry_stage_head(model: SpecNet, grown: ArchSpec) -> tuple[SpecNet, dict | None]:
    """``model`` with its classifier path (the layers past the last one ``grown`` keeps in place,
    and the head) copied into a new exit, before the network grows into ``grown``: the stage's
    trained head becomes its exit instead of being discarded, and computes what the stage did.
    The copies are new parameters; the head itself goes on as the final head."""
    entry = stage_exit(model.spec, grown)
    if entry is None:
        return model, None
    path = nn.ModuleDict({layer["id"]: copy.deepcopy(model.layers[layer["id"]]) for layer in entry["layers"]})
    path[HEAD_ID] = copy.deepcopy(model.layers[HEAD_ID])
    exit_modules = {**dict(model.exits.items()), entry["id"]: path}
    carried = SpecNet(_with_exit(model.spec, entry), dict(model.layers.items()), exit_modules)
    carried.train(model.training)
    return carried, entry


@torch.no_grad()
def probe_jump(
    model_before: nn.Module,
    model_after: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, float]:
    """Loss and accuracy of both models on one fixed batch, in eval mode: the jump a growth event
    causes. ``x`` (B, C, H, W) and ``y`` (B,) must be on the models' device. Call it right after
    ``grow``, while the old model's unshared modules are still as they were."""
    out = {}
    for tag, model in (("before", model_before), ("after", model_after)):
        was_training = model.training
        model.eval()
        try:
            logits = model(x)  # (B, num_classes)
        finally:
            model.train(was_training)
        out[f"loss_{tag}"] = float(F.cross_entropy(logits.float(), y))
        out[f"acc_{tag}"] = float((logits.argmax(1) == y).float().mean())
    return out


# --- growth on a plateau -----------------------------------------------------------------


@dataclass
class PlateauTrigger:
    """Says when to grow early: validation accuracy has not improved by more than ``min_delta``
    for ``patience`` epochs. After firing it starts afresh, so a grown model gets ``patience``
    epochs of its own before the next trigger. State is JSON-serialisable for checkpoints."""

    patience: int = 2
    min_delta: float = 0.0
    best: float | None = None
    stale: int = 0  # epochs since the last improvement

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise GrowthError(f"plateau patience must be >= 1, got {self.patience}")
        if self.min_delta < 0:
            raise GrowthError(f"plateau min_delta must be >= 0, got {self.min_delta}")

    def update(self, val_acc: float) -> bool:
        """Feed one epoch's validation accuracy; True: grow before the next epoch."""
        if self.best is None or val_acc > self.best + self.min_delta:
            self.best, self.stale = float(val_acc), 0
            return False
        self.stale += 1
        if self.stale < self.patience:
            return False
        self.best, self.stale = None, 0
        return True

    def state_dict(self) -> dict:
        return {"best": self.best, "stale": self.stale}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.stale = state["best"], int(state["stale"])


def events_due(
    events: Sequence[GrowthEvent],
    applied: int,
    epoch: int,
    plateau: bool = False,
) -> list[GrowthEvent]:
    """The events to apply before ``epoch``, given that the first ``applied`` already were.

    An event's epoch is the latest it waits: every pending event at or before ``epoch`` is due,
    and a plateau brings the next pending one forward when none is.
    """
    pending = list(events[applied:])
    due = list(itertools.takewhile(lambda event: event.epoch <= epoch, pending))
    if not due and pending and plateau:
        due = pending[:1]
    return due

"""Architecture as data: a JSON-serialisable spec of a CNN, its validation and shape inference.

A spec is an ordered list of layers, each a dict with a stable ``id`` and a ``type``; the
classifier head (a linear layer to ``num_classes``) is implicit and always last, with id
``head``. The layer types, their fields and shapes are ``LAYERS`` in models/layers/; the
first ``fc`` flattens, after which no layer that needs a feature map may follow.

Every parameter name of a built model is ``layers.<id>.…``, so a model grown layer by layer
and a model built from its final spec share names and shapes.

Exits (early classifiers for input-adaptive inference) are data too: each names the layer whose
output it reads (``after``) and its own small classifier path (``layers``, then a linear head),
``{"id": "exit1", "after": "pool1", "layers": [{"id": "pool2", "type": "pool"}, ...]}``; its
parameters are ``exits.<exit id>.<layer id>.…``. Exits run in the order of their positions.
"""

from __future__ import annotations

import json
import math
import re
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from models import resnet, resnet_short, short_convs
from models.layers import LAYER_TYPES, LAYERS, SpecError

HEAD_ID = "head"
# Ids become module names (``layers.<id>.weight``), so they must be valid attribute names.
_ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ArchSpec:
    """A whole network: input shape, class count and the ordered hidden layers."""

    input_shape: tuple[int, int, int]  # (C, H, W)
    num_classes: int
    layers: tuple[dict, ...] = field(default_factory=tuple)
    name: str = "custom"
    exits: tuple[dict, ...] = field(default_factory=tuple)  # early classifiers, in depth order

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_shape", tuple(int(v) for v in self.input_shape))
        object.__setattr__(self, "layers", tuple(normalise_layer(layer) for layer in self.layers))
        object.__setattr__(self, "exits", tuple(normalise_exit(e) for e in self.exits))

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "layers": [dict(layer) for layer in self.layers],
        }
        if self.exits:  # absent rather than empty, so specs without exits read as they always did
            out["exits"] = [{**e, "layers": [dict(lay) for lay in e["layers"]]} for e in self.exits]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> ArchSpec:
        missing = {"input_shape", "num_classes", "layers"} - set(data)
        if missing:
            raise SpecError(f"spec is missing {', '.join(sorted(missing))}")
        return cls(
            input_shape=tuple(data["input_shape"]),
            num_classes=int(data["num_classes"]),
            layers=tuple(data["layers"]),
            name=str(data.get("name", "custom")),
            exits=tuple(data.get("exits", ())),
        )

    def layer_ids(self) -> list[str]:
        return [layer["id"] for layer in self.layers]

    def exit_ids(self) -> list[str]:
        return [e["id"] for e in self.exits]

    def with_layers(self, layers: list[dict], name: str | None = None) -> ArchSpec:
        return ArchSpec(self.input_shape, self.num_classes, tuple(layers), name or self.name, self.exits)

    def with_exits(self, exits: list[dict] | tuple[dict, ...]) -> ArchSpec:
        return ArchSpec(self.input_shape, self.num_classes, self.layers, self.name, tuple(exits))


def normalise_layer(layer: dict) -> dict:
    """Fill defaults and reject unknown types or fields, so equal layers compare equal."""
    if not isinstance(layer, dict):
        raise SpecError(f"layer {layer!r} is not an object")
    layer_id = layer.get("id")
    kind = layer.get("type")
    if not isinstance(layer_id, str) or not layer_id:
        raise SpecError(f"layer {layer!r} has no string id")
    if not _ID_PATTERN.fullmatch(layer_id):
        raise SpecError(f"layer id {layer_id!r} must be letters, digits and underscores")
    if layer_id == HEAD_ID:
        raise SpecError(f"layer id {HEAD_ID!r} is reserved for the classifier head")
    if kind not in LAYERS:
        raise SpecError(f"layer {layer_id!r}: unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)})")
    fields = LAYERS[kind].fields
    unknown = set(layer) - set(fields) - {"id", "type"}
    if unknown:
        raise SpecError(f"layer {layer_id!r}: unknown field(s) {', '.join(sorted(unknown))} for {kind}")
    out = {"id": layer_id, "type": kind}
    for name, default in fields.items():
        value = layer.get(name, default)
        if value is None:
            raise SpecError(f"layer {layer_id!r}: {kind} needs {name}")
        out[name] = value
    return out


def normalise_exit(entry: dict) -> dict:
    """An exit with its layers normalised; ``layers`` defaults to none (a linear head alone)."""
    if not isinstance(entry, dict):
        raise SpecError(f"exit {entry!r} is not an object")
    exit_id, after = entry.get("id"), entry.get("after")
    if not isinstance(exit_id, str) or not _ID_PATTERN.fullmatch(exit_id):
        raise SpecError(f"exit {entry!r} needs an id of letters, digits and underscores")
    if not isinstance(after, str) or not after:
        raise SpecError(f"exit {exit_id!r} needs 'after': the id of the layer whose output it reads")
    unknown = set(entry) - {"id", "after", "layers"}
    if unknown:
        raise SpecError(
            f"exit {exit_id!r}: unknown field(s) {', '.join(sorted(unknown))} (id, after, layers)"
        )
    layers = entry.get("layers", [])
    if not isinstance(layers, (list, tuple)):
        raise SpecError(f"exit {exit_id!r}: layers must be a list")
    try:
        normalised = [normalise_layer(layer) for layer in layers]
    except SpecError as err:
        raise SpecError(f"exit {exit_id!r}: {err}") from None
    return {"id": exit_id, "after": after, "layers": normalised}


def layer_output_shape(layer: dict, in_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape after ``layer`` for an input of ``in_shape`` ((C, H, W) or (F,)); raises SpecError."""
    if layer["type"] not in LAYERS:
        raise SpecError(f"layer {layer['id']!r}: unknown layer type {layer['type']!r}")
    return LAYERS[layer["type"]].output_shape(layer, in_shape)


def infer_shapes(spec: ArchSpec) -> list[tuple[int, ...]]:
    """Input shape of every layer and of the head (len(layers) + 1 entries); validates the spec."""
    c, h, w = spec.input_shape
    if min(c, h, w) < 1:
        raise SpecError(f"input shape {spec.input_shape} must be positive")
    if spec.num_classes < 2:
        raise SpecError(f"num_classes must be at least 2, got {spec.num_classes}")
    seen: set[str] = set()
    shapes: list[tuple[int, ...]] = []
    shape: tuple[int, ...] = spec.input_shape
    for layer in spec.layers:
        if layer["id"] in seen:
            raise SpecError(f"layer id {layer['id']!r} is used twice")
        seen.add(layer["id"])
        if shapes:
            _refuse_fitted(layer, "the network's first layer")
        shapes.append(shape)
        shape = layer_output_shape(layer, shape)
    shapes.append(shape)
    if spec.exits:
        exit_shapes(spec, shapes)
    return shapes


def exit_shapes(spec: ArchSpec, shapes: list[tuple[int, ...]] | None = None) -> list[list[tuple[int, ...]]]:
    """Per exit, the input shape of each of its layers and of its head; validates the exits:
    each reads the output of a layer before the last one (after the last, it would duplicate
    the head), in depth order, and its layers fit the map it reads."""
    shapes = shapes if shapes is not None else infer_shapes(spec)
    ids = spec.layer_ids()
    out, seen, previous = [], set(), -1
    for entry in spec.exits:
        eid, after = entry["id"], entry["after"]
        if eid in seen or eid == HEAD_ID:
            raise SpecError(f"exit id {eid!r} is used twice (or is the head's)")
        seen.add(eid)
        if after == HEAD_ID:
            raise SpecError(
                f"exit {eid!r}: nothing comes after the head; put it after one of {', '.join(ids)}"
            )
        if after not in ids:
            raise SpecError(
                f"exit {eid!r}: after {after!r} names no layer (layers: {', '.join(ids) or 'none'})"
            )
        position = ids.index(after)
        if position == len(ids) - 1:
            raise SpecError(
                f"exit {eid!r}: after {after!r}, the last layer, it would read what the head reads; "
                "put it earlier"
            )
        if position <= previous:
            raise SpecError(f"exit {eid!r}: exits must be listed in depth order, one per position")
        previous = position
        shape, inner, inner_ids = shapes[position + 1], [], set()
        for layer in entry["layers"]:
            _refuse_fitted(layer, f"the network's first layer, not in exit {eid!r}")
            if layer["id"] in inner_ids:
                raise SpecError(f"exit {eid!r}: layer id {layer['id']!r} is used twice")
            inner_ids.add(layer["id"])
            inner.append(shape)
            try:
                shape = layer_output_shape(layer, shape)
            except SpecError as err:
                raise SpecError(
                    f"exit {eid!r} after {after!r} (a {_shape_text(shapes[position + 1])} map): {err}"
                ) from None
        inner.append(shape)
        out.append(inner)
    return out


def _refuse_fitted(layer: dict, where: str) -> None:
    """A layer fitted to the training images (a whitening stem) sees them only as the network's
    first layer: anywhere else its input, and what it was fitted to, would change as the layers
    before it train or grow."""
    if layer["type"] in LAYERS and LAYERS[layer["type"]].fit is not None:
        raise SpecError(
            f"layer {layer['id']!r}: a {layer['type']} layer is fitted to the images, so it must be {where}"
        )


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in shape)


def validate(spec: ArchSpec) -> ArchSpec:
    infer_shapes(spec)
    return spec


# --- size ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecSize:
    params: int
    activations: int  # floats per example kept for the backward pass (input and layer outputs)
    largest: tuple[str, int]  # the layer with the most parameters, and how many

    def training_bytes(self, batch_size: int) -> int:
        """fp32 weights, gradients and SGD momentum, and a batch's activations and their gradients."""
        return 4 * (3 * self.params + 2 * batch_size * self.activations)


def spec_size(spec: ArchSpec) -> SpecSize:
    """Parameter count and activation size of the network ``spec`` builds (models/builder.py),
    from shapes alone: nothing is allocated, so a spec of 10^12 parameters is measured safely."""
    shapes = infer_shapes(spec)
    counts: list[tuple[str, int]] = []
    activations = math.prod(spec.input_shape)
    for layer, in_shape, out_shape in zip(spec.layers, shapes, shapes[1:]):
        counts.append((layer["id"], LAYERS[layer["type"]].params(layer, in_shape)))
        activations += LAYERS[layer["type"]].activations * math.prod(out_shape)
    counts.append((HEAD_ID, math.prod(shapes[-1]) * spec.num_classes + spec.num_classes))
    activations += spec.num_classes
    for entry, inner in zip(spec.exits, exit_shapes(spec, shapes)):
        for layer, in_shape, out_shape in zip(entry["layers"], inner, inner[1:]):
            counts.append((f"{entry['id']}.{layer['id']}", LAYERS[layer["type"]].params(layer, in_shape)))
            activations += LAYERS[layer["type"]].activations * math.prod(out_shape)
        counts.append(
            (f"{entry['id']}.{HEAD_ID}", math.prod(inner[-1]) * spec.num_classes + spec.num_classes)
        )
        activations += spec.num_classes
    return SpecSize(sum(n for _, n in counts), activations, max(counts, key=lambda item: item[1]))


@dataclass(frozen=True)
class SizeLimits:
    max_params: int = 100_000_000  # 200 times the default network
    max_bytes: int | None = None  # None: no memory check (the command sets it)
    batch_size: int = 1


# The limits every model build is checked against (models/builder.py): set by the training
# commands from --max-params and --max-memory-gb, so that nothing builds a network over them.
SIZE_LIMITS: ContextVar[SizeLimits] = ContextVar("size_limits", default=SizeLimits())  # noqa: B039 (frozen)


def check_size(
    spec: ArchSpec,
    max_params: int | None = None,
    max_bytes: int | None = None,
    batch_size: int | None = None,
    where: str = "",
) -> SpecSize:
    """Refuse a network with more than ``max_params`` parameters, or whose training step at
    ``batch_size`` needs more than ``max_bytes``; the message gives the figures. Limits not
    given come from ``SIZE_LIMITS``."""
    limits = SIZE_LIMITS.get()
    max_params = limits.max_params if max_params is None else max_params
    max_bytes = limits.max_bytes if max_bytes is None else max_bytes
    batch_size = limits.batch_size if batch_size is None else batch_size
    size = spec_size(spec)
    at = f"{where or 'spec ' + spec.name}: "
    if size.params > max_params:
        lid, n = size.largest
        raise SpecError(
            f"{at}{size.params:,} parameters (layer {lid!r} alone {n:,}) exceed --max-params "
            f"{max_params:,}; make the layers smaller or raise --max-params"
        )
    need = size.training_bytes(batch_size)
    if max_bytes is not None and need > max_bytes:
        raise SpecError(
            f"{at}training needs about {need / 2**30:,.1f} GiB ({size.params:,} parameters and the "
            f"activations of a batch of {batch_size}), more than the {max_bytes / 2**30:,.1f} GiB "
            "allowed by --max-memory-gb; make the layers or --batch-size smaller, or raise it"
        )
    return size


# --- named specs -------------------------------------------------------------------------


def _minimal() -> list[dict]:
    # The seed of every growing run: one conv layer and one fully connected layer, with the
    # default network's two pools already in place. Every layer a named schedule adds then joins
    # at its final map size, so no growth shrinks the input of a layer that has learned (a pool
    # inserted later re-initialises fc1) and every default event preserves the function. The
    # 7x7 map also keeps fc1 small: an epoch of this network costs 0.36 of one of the default
    # network on 2 CPU threads, against 0.53 with a single pool.
    return [
        {"id": "conv1", "type": "conv", "out_channels": 32},
        {"id": "pool1", "type": "pool"},
        {"id": "pool2", "type": "pool"},
        {"id": "fc1", "type": "fc", "out_features": 128},
    ]


def _default_final() -> list[dict]:
    # The default final architecture: what the minimal model grows into under the default
    # schedule, and what train_static trains by default. Two conv stages, each closed by a pool,
    # a residual block at 7x7 (cheap there), dropout before the head.
    return [
        {"id": "conv1", "type": "conv", "out_channels": 32},
        {"id": "pool1", "type": "pool"},
        {"id": "conv2", "type": "conv", "out_channels": 64},
        {"id": "pool2", "type": "pool"},
        {"id": "res1", "type": "residual"},
        {"id": "fc1", "type": "fc", "out_features": 128},
        {"id": "drop1", "type": "dropout", "p": 0.3},
    ]


def _tiny() -> list[dict]:
    # A very small network for smoke runs and tests.
    return [
        {"id": "conv1", "type": "conv", "out_channels": 8},
        {"id": "pool1", "type": "pool"},
        {"id": "fc1", "type": "fc", "out_features": 32},
    ]


def _batchnormed(layers: list[dict]) -> list[dict]:
    """The same network with every conv layer a convbn (convolution, batchnorm, ReLU)."""
    return [{**layer, "type": "convbn"} if layer["type"] == "conv" else layer for layer in layers]


# The -bn pair (minimal-bn grows into default-bn under the default-bn schedule) normalises every
# conv layer, the growing and the static arm alike: on CIFAR-10 growth into plain convs at the
# peak learning rate knocked training down (issue 35).
NAMED_SPECS = {
    "minimal": _minimal,
    "default": _default_final,
    "tiny": _tiny,
    "minimal-bn": lambda: _batchnormed(_minimal()),
    "default-bn": lambda: _batchnormed(_default_final()),
    # the residual family for 3x32x32 data (models/resnet.py): the baseline and its two starts,
    # shallow (grown by inserting blocks) and narrow (grown by widening stages)
    "resnet": lambda: resnet.resnet_layers(resnet.FINAL_BLOCKS),
    "resnet-start": lambda: resnet.resnet_layers(resnet.START_BLOCKS),
    "resnet-narrow": lambda: resnet.resnet_layers(resnet.FINAL_BLOCKS, resnet.NARROW_WIDTHS),
    # the residual family for short runs (models/resnet_short.py): wide and shallow, and its
    # two starts, without the residual blocks and at half the widths
    "resnet-short": resnet_short.short_layers,
    "resnet-short-start": lambda: resnet_short.short_layers(residual=False),
    "resnet-short-narrow": resnet_short.narrow_layers,
    # the baseline with airbench's patch-whitening stem (models/layers/whiten.py), and its start
    # at half the groups' widths (the stem, fitted to the images, keeps its 24 channels)
    "resnet-short-whiten": lambda: resnet_short.short_layers(whiten=True),
    "resnet-short-whiten-narrow": lambda: resnet_short.narrow_layers(whiten=True),
    # airbench93's layout (models/short_convs.py): two GELU convolutions a group, no residual
    # blocks, and its start at half the groups' widths
    "short-convs": short_convs.layers,
    "short-convs-narrow": short_convs.narrow_layers,
    # the same, each group's first convolution pooling before its batchnorm (airbench's order)
    "short-convs-poolbn": lambda: short_convs.layers(pool_first=True),
    "short-convs-poolbn-narrow": lambda: short_convs.narrow_layers(pool_first=True),
    # the same layout with airbench's head: a global max-pool where short-convs averages
    "short-convs-maxhead": lambda: short_convs.layers(head="max"),
    "short-convs-maxhead-narrow": lambda: short_convs.narrow_layers(head="max"),
}


def named_layers(name: str) -> list[dict]:
    if name not in NAMED_SPECS:
        raise SpecError(f"unknown spec {name!r} (known: {', '.join(sorted(NAMED_SPECS))})")
    return NAMED_SPECS[name]()


def resolve_spec(text: str, input_shape: tuple[int, int, int], num_classes: int) -> ArchSpec:
    """A spec from a registry name, a JSON file or a JSON string, fitted to the data's shape.

    A JSON object may be a whole spec or just ``{"layers": [...]}``; a JSON list is the layers.
    A spec that names its own input shape or class count must agree with the data.
    """
    text = text.strip()
    if text in NAMED_SPECS:
        spec = ArchSpec(input_shape, num_classes, tuple(named_layers(text)), name=text)
        return validate(spec)
    if text.startswith(("{", "[")):
        source = "spec JSON"
        raw = text
    else:
        path = Path(text)
        if not path.is_file():
            raise SpecError(
                f"--spec {text!r} is neither a known spec ({', '.join(sorted(NAMED_SPECS))}), "
                "a JSON file nor a JSON string"
            )
        source = str(path)
        raw = path.read_text()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise SpecError(f"{source} is not valid JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:  # json recurses per nesting level: a bracket bomb is bad input, not a bug
        raise SpecError(f"{source} is nested too deeply to be read") from None
    if isinstance(data, list):
        data = {"layers": data}
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise SpecError(f"{source} must be a list of layers or an object with a 'layers' list")
    for key, expected in (("input_shape", list(input_shape)), ("num_classes", num_classes)):
        if key in data and data[key] != expected:
            raise SpecError(f"{source}: {key} {data[key]} does not match the data's {expected}")
    spec = ArchSpec(
        input_shape,
        num_classes,
        tuple(data["layers"]),
        str(data.get("name", "custom")),
        tuple(data.get("exits", ())),
    )
    return validate(spec)

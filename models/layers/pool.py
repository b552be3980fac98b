"""pool: max or average pooling."""

from __future__ import annotations

from torch import nn

from models.layers.base import (
    LayerType,
    Shape,
    SpecError,
    always,
    needs_map,
    no_params,
    positive_int,
    reads_nothing,
)

POOL_KINDS = ("max", "avg")


def _pool_shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    lid = layer["id"]
    if layer["kind"] not in POOL_KINDS:
        raise SpecError(f"layer {lid!r}: pool kind must be one of {POOL_KINDS}, got {layer['kind']!r}")
    size = positive_int(layer, "size")
    c, h, w = in_shape
    if h // size < 1 or w // size < 1:
        raise SpecError(f"layer {lid!r}: pool of size {size} would shrink the {h}x{w} map below 1x1")
    return (c, h // size, w // size)


POOL = LayerType(
    name="pool",
    fields={"kind": "max", "size": 2},
    output_shape=_pool_shape,
    build=lambda layer, s: (nn.MaxPool2d if layer["kind"] == "max" else nn.AvgPool2d)(layer["size"]),
    params=no_params,
    activations=1,
    reads=reads_nothing,
    # a pool of size 1 is the only one that keeps the map
    identity=lambda module, layer, s, nonneg_in: _pool_shape(layer, s) == tuple(s),
    widen=always,  # no parameters; it acts per channel
    id_prefix="pool",
    feature_map=True,
    nonneg=None,
)

"""dropout: the identity in eval mode."""

from __future__ import annotations

from torch import nn

from models.layers.base import LayerType, Search, Shape, SpecError, always, no_params, reads_nothing


def _dropout_shape(layer: dict, in_shape: Shape) -> Shape:
    p = layer["p"]
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p < 1.0:
        raise SpecError(f"layer {layer['id']!r}: dropout p must be in [0, 1), got {p!r}")
    return in_shape


DROPOUT = LayerType(
    name="dropout",
    fields={"p": 0.25},
    output_shape=_dropout_shape,
    build=lambda layer, s: nn.Dropout(layer["p"]),
    params=no_params,
    activations=2,  # its output and the mask
    reads=reads_nothing,
    identity=always,  # the identity in eval mode
    widen=always,  # no parameters; it acts per element
    id_prefix="drop",
    feature_map=False,
    nonneg=None,
    search=Search("p", "p", span=(0.1, 0.5)),
)

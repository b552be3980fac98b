"""scale: multiply by a constant, a layer with no parameters.

airbench (Jordan 2024) multiplies its logits by 1/9: with a scale before the head, the head's
weights see inputs 9 times smaller, so at the large learning rates of its short runs the
logits move slowly while the batchnormed body, whose scale does not matter, moves fast.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.layers.base import LayerType, Shape, SpecError, always, no_params, reads_nothing


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


def _shape(layer: dict, in_shape: Shape) -> Shape:
    factor = layer["factor"]
    # bool is an int to Python; a factor <= 0 would flip or erase what follows
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < math.inf:
        raise SpecError(f"layer {layer['id']!r}: factor must be a positive finite number, got {factor!r}")
    return tuple(in_shape)


SCALE = LayerType(
    name="scale",
    fields={"factor": None},
    output_shape=_shape,
    build=lambda layer, s: Scale(float(layer["factor"])),
    params=no_params,
    activations=1,
    reads=reads_nothing,
    identity=lambda module, layer, s, nonneg_in: layer["factor"] == 1,
    widen=always,  # no parameters; it acts per element
    id_prefix="scale",
    feature_map=False,  # where a spec uses it: between the pooled features and the head
    nonneg=None,  # a positive factor keeps the sign
    searched=False,
    growable=False,  # part of a layout from its start, as the head's pooling is
)

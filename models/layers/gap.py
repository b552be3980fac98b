"""gap: global average pooling, a feature map (C, H, W) to its C channel means.

The head of a residual network: the classifier then reads one number a channel, whatever the
map's size, instead of fc's flattened map (He et al. 2016; Lin et al. 2014).
"""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import LayerType, Shape, always, needs_map, no_params, reads_nothing


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C)
        return x.mean((2, 3))


def _shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    return (in_shape[0],)


GAP = LayerType(
    name="gap",
    fields={},
    output_shape=_shape,
    build=lambda layer, s: GlobalAvgPool(),
    params=no_params,
    activations=1,
    reads=reads_nothing,
    # a 1x1 map's mean is the map itself: the identity, flattened as the head would
    identity=lambda module, layer, s, nonneg_in: tuple(s[1:]) == (1, 1),
    widen=always,  # no parameters; it acts per channel
    id_prefix="gap",
    feature_map=False,  # it flattens: growth's feature-map layers go before it
    nonneg=None,
    searched=False,
    growable=False,
)

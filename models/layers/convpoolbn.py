"""convpoolbn: airbench's first convolution of a group (Jordan 2024, ``ConvGroup``): a
same-padding convolution, a max-pool, then batchnorm and the activation on the pooled map.

``convbn`` followed by a ``pool`` layer pools after the activation instead: its batchnorm
normalises over four times as many positions, and, GELU not being monotone (it dips below 0
left of about -0.75), the largest of four activations is not always the activation of the
largest input. This type is airbench's order, so the two can be told apart on data. Never an
identity (the pool changes the map); widened as ``convbn`` is; ``--conv-init dirac`` sets it as
it does a ``convbn`` (it is one, pooled).
"""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import LayerType, Search, Shape, SpecError, positive_int, reads_channels
from models.layers.convbn import ConvBnLayer, convbn_params, convbn_shape, widen_convbn


class ConvPoolBnLayer(ConvBnLayer):
    """Convolution (no bias), max-pool of ``pool``, batchnorm, then ReLU or GELU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, activation: str, pool: int):
        super().__init__(in_channels, out_channels, kernel_size, activation)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, out, H/pool, W/pool)
        return self._act(self.bn(nn.functional.max_pool2d(self.conv(x), self.pool)))


def _shape(layer: dict, in_shape: Shape) -> Shape:
    channels, h, w = convbn_shape(layer, in_shape)
    pool = positive_int(layer, "pool")
    if h // pool < 1 or w // pool < 1:
        raise SpecError(f"layer {layer['id']!r}: pool of {pool} would shrink the {h}x{w} map below 1x1")
    return (channels, h // pool, w // pool)


CONVPOOLBN = LayerType(
    name="convpoolbn",
    fields={"out_channels": None, "kernel_size": 3, "activation": "gelu", "pool": 2},
    output_shape=_shape,
    build=lambda layer, s: ConvPoolBnLayer(
        s[0], layer["out_channels"], layer["kernel_size"], layer["activation"], layer["pool"]
    ),
    params=convbn_params,
    # per pooled output element: the convolution's output (pool^2 = 4 of them at pool 2), the
    # pool's, the batchnorm's and the activation's
    activations=7,
    reads=reads_channels,
    identity=lambda module, layer, s, nonneg_in: False,  # the pool changes the map
    widen=widen_convbn,
    id_prefix="convpool",
    feature_map=True,
    nonneg=lambda layer: layer["activation"] == "relu",
    search=Search("out_channels", "channels", choices=(16, 32, 64, 128)),
    searched=False,
    # part of a layout from its start (as airbench's groups are): growth widens it, never inserts
    # one, since a pool inserted mid-run would halve the map every later layer was built for
    growable=False,
)

"""conv: a same-padding convolution, then ReLU."""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import (
    LayerType,
    Search,
    Shape,
    kept_channels,
    needs_map,
    odd_kernel,
    positive_int,
    reads_channels,
)


class ConvLayer(nn.Module):
    """Same-padding convolution followed by ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def conv_shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    odd_kernel(layer)
    return (positive_int(layer, "out_channels"), in_shape[1], in_shape[2])


def _conv_params(layer: dict, in_shape: Shape) -> int:
    k = layer["kernel_size"]
    return in_shape[0] * layer["out_channels"] * k * k + layer["out_channels"]


@torch.no_grad()
def _conv_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    weight, channels = module.conv.weight, in_shape[0]  # (out, in, k, k)
    if not nonneg_in or weight.shape[0] < channels:  # the ReLU would clip a negative input
        return False
    centre = weight.shape[-1] // 2
    weight[:channels].zero_()
    weight[range(channels), range(channels), centre, centre] = 1.0
    module.conv.bias[:channels].zero_()
    return True


@torch.no_grad()
def _conv_widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    channels = kept_channels(old_in, new_in)
    if channels is None:
        return False
    new.conv.weight[:, :channels] = old.conv.weight
    new.conv.weight[:, channels:] = 0.0
    new.conv.bias.copy_(old.conv.bias)
    return True


CONV = LayerType(
    name="conv",
    fields={"out_channels": None, "kernel_size": 3},
    output_shape=conv_shape,
    build=lambda layer, s: ConvLayer(s[0], layer["out_channels"], layer["kernel_size"]),
    params=_conv_params,
    activations=2,  # the conv and the ReLU outputs
    reads=reads_channels,
    identity=_conv_identity,
    widen=_conv_widen,
    id_prefix="conv",
    feature_map=True,
    nonneg=True,
    search=Search("out_channels", "channels", choices=(16, 32, 64, 128)),
)

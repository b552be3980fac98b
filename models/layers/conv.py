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
def copy_input(conv: nn.Conv2d, channels: int, nonneg_in: bool) -> bool:
    """Make the first ``channels`` outputs of ``conv`` copy its input (centre tap 1): what a conv
    inserted by growth starts as (conv and convbn). False where the ReLU after it would clip a
    negative input or it has fewer outputs than inputs."""
    weight = conv.weight  # (out, in, k, k)
    if not nonneg_in or weight.shape[0] < channels:
        return False
    centre = weight.shape[-1] // 2
    weight[:channels].zero_()
    weight[range(channels), range(channels), centre, centre] = 1.0
    return True


@torch.no_grad()
def widen_input(old: nn.Conv2d, new: nn.Conv2d, old_in: Shape, new_in: Shape) -> bool:
    """``new`` reads the old channels with ``old``'s weights and the added ones with zeros."""
    channels = kept_channels(old_in, new_in)
    if channels is None:
        return False
    new.weight[:, :channels] = old.weight
    new.weight[:, channels:] = 0.0
    return True


@torch.no_grad()
def _conv_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    if not copy_input(module.conv, in_shape[0], nonneg_in):
        return False
    module.conv.bias[: in_shape[0]].zero_()
    return True


@torch.no_grad()
def _conv_widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    if not widen_input(old.conv, new.conv, old_in, new_in):
        return False
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

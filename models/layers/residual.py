"""residual: a basic block that keeps the channel count."""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import (
    LayerType,
    Shape,
    copy_batchnorm,
    kept_channels,
    needs_map,
    odd_kernel,
    reads_channels,
)


class ResidualLayer(nn.Module):
    """Basic residual block (He et al. 2016): relu(x + bn2(conv2(relu(bn1(conv1(x))))))."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = nn.Conv2d(channels, channels, kernel_size, padding=pad, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size, padding=pad, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


def _residual_shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    odd_kernel(layer)
    return in_shape


@torch.no_grad()
def _residual_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    if not nonneg_in:  # the ReLU would clip a negative input
        return False
    module.bn2.weight.zero_()  # relu(x + 0 * bn2(...)) = x for x >= 0 (zero-gamma, Goyal et al. 2017)
    return True


@torch.no_grad()
def _residual_widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    channels = kept_channels(old_in, new_in)
    if channels is None:
        return False
    for name in ("conv1", "conv2"):  # old channels read only old channels, in both convs
        getattr(new, name).weight[:channels, :channels] = getattr(old, name).weight
        getattr(new, name).weight[:channels, channels:] = 0.0
    copy_batchnorm(old.bn1, new.bn1, channels)
    copy_batchnorm(old.bn2, new.bn2, channels)
    return True


RESIDUAL = LayerType(
    name="residual",
    fields={"kernel_size": 3},
    output_shape=_residual_shape,
    build=lambda layer, s: ResidualLayer(s[0], layer["kernel_size"]),
    # two bias-free convs, two batchnorms
    params=lambda layer, s: 2 * s[0] * s[0] * layer["kernel_size"] ** 2 + 4 * s[0],
    activations=7,  # two convs, two batchnorms, the sum and two ReLUs
    reads=reads_channels,
    identity=_residual_identity,
    widen=_residual_widen,
    id_prefix="res",
    feature_map=True,
    nonneg=True,
)

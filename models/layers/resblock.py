"""resblock: a basic residual block that may change the width or the resolution of its map.

The ``residual`` type keeps its input's shape, so its shortcut is the identity; a ResNet also
needs the block that opens each stage, halving the map and widening it (He et al. 2016). Here its
shortcut is a 1x1 convolution with batchnorm (their option B), used only where the shape changes:
with ``stride`` 1 and its input's channel count the block is exactly a ``residual`` one.
"""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import (
    LayerType,
    Search,
    Shape,
    SpecError,
    copy_batchnorm,
    kept_channels,
    needs_map,
    odd_kernel,
    positive_int,
    reads_channels,
)

STRIDES = (1, 2)


class ResBlockLayer(nn.Module):
    """relu(shortcut(x) + bn2(conv2(relu(bn1(conv1(x)))))), conv1 striding; the shortcut is a
    1x1 conv and batchnorm where the shape changes, else the identity."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int):
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size, stride, pad, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size, padding=pad, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C', H/s, W/s)
        out = torch.relu(self.bn1(self.conv1(x)))
        skip = x if self.shortcut is None else self.shortcut(x)
        return torch.relu(skip + self.bn2(self.conv2(out)))


def _out_channels(layer: dict, in_shape: Shape) -> int:
    # 0 keeps the input's width: the block a stage repeats, written without knowing the stage
    return in_shape[0] if layer["out_channels"] == 0 else positive_int(layer, "out_channels")


def _shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    odd_kernel(layer)
    if layer["out_channels"] != 0:
        positive_int(layer, "out_channels")
    stride = layer["stride"]
    if stride not in STRIDES:
        raise SpecError(f"layer {layer['id']!r}: stride must be one of {STRIDES}, got {stride!r}")
    _, h, w = in_shape
    if h < stride or w < stride:
        raise SpecError(f"layer {layer['id']!r}: stride {stride} would shrink the {h}x{w} map below 1x1")
    # conv1 pads by k // 2 and strides: ceil(h / s) rows, as the 1x1 shortcut gives
    return (_out_channels(layer, in_shape), -(-h // stride), -(-w // stride))


def _params(layer: dict, in_shape: Shape) -> int:
    c_in, c_out, k = in_shape[0], _out_channels(layer, in_shape), layer["kernel_size"]
    convs = c_in * c_out * k * k + c_out * c_out * k * k + 4 * c_out
    projected = layer["stride"] != 1 or c_in != c_out
    return convs + (c_in * c_out + 2 * c_out if projected else 0)


@torch.no_grad()
def _identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    # only a shape-keeping block can start as the identity: relu(x + 0 * bn2(...)) = x for x >= 0
    if module.shortcut is not None or not nonneg_in:
        return False
    module.bn2.weight.zero_()
    return True


@torch.no_grad()
def _widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    """The input gained trailing channels: conv1 and the projection read them with zeros and the
    rest of the block is copied. A block whose shortcut was the identity cannot keep its
    function once the widths differ (it gains a projection), so it is not widened."""
    channels = kept_channels(old_in, new_in)
    if channels is None or old.shortcut is None or new.shortcut is None:
        return False
    new.conv1.weight[:, :channels] = old.conv1.weight
    new.conv1.weight[:, channels:] = 0.0
    new.shortcut[0].weight[:, :channels] = old.shortcut[0].weight
    new.shortcut[0].weight[:, channels:] = 0.0
    new.conv2.weight.copy_(old.conv2.weight)
    for name in ("bn1", "bn2"):
        copy_batchnorm(getattr(old, name), getattr(new, name), getattr(old, name).num_features)
    copy_batchnorm(old.shortcut[1], new.shortcut[1], old.shortcut[1].num_features)
    return True


RESBLOCK = LayerType(
    name="resblock",
    fields={"out_channels": 0, "stride": 1, "kernel_size": 3},
    output_shape=_shape,
    build=lambda layer, s: ResBlockLayer(
        s[0], _out_channels(layer, s), layer["stride"], layer["kernel_size"]
    ),
    params=_params,
    activations=9,  # residual's seven, and the projection's conv and batchnorm
    reads=reads_channels,
    identity=_identity,
    widen=_widen,
    id_prefix="block",
    feature_map=True,
    nonneg=True,
    search=Search("out_channels", "channels", choices=(16, 32, 64, 128)),
    searched=False,  # tune's default layer types stay those its studies were run with
)

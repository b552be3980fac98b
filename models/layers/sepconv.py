"""sepconv: a depthwise-separable convolution, then ReLU."""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import LayerType, Shape, kept_channels, reads_channels
from models.layers.conv import CONV, conv_shape


class SepConvLayer(nn.Module):
    """Depthwise-separable convolution (MobileNet, Howard et al. 2017): a k x k convolution of
    each channel on its own, a 1x1 convolution across channels, then ReLU. A conv's shape for
    about 1/k^2 of its multiplications (out_channels >> k^2)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        pad = kernel_size // 2
        # no depthwise bias: the pointwise bias absorbs it
        self.depthwise = nn.Conv2d(
            in_channels, in_channels, kernel_size, padding=pad, groups=in_channels, bias=False
        )
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.pointwise(self.depthwise(x)))


@torch.no_grad()
def _sepconv_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    depthwise, pointwise, channels = module.depthwise.weight, module.pointwise.weight, in_shape[0]
    if not nonneg_in or pointwise.shape[0] < channels:  # the ReLU would clip a negative input
        return False
    centre = depthwise.shape[-1] // 2
    depthwise.zero_()  # (C, 1, k, k): each channel passes through its own filter unchanged
    depthwise[:, 0, centre, centre] = 1.0
    pointwise[:channels].zero_()  # (out, C, 1, 1)
    pointwise[range(channels), range(channels), 0, 0] = 1.0
    module.pointwise.bias[:channels].zero_()
    return True


@torch.no_grad()
def _sepconv_widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    channels = kept_channels(old_in, new_in)
    if channels is None:
        return False
    new.depthwise.weight[:channels] = old.depthwise.weight  # new channels' filters: read by nothing
    new.pointwise.weight[:, :channels] = old.pointwise.weight
    new.pointwise.weight[:, channels:] = 0.0
    new.pointwise.bias.copy_(old.pointwise.bias)
    return True


SEPCONV = LayerType(
    name="sepconv",
    fields={"out_channels": None, "kernel_size": 3},
    output_shape=conv_shape,
    build=lambda layer, s: SepConvLayer(s[0], layer["out_channels"], layer["kernel_size"]),
    params=lambda layer, s: s[0] * layer["kernel_size"] ** 2 + (s[0] + 1) * layer["out_channels"],
    activations=3,  # the depthwise, pointwise and ReLU outputs
    reads=reads_channels,
    identity=_sepconv_identity,
    widen=_sepconv_widen,
    id_prefix="sep",
    feature_map=True,
    nonneg=True,
    search=CONV.search,
    # not in tune's default: a study keeps its search space, so a new type joins only when asked
    searched=False,
)

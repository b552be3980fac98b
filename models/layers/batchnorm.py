"""batchnorm: on a feature map (2d) or on features (1d)."""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import LayerType, Shape, copy_batchnorm, kept_channels, reads_channels


@torch.no_grad()
def _batchnorm_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    module.weight.fill_(1.0)
    module.bias.zero_()
    module.running_mean.zero_()
    module.running_var.fill_(1.0 - module.eps)  # (x - 0) / sqrt(1 - eps + eps) = x
    return True


@torch.no_grad()
def _batchnorm_widen(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    channels = kept_channels(old_in, new_in)
    if channels is None:
        return False
    copy_batchnorm(old, new, channels)
    return True


BATCHNORM = LayerType(
    name="batchnorm",
    fields={},
    output_shape=lambda layer, s: s,
    build=lambda layer, s: nn.BatchNorm2d(s[0]) if len(s) == 3 else nn.BatchNorm1d(s[0]),
    params=lambda layer, s: 2 * s[0],
    activations=1,
    reads=reads_channels,
    identity=_batchnorm_identity,
    widen=_batchnorm_widen,
    id_prefix="bn",
    feature_map=True,
    nonneg=False,
)

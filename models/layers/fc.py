"""fc: fully connected, then ReLU; flattens a feature map first. The classifier head is one too."""

from __future__ import annotations

import math

import torch
from torch import nn

from models.layers.base import LayerType, Search, Shape, positive_int


def _flat(in_shape: Shape) -> tuple:
    return (math.prod(in_shape),)


class LinearLayer(nn.Module):
    """Fully connected layer; flattens a feature map first. ReLU unless it is the head."""

    def __init__(self, in_features: int, out_features: int, relu: bool):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x.flatten(1))
        return torch.relu(out) if self.relu else out


@torch.no_grad()
def _fc_identity(module: nn.Module, layer: dict, in_shape: Shape, nonneg_in: bool) -> bool:
    weight, features = module.linear.weight, math.prod(in_shape)  # (out, in)
    if not nonneg_in or weight.shape[0] < features:  # the ReLU would clip a negative input
        return False
    weight[:features].zero_()
    weight[range(features), range(features)] = 1.0
    module.linear.bias[:features].zero_()
    return True


@torch.no_grad()
def widen_linear(old: nn.Module, new: nn.Module, old_in: Shape, new_in: Shape) -> bool:
    """``widen`` for fc and for the classifier head, both ``LinearLayer``s."""
    features = math.prod(old_in)  # flattening is channel-major, so old features come first
    if math.prod(new_in) < features:
        return False
    new.linear.weight[:, :features] = old.linear.weight
    new.linear.weight[:, features:] = 0.0
    new.linear.bias.copy_(old.linear.bias)
    return True


FC = LayerType(
    name="fc",
    fields={"out_features": None},
    output_shape=lambda layer, s: (positive_int(layer, "out_features"),),
    build=lambda layer, s: LinearLayer(math.prod(s), layer["out_features"], relu=True),
    params=lambda layer, s: math.prod(s) * layer["out_features"] + layer["out_features"],
    activations=2,  # the linear and the ReLU outputs
    reads=_flat,
    identity=_fc_identity,
    widen=widen_linear,
    id_prefix="fc",
    feature_map=False,
    nonneg=True,
    search=Search("out_features", "features", choices=(64, 128, 256)),
)

"""Build an ``nn.Module`` from an ``ArchSpec``.

Each layer of the spec becomes one entry of ``SpecNet.layers`` (a ModuleDict keyed by layer id),
so parameter names are ``layers.<id>.<param>`` whatever order the layers were added in.
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import HEAD_ID, ArchSpec, check_size, infer_shapes


class ConvLayer(nn.Module):
    """Same-padding convolution followed by ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


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


class LinearLayer(nn.Module):
    """Fully connected layer; flattens a feature map first. ReLU unless it is the head."""

    def __init__(self, in_features: int, out_features: int, relu: bool):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x.flatten(1))
        return torch.relu(out) if self.relu else out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for v in shape:
        n *= v
    return n


def make_layer(layer: dict, in_shape: tuple[int, ...]) -> nn.Module:
    """One layer's module for an input of ``in_shape`` ((C, H, W) or (F,))."""
    kind = layer["type"]
    if kind == "conv":
        return ConvLayer(in_shape[0], layer["out_channels"], layer["kernel_size"])
    if kind == "residual":
        return ResidualLayer(in_shape[0], layer["kernel_size"])
    if kind == "pool":
        pool = nn.MaxPool2d if layer["kind"] == "max" else nn.AvgPool2d
        return pool(layer["size"])
    if kind == "dropout":
        return nn.Dropout(layer["p"])
    if kind == "fc":
        return LinearLayer(_numel(in_shape), layer["out_features"], relu=True)
    if kind == "batchnorm":
        return nn.BatchNorm2d(in_shape[0]) if len(in_shape) == 3 else nn.BatchNorm1d(in_shape[0])
    raise ValueError(f"unknown layer type {kind!r}")


def make_head(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return LinearLayer(_numel(in_shape), num_classes, relu=False)


def layer_signature(layer: dict, in_shape: tuple[int, ...]) -> tuple:
    """What fixes a layer's parameter shapes; a module can be reused when this is unchanged.

    Convolutions and batchnorm depend on the channel count, not the map size, so a pool
    inserted upstream leaves them reusable; a linear layer depends on the flattened size.
    """
    kind = layer["type"] if layer is not None else "head"
    if kind in ("fc", "head"):
        reads: tuple = (_numel(in_shape),)
    elif kind in ("pool", "dropout"):
        reads = ()
    else:
        reads = (in_shape[0], len(in_shape))
    return (tuple(sorted((layer or {}).items())), reads)


class SpecNet(nn.Module):
    """A network built from a spec; ``spec`` travels with it for saving and growth."""

    def __init__(self, spec: ArchSpec, modules: dict[str, nn.Module] | None = None):
        """Build every layer afresh, or take existing ``modules`` by id (growth reuses them)."""
        super().__init__()
        shapes = infer_shapes(spec)
        if not modules:  # refuse before allocating: a 10^9-channel layer would take the machine
            check_size(spec)
        self.spec = spec
        self.layers = nn.ModuleDict()
        for layer, in_shape in zip(spec.layers, shapes):
            lid = layer["id"]
            self.layers[lid] = modules[lid] if modules else make_layer(layer, in_shape)
        self.layers[HEAD_ID] = modules[HEAD_ID] if modules else make_head(shapes[-1], spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, num_classes)
        for module in self.layers.values():
            x = module(x)
        return x


def build_model(spec: ArchSpec) -> SpecNet:
    return SpecNet(spec)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

"""convbn: a same-padding convolution, batch normalisation, then ReLU (or GELU).

The conv layer without normalisation trains well from scratch but is fragile once grown into:
on CIFAR-10 a network that grew a plain conv at the peak learning rate fell from 0.63 to 0.10
validation accuracy (issue 35). Batch normalisation makes each layer's step size independent of
its input's scale. Inserted by growth it starts as an exact identity in eval mode and, once
``calibrate`` has seen a training batch, as a near identity in train mode too.

``activation: gelu`` is airbench's (Jordan 2024): its batchnorm shifts train at 64 times the
rate, and a large negative shift would silence a ReLU unit for good, where GELU still passes a
gradient. A GELU layer is never an identity (GELU(x) differs from x), and its output may be
negative.
"""

from __future__ import annotations

import torch
from torch import nn

from models.layers.base import LayerType, Search, Shape, SpecError, copy_batchnorm, reads_channels
from models.layers.conv import conv_shape, copy_input, widen_input

ACTIVATIONS = {"relu": torch.relu, "gelu": nn.functional.gelu}


class ConvBnLayer(nn.Module):
    """Same-padding convolution (no bias: the batchnorm's shift replaces it), batchnorm, ReLU
    (or GELU)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, activation: str = "relu"):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.activation = activation
        self._act = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._act(self.bn(self.conv(x)))


@torch.no_grad()
def dirac_init(model: nn.Module) -> int:
    """airbench's identity start: in every convbn of ``model`` (a convpoolbn is one, pooled),
    the first filters (as many as the convolution has input channels, or all it has) copy one
    input channel each at the centre tap, so the network starts close to a stack of identities
    whose other filters learn the rest. Returns how many layers it set."""
    layers = [module for module in model.modules() if isinstance(module, ConvBnLayer)]
    for layer in layers:
        weight = layer.conv.weight  # (out, in, k, k)
        nn.init.dirac_(weight[: weight.shape[1]])
    return len(layers)


def convbn_shape(layer: dict, in_shape: Shape) -> Shape:
    activation = layer["activation"]
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        known = ", ".join(ACTIVATIONS)
        raise SpecError(f"layer {layer['id']!r}: activation must be one of {known}, got {activation!r}")
    return conv_shape(layer, in_shape)


def convbn_params(layer: dict, in_shape) -> int:
    k = layer["kernel_size"]
    return in_shape[0] * layer["out_channels"] * k * k + 2 * layer["out_channels"]


@torch.no_grad()
def _identity(module: nn.Module, layer: dict, in_shape, nonneg_in: bool) -> bool:
    """The first ``C`` output channels copy the input and the batchnorm passes them through in
    eval mode (mean 0, variance 1 - eps, scale 1, shift 0); ``calibrate`` then fits the
    batchnorm to the data so that train mode keeps the function too. Only with ReLU."""
    if layer["activation"] != "relu":
        return False
    channels = in_shape[0]
    if not copy_input(module.conv, channels, nonneg_in):
        return False
    bn = module.bn
    bn.weight[:channels] = 1.0
    bn.bias[:channels] = 0.0
    bn.running_mean[:channels] = 0.0
    bn.running_var[:channels] = 1.0 - bn.eps
    return True


@torch.no_grad()
def _calibrate(module: nn.Module, x: torch.Tensor) -> None:
    """Fit a freshly inserted identity's batchnorm to its input ``x`` (B, C, H, W): each copied
    channel is normalised by its own mean and variance and scaled straight back (scale
    sqrt(var + eps), shift mean), so train mode, which normalises by the batch's statistics,
    computes nearly the identity as well, and eval mode exactly; the extra channels start
    normalised (scale 1, shift 0) with their running statistics measured."""
    out = module.conv(x)  # (B, out, H, W)
    mean, var = out.mean((0, 2, 3)), out.var((0, 2, 3), unbiased=False)
    bn, channels = module.bn, min(x.shape[1], out.shape[1])
    bn.running_mean.copy_(mean)
    bn.running_var.copy_(var)
    bn.weight[:channels] = (var[:channels] + bn.eps).sqrt()
    bn.bias[:channels] = mean[:channels]


@torch.no_grad()
def widen_convbn(old: nn.Module, new: nn.Module, old_in, new_in) -> bool:
    if not widen_input(old.conv, new.conv, old_in, new_in):
        return False
    copy_batchnorm(old.bn, new.bn, old.bn.num_features)  # the outputs are the same channels
    return True


CONVBN = LayerType(
    name="convbn",
    fields={"out_channels": None, "kernel_size": 3, "activation": "relu"},
    output_shape=convbn_shape,
    build=lambda layer, s: ConvBnLayer(
        s[0], layer["out_channels"], layer["kernel_size"], layer["activation"]
    ),
    params=convbn_params,
    activations=3,  # the conv, the batchnorm and the activation's outputs
    reads=reads_channels,
    identity=_identity,
    widen=widen_convbn,
    id_prefix="conv",
    feature_map=True,
    nonneg=lambda layer: layer["activation"] == "relu",  # GELU dips below 0
    search=Search("out_channels", "channels", choices=(16, 32, 64, 128)),
    searched=False,  # tune's default layer types stay those its studies were run with
    calibrate=_calibrate,
)

"""whiten: a frozen patch-whitening convolution fitted to the training images, then ReLU.

airbench's first layer (Jordan 2024, arXiv 2404.00498; after Coates & Ng 2011): a kernel-k
convolution without padding whose filters are the eigenvectors of the training images' k x k
patch covariance, each scaled by 1/sqrt(eigenvalue + eps), so that its outputs over the
training patches are decorrelated and of unit variance: the next layers start from features of
equal scale instead of the pixels' strongly correlated ones. Each filter comes twice, with
either sign, so the ReLU after it drops nothing (C k^2 filters give 2 C k^2 channels: 24 for RGB
and k = 2). The filters are a buffer, never trained (airbench freezes them too); the bias is a
parameter and trains (for the first epochs only with ``--whiten-bias-epochs``:
``pipeline/training/stem.py``).

A freshly built layer has random filters; ``fit`` sets them from a batch of images, which
training does before its first step from up to 5,000 of the images it may train on
(``pipeline/training/epoch_loop.py``): never validation or test images, nor a cross-fit fold's
held-out ones. A resumed run keeps the fitted filters from its checkpoint, and the logged model
from its weights. It must be a network's first layer (the spec refuses it elsewhere), so growth
can neither insert it nor change what it sees.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from models.layers.base import LayerType, Shape, SpecError, needs_map, positive_int, reads_channels

CHUNK = 500  # images whose patches are unfolded at once (about 46 MB of float64 for 32x32 RGB, k 2)


class WhitenLayer(nn.Module):
    """Unpadded convolution by fixed whitening filters (a buffer), a trained bias, ReLU."""

    def __init__(self, in_channels: int, kernel_size: int, eps: float):
        super().__init__()
        self.eps = eps
        patch = in_channels * kernel_size * kernel_size
        filters = torch.randn(2 * patch, in_channels, kernel_size, kernel_size) / patch**0.5
        self.register_buffer("weight", filters)
        self.bias = nn.Parameter(torch.zeros(2 * patch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(x, self.weight.to(x.dtype), self.bias.to(x.dtype)))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        """Set the filters from the k x k patches of ``x`` (B, C, H, W): the eigenvectors of their
        (uncentred, as airbench's) covariance, largest eigenvalue first, scaled to unit output
        variance, then the same filters negated."""
        out, c, k, _ = self.weight.shape
        # on the CPU in float64, which MPS lacks: a 12 x 12 eigenproblem needs no accelerator
        covariance = torch.zeros(out // 2, out // 2, dtype=torch.float64)
        for chunk in x.split(CHUNK):
            patches = F.unfold(chunk.detach().cpu().double(), k)  # (B, C k^2, patches per image)
            flat = patches.transpose(1, 2).reshape(-1, out // 2)
            covariance += flat.T @ flat
        covariance /= x.shape[0] * patches.shape[-1]
        eigenvalues, eigenvectors = torch.linalg.eigh(covariance)  # ascending
        filters = (eigenvectors.T / (eigenvalues[:, None].clamp_min(0) + self.eps).sqrt()).flip(0)
        filters = filters.reshape(out // 2, c, k, k)
        self.weight.copy_(torch.cat((filters, -filters)).to(self.weight.dtype))


def _shape(layer: dict, in_shape: Shape) -> Shape:
    needs_map(layer, in_shape)
    lid, k = layer["id"], positive_int(layer, "kernel_size")
    eps = layer["eps"]
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise SpecError(f"layer {lid!r}: eps must be a positive number, got {eps!r}")
    c, h, w = in_shape
    if h < k or w < k:
        raise SpecError(f"layer {lid!r}: whiten's {k}x{k} patches do not fit the {h}x{w} map")
    return (2 * c * k * k, h - k + 1, w - k + 1)


WHITEN = LayerType(
    name="whiten",
    fields={"kernel_size": 2, "eps": 5e-4},
    output_shape=_shape,
    build=lambda layer, s: WhitenLayer(s[0], layer["kernel_size"], float(layer["eps"])),
    params=lambda layer, s: 2 * s[0] * layer["kernel_size"] ** 2,  # the bias; the filters are a buffer
    activations=2,  # the convolution and the ReLU outputs
    reads=reads_channels,
    identity=lambda module, layer, s, nonneg_in: False,  # it changes the channels and the map
    widen=lambda old, new, old_in, new_in: False,  # its filters are fitted to its input's channels
    id_prefix="whiten",
    feature_map=True,
    nonneg=True,
    searched=False,
    growable=False,  # a stem, from the network's start
    fit=lambda module, x: module.fit(x),
)

"""Test-time augmentation: a network's answer averaged over transformed copies of each image.

``flip`` averages the logits of each image and of its left-right mirror (airbench's cheapest
test-time step: two forward passes for what a mirror-trained network already knows);
``flip+shift`` adds each image moved by one pixel up and left and down and right, with their
mirrors (airbench94's six views, weighted as it weighs them: a quarter on the image and its
mirror each, an eighth on each shifted view). It is a way of reading a trained network, so
training, ``evaluate`` and the served model all read the network the same way: the run's
``--tta`` decides, for all three. Each reading is one forward pass over all its views: a
CUDA-graph-compiled network reuses its output buffers from one call to the next, so a second
call would overwrite the first answer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _Reading(nn.Module):
    """``net`` read on several views of each image; subclasses say which and how weighed."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net


class FlipAveraged(_Reading):
    """``net`` read on each image and its mirror, logits averaged: (B, C, H, W) -> (B, classes)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        plain, mirrored = self.net(torch.cat([x, x.flip(-1)])).chunk(2)
        return (plain + mirrored) / 2


class FlipShiftAveraged(_Reading):
    """``net`` read on six views of each image, airbench94's: the image and its mirror (weight
    1/4 each), and the image shifted by one pixel up and left and by one down and right (edges
    reflected), each with its mirror (1/8 each): (B, C, H, W) -> (B, classes)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        views = (x, padded[:, :, :h, :w], padded[:, :, 2:, 2:])  # as is, moved down-right, up-left
        logits = self.net(torch.cat([v for view in views for v in (view, view.flip(-1))]))
        logits = logits.view(6, b, *logits.shape[1:])
        return (logits[0] + logits[1]) / 4 + logits[2:].sum(0) / 8


READINGS = {"none": lambda net: net, "flip": FlipAveraged, "flip+shift": FlipShiftAveraged}
TTAS = tuple(READINGS)


def with_tta(net: nn.Module, tta: str) -> nn.Module:
    """``net`` as ``tta`` reads it (``none``: ``net`` itself)."""
    if tta not in READINGS:
        raise ValueError(f"unknown test-time augmentation {tta!r} (one of {', '.join(TTAS)})")
    return READINGS[tta](net)

"""Test-time augmentation: a network's answer averaged over transformed copies of each image.

``flip`` averages the logits of each image and of its left-right mirror (airbench's cheapest
test-time step: two forward passes for what a mirror-trained network already knows). It is a
way of reading a trained network, so training, ``evaluate`` and the served model all read the
network the same way: the run's ``--tta`` decides, for all three.
"""

from __future__ import annotations

import torch
from torch import nn


class FlipAveraged(nn.Module):
    """``net`` read on each image and its mirror, logits averaged: (B, C, H, W) -> (B, classes).
    One forward pass over both halves: a CUDA-graph-compiled ``net`` reuses its output buffers
    from one call to the next, so two calls would overwrite the first answer."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        plain, mirrored = self.net(torch.cat([x, x.flip(-1)])).chunk(2)
        return (plain + mirrored) / 2


READINGS = {"none": lambda net: net, "flip": FlipAveraged}
TTAS = tuple(READINGS)


def with_tta(net: nn.Module, tta: str) -> nn.Module:
    """``net`` as ``tta`` reads it (``none``: ``net`` itself)."""
    if tta not in READINGS:
        raise ValueError(f"unknown test-time augmentation {tta!r} (one of {', '.join(TTAS)})")
    return READINGS[tta](net)

"""FLOP counts from ``torch.utils.flop_counter`` (matmul and convolution FLOPs, as PyTorch counts them)."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def flops_per_example(model: nn.Module, input_shape: tuple[int, ...]) -> dict[str, int]:
    """Forward and training (forward + backward) FLOPs for one example.

    Counted on a CPU copy in eval mode so that the live model's batchnorm statistics and
    gradients are untouched.
    """
    probe = copy.deepcopy(model).cpu().eval()
    x = torch.zeros(1, *input_shape)
    with FlopCounterMode(display=False) as forward_counter:
        probe(x)
    with FlopCounterMode(display=False) as train_counter:
        probe(x).sum().backward()
    return {"forward": int(forward_counter.get_total_flops()), "train": int(train_counter.get_total_flops())}

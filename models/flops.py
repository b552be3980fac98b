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
    with FlopCounterMode(display=False) as forward_counter, torch.no_grad():
        probe(x)
    with FlopCounterMode(display=False) as train_counter, torch.enable_grad():
        # training runs every exit (deep supervision), so its FLOPs include their heads
        outputs = probe(x, exits=True) if getattr(probe.spec, "exits", ()) else [probe(x)]
        sum(out.sum() for out in outputs).backward()
    return {"forward": int(forward_counter.get_total_flops()), "train": int(train_counter.get_total_flops())}


def exit_flops_per_example(model: nn.Module, input_shape: tuple[int, ...]) -> list[int]:
    """Forward FLOPs of one example that leaves at each exit, the head last: the layers up to
    the exit plus every exit head it passed on the way (adaptive inference runs them all).

    The head's figure exceeds ``flops_per_example``'s by the early exits' heads, the price of
    asking them."""
    probe = copy.deepcopy(model).cpu().eval()
    x = torch.zeros(1, *input_shape)
    out = []
    n_exits = len(probe.spec.exits)
    for k in range(n_exits + 1):
        # threshold 0 at exit k makes it leave there; 1 at the ones before keeps it running
        thresholds = [1.0] * k + [0.0] * (n_exits - k)
        with FlopCounterMode(display=False) as counter:
            probe.adaptive(x, thresholds)
        out.append(int(counter.get_total_flops()))
    return out

"""How much of the validation split an epoch reads (``--monitor-share``).

Validation only watches training, and a run with many cheap epochs (a growing network on a
small dataset) spent up to 42% of its seconds on it. Between its first and last epoch a run now
validates on a fixed, class-interleaved sample of the validation split, sized as a share of the
examples the epoch trained (at least ``MONITOR_FLOOR``), and on the whole split where a number
is read off: the last epoch (final/val_acc), the epochs on each side of a scheduled growth event
(the growth dip), an epoch its budget ends, and every epoch of a run with label noise (its probes
read the whole split). An epoch on all of a full dataset reads the whole split anyway (15% of
Fashion-MNIST's 55,000 training examples is more than its 5,000 validation examples); the
curriculum's first epochs, on a third and two thirds of it, read a sample.

The sample is the same examples every epoch (and for every run on the same data), so the change
from one epoch to the next is the network's, not the sample's. ``val/examples`` logs how many
an epoch read.
"""

from __future__ import annotations

import math

import torch

MONITOR_FLOOR = 1000


def sample_order(y: torch.Tensor) -> torch.Tensor:
    """A fixed order of the validation positions that interleaves the classes (first one of
    each class, then a second of each, ...), so any prefix holds every class in proportion."""
    labels = y.cpu()
    shuffled = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    rank = torch.empty(len(labels), dtype=torch.long)
    for c in labels.unique():
        members = shuffled[labels[shuffled] == c]
        rank[members] = torch.arange(len(members))
    keys = rank[shuffled] * len(labels) + torch.arange(len(labels))  # by rank, then shuffled order
    return shuffled[torch.argsort(keys)]


def examples_to_read(share: float, trained: int, n_val: int, whole: bool) -> int:
    """How many validation examples an epoch that trained ``trained`` examples reads."""
    if whole or share == 0:
        return n_val
    return min(n_val, max(MONITOR_FLOOR, math.ceil(share * trained)))

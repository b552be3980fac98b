"""Stratified sampling: the one way examples are drawn for splits, subsets and held-out tests."""

from __future__ import annotations

import torch

from pipeline.data.config import DataError


def stratified_sample(y: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Sorted positions of a stratified random sample of ``n`` of the labels ``y``.

    Each class gets its share of ``n`` by largest remainder, so the sample has exactly ``n``
    examples and class proportions as close to ``y``'s as integers allow.
    """
    if not 0 < n <= len(y):
        raise DataError(f"cannot take {n} examples from a split of {len(y)}")
    classes, counts = torch.unique(y, return_counts=True)
    exact = counts.double() * n / len(y)
    quota = exact.floor().long()
    remainder = exact - quota
    # Ties in the remainder go to the lower class id, deterministically.
    order = sorted(range(len(classes)), key=lambda i: (-remainder[i].item(), i))
    for i in order[: n - int(quota.sum())]:
        quota[i] += 1
    chosen = []
    for cls, q in zip(classes.tolist(), quota.tolist()):
        members = torch.nonzero(y == cls).flatten()
        perm = torch.randperm(len(members), generator=generator)
        chosen.append(members[perm[:q]])
    return torch.cat(chosen).sort().values

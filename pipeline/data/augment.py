"""Batch augmentation: flips and shifts of a whole batch at once."""

from __future__ import annotations

import torch

AUGMENTATIONS = ("none", "flip", "shift", "flip+shift")


def augment_batch(x: torch.Tensor, kind: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """Augment a whole batch at once (B, C, H, W): horizontal flips and/or shifts of up to 2 px."""
    if kind == "none":
        return x
    b = x.shape[0]
    if "flip" in kind:
        flip = torch.rand(b, generator=generator) < 0.5
        x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
    if "shift" in kind:
        pad = 2
        padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        dx, dy = (torch.randint(0, 2 * pad + 1, (2,), generator=generator)).tolist()
        # One shift per batch keeps this a single slice; batches differ, so examples still vary.
        x = padded[:, :, dy : dy + x.shape[2], dx : dx + x.shape[3]]
    return x

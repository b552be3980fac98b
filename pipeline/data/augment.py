"""Batch augmentation: flips (random or alternating), random crops and translations, shifts and
random erasing of a whole batch at once, and mixup."""

from __future__ import annotations

import itertools
import math
import random

import torch

# ``--augment`` joins any of these parts with "+", in this order ("flip+erase"), or is "none";
# the two flips are one choice, never both. Each part draws from the generator only when it is
# asked for, so adding a part changes no other combination's augmentation.
AUGMENT_PARTS = ("flip", "altflip", "crop", "translate", "shift", "erase")
FLIPS = {"flip", "altflip"}


def both_flips(kind: str) -> bool:
    """Whether ``kind`` asks for both ways to flip, which ``--augment`` refuses."""
    return set(kind.split("+")) >= FLIPS


AUGMENTATIONS = (
    "none",
    *(
        "+".join(parts)
        for n in range(1, len(AUGMENT_PARTS) + 1)
        for parts in itertools.combinations(AUGMENT_PARTS, n)
        if not both_flips("+".join(parts))
    ),
)

# Random erasing as Zhong et al. (AAAI 2020) set it up for Fashion-MNIST: each image, with
# probability 1/2, gets one rectangle of 2-40% of its area and aspect ratio 0.3-3.3 replaced by
# random values (the input is normalised, so N(0, 1) is its own scale).
ERASE_P = 0.5
ERASE_AREA = (0.02, 0.4)
ERASE_ASPECT = (0.3, 1 / 0.3)

# The CIFAR recipe since ResNet (He et al. 2016): pad 4 pixels, crop back to the image size at a
# random place, per image (so each moves by up to 4 px).
CROP_PAD = 4
# airbench's (Jordan 2024) milder translation for short runs: pad 2 pixels by reflecting the
# image's edge (no flat border for the network to learn), crop back at a random place per image.
TRANSLATE_PAD = 2


def augment_batch(
    x: torch.Tensor,
    kind: str,
    generator: torch.Generator | None = None,
    *,
    positions: torch.Tensor | None = None,
    epoch: int = 0,
    seed: int = 0,
) -> torch.Tensor:
    """Augment a whole batch at once (B, C, H, W): horizontal flips (random, or alternating:
    ``alternate_flips``) and/or random crops (zero pad 4) and/or translations (reflect pad 2)
    and/or shifts of up to 2 px and/or random erasing, in that order. Random draws come from
    ``generator`` (on the CPU), so a run's augmentation follows its seed on any device.
    Alternating flips need the images' ``positions`` in the training split (B,), the ``epoch``
    and the run's ``seed``; they draw nothing from the generator."""
    if kind == "none":
        return x
    parts = kind.split("+")
    b = x.shape[0]
    if "flip" in parts or "altflip" in parts:  # one or the other (both_flips)
        if "flip" in parts:
            flip = torch.rand(b, generator=generator) < 0.5
        elif positions is None:
            raise ValueError("alternating flips need the images' positions in the training split")
        else:
            flip = alternate_flips(positions, epoch, seed)
        x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
    if "crop" in parts:
        x = _crop(x, generator)
    if "translate" in parts:
        x = _crop(x, generator, pad=TRANSLATE_PAD, mode="reflect")
    if "shift" in parts:
        pad = 2
        padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        dx, dy = (torch.randint(0, 2 * pad + 1, (2,), generator=generator)).tolist()
        # One shift per batch keeps this a single slice; batches differ, so examples still vary.
        x = padded[:, :, dy : dy + x.shape[2], dx : dx + x.shape[3]]
    if "erase" in parts:
        x = _erase(x, generator)
    return x


def alternate_flips(positions: torch.Tensor, epoch: int, seed: int) -> torch.Tensor:
    """Which images to mirror (B,) under airbench's alternating flips (Jordan 2024, arXiv
    2404.00498, section 3.6): in the first epoch a random half, as random flips would; after
    it each image is mirrored every other epoch, so any two epochs in a row show it both ways
    (random flips show an image the same way twice in a row half the time). The first epoch's
    half is a hash of the image's position and the run's seed: no state to carry, the same
    after a resume and on any device. An image a curriculum leaves out of an epoch keeps its
    turn: mirrored or not by the epoch's parity."""
    # murmur3's 32-bit finaliser, on the positions' device (no host synchronisation)
    h = (positions.long() + ((seed * 0x9E3779B1) & 0xFFFFFFFF)) & 0xFFFFFFFF
    h = _times(h ^ (h >> 16), 0x85EBCA6B)
    h = _times(h ^ (h >> 13), 0xC2B2AE35)
    first = ((h ^ (h >> 16)) & 1).bool()
    return first ^ bool(epoch % 2)


def _times(h: torch.Tensor, c: int) -> torch.Tensor:
    """``h * c`` modulo 2^32 for 32-bit ``h`` and ``c``, by halves of ``c`` so that no product
    passes 2^49: a signed 64-bit product that overflows is not promised to wrap on every device."""
    low = h * (c & 0xFFFF)
    high = ((h * (c >> 16)) & 0xFFFF) << 16
    return (low + high) & 0xFFFFFFFF


def _crop(
    x: torch.Tensor, generator: torch.Generator | None, pad: int = CROP_PAD, mode: str = "constant"
) -> torch.Tensor:
    """Each image padded by ``pad`` pixels (zeros, the mean colour as the input is normalised;
    or with ``mode="reflect"`` its edge mirrored) and cropped back to its size at its own random
    offset, all images in one gather."""
    b, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode=mode)  # (B, C, H + 2p, W + 2p)
    dy, dx = torch.randint(0, 2 * pad + 1, (2, b), generator=generator).to(x.device)  # (B,) each
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]  # (B, 1, 1, W)
    batch = torch.arange(b, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows, cols]  # (B, C, H, W)


def _erase(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Each image, with probability ``ERASE_P``, gets one random rectangle (per image: its own
    area, aspect ratio and place) filled with N(0, 1) noise."""
    b, _, h, w = x.shape
    area = torch.empty(b).uniform_(*ERASE_AREA, generator=generator) * h * w
    low, high = (math.log(a) for a in ERASE_ASPECT)  # uniform in log aspect: r and 1/r alike
    aspect = torch.empty(b).uniform_(low, high, generator=generator).exp()
    eh = (area * aspect).sqrt().round().clamp(1, h).long()
    ew = (area / aspect).sqrt().round().clamp(1, w).long()
    top = (torch.rand(b, generator=generator) * (h - eh + 1)).long()
    left = (torch.rand(b, generator=generator) * (w - ew + 1)).long()
    erased = torch.rand(b, generator=generator) < ERASE_P
    rows = torch.arange(h)[None, :, None]
    cols = torch.arange(w)[None, None, :]
    inside = (
        (rows >= top[:, None, None])
        & (rows < (top + eh)[:, None, None])
        & (cols >= left[:, None, None])
        & (cols < (left + ew)[:, None, None])
        & erased[:, None, None]
    )
    noise = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=x.dtype)
    return torch.where(inside[:, None].to(x.device), noise, x)


def mixup_batch(
    x: torch.Tensor, alpha: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Mixup (Zhang et al., ICLR 2018): each image of the batch blends with a partner from the
    same batch, ``lam * x + (1 - lam) * x[partner]``, one ``lam ~ Beta(alpha, alpha)`` per
    batch. Returns the blend, the partners' positions in the batch and ``lam``; the training
    loss is then ``lam`` times the loss against the labels plus ``1 - lam`` times the loss
    against the partners' labels."""
    partner = torch.randperm(x.shape[0], generator=generator).to(x.device)
    # torch's Beta sampler takes no generator; a seed drawn from it keeps lam on the run's seed.
    lam = random.Random(int(torch.randint(2**62, (1,), generator=generator))).betavariate(alpha, alpha)
    return lam * x + (1 - lam) * x[partner], partner, lam

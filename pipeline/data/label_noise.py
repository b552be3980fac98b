"""Label noise: which training and validation labels are flipped, to what, and the stored mask.

The test split is never touched."""

from __future__ import annotations

import pandas as pd
import torch

from pipeline.data.config import DataConfig, DataError, dataset_name
from pipeline.data.dataset import Data

NOISE_KINDS = ("symmetric", "asymmetric")

# Asymmetric noise flips a class only to the class people (and networks) confuse it with, by
# class name, one target per class; classes not listed keep their labels, so the share of
# flipped labels over all classes is below P. Fashion-MNIST: the upper-body garments pair up
# (T-shirt/top <-> Shirt, Pullover <-> Coat) and so does footwear (Sandal <-> Sneaker, Ankle
# boot -> Sneaker); its most confused pairs. MNIST and CIFAR-10: the maps of Patrini et al.
# (CVPR 2017), the ones the noisy-label literature reuses.
ASYMMETRIC_MAPS: dict[str, dict[str, str]] = {
    "fashion-mnist": {
        "T-shirt/top": "Shirt",
        "Shirt": "T-shirt/top",
        "Pullover": "Coat",
        "Coat": "Pullover",
        "Sandal": "Sneaker",
        "Sneaker": "Sandal",
        "Ankle boot": "Sneaker",
    },
    "mnist": {
        "2 - two": "7 - seven",
        "3 - three": "8 - eight",
        "5 - five": "6 - six",
        "6 - six": "5 - five",
        "7 - seven": "1 - one",
    },
    "cifar10": {"truck": "automobile", "bird": "airplane", "deer": "horse", "cat": "dog", "dog": "cat"},
}


def check_noise(cfg: DataConfig, classes: tuple[str, ...] | None = None) -> None:
    """Refuse a noise rate outside [0, 1), an unknown kind, or asymmetric noise on a dataset whose
    classes the map does not know (with ``classes``, also the map's names against them)."""
    if not 0 <= cfg.label_noise < 1:
        raise DataError(f"--label-noise {cfg.label_noise:g} must be a share in [0, 1)")
    if cfg.noise_kind not in NOISE_KINDS:
        raise DataError(f"--noise-kind {cfg.noise_kind!r}: use one of {', '.join(NOISE_KINDS)}")
    if cfg.noise_kind != "asymmetric" or cfg.label_noise == 0:
        return
    name = dataset_name(cfg.dataset)
    mapping = ASYMMETRIC_MAPS.get(name)
    if mapping is None:
        raise DataError(
            f"--noise-kind asymmetric: no confusion map for dataset {name} (maps: "
            f"{', '.join(ASYMMETRIC_MAPS)}); use --noise-kind symmetric"
        )
    if classes is not None and not set(mapping) | set(mapping.values()) <= set(classes):
        raise DataError(
            f"--noise-kind asymmetric: dataset {name}'s classes {list(classes)} are not those of its "
            "confusion map; use --noise-kind symmetric"
        )


def noise_targets(cfg: DataConfig, classes: tuple[str, ...]) -> dict[int, int] | None:
    """Asymmetric noise: class id -> the one id it flips to; None for symmetric noise."""
    if cfg.noise_kind != "asymmetric":
        return None
    mapping = ASYMMETRIC_MAPS[dataset_name(cfg.dataset)]
    ids = {c: i for i, c in enumerate(classes)}
    return {ids[a]: ids[b] for a, b in mapping.items()}


def flip_labels(
    y: torch.Tensor, rate: float, num_classes: int, targets: dict[int, int] | None, generator: torch.Generator
) -> torch.Tensor:
    """Noisy labels (N,): exactly round(rate * n_c) examples of each flippable class c, chosen at
    random, get a wrong label, so every such class carries the same noise. Symmetric
    (``targets`` None): uniform over the other classes, so ``rate`` is the share of wrong labels
    (not rate * (K-1)/K as when the true class may be drawn). Asymmetric: ``targets[c]``."""
    noisy = y.clone()
    for c in range(num_classes):
        if targets is not None and c not in targets:
            continue
        members = torch.nonzero(y == c).flatten()
        n_flip = round(rate * len(members))
        chosen = members[torch.randperm(len(members), generator=generator)[:n_flip]]
        if targets is not None:
            noisy[chosen] = targets[c]
        else:
            # Draw from the K-1 other classes: shift past c so the true class is never drawn.
            draw = torch.randint(0, num_classes - 1, (n_flip,), generator=generator)
            noisy[chosen] = draw + (draw >= c).long()
    return noisy


def noise_table(data: Data) -> pd.DataFrame:
    """Every training and validation example's label as trained and as in the source, and
    whether it was flipped: the stored mask of a noisy run (artifact ``data/label_noise.parquet``)."""
    frames = []
    for name in ("train", "val"):
        split = data.split(name)
        clean = split.y if split.y_clean is None else split.y_clean
        frames.append(
            pd.DataFrame(
                {
                    "split": name,
                    "index": split.index.cpu().numpy(),
                    "label": split.y.cpu().numpy(),
                    "original_label": clean.cpu().numpy(),
                    "flipped": split.flipped.cpu().numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)

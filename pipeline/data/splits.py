"""The fixed, stratified, seeded train/validation split (and optional test split) of a dataset,
normalised by the training split's statistics, with label noise applied; ``load_data`` is the
one call every step makes.

The test split is loaded only when a step asks for it (``include_test=True``); training and
tuning never do.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

from pipeline.data.config import DataConfig, DataError, dataset_name
from pipeline.data.dataset import Data, Split
from pipeline.data.label_noise import check_noise, flip_labels, noise_targets
from pipeline.data.sampling import stratified_sample
from pipeline.data.sources import RawData, array_digest, load_raw

# The smallest splits that can be trained on: the training split needs an example of every
# class in each of the three difficulty tiers (tiers are cut within each class), the validation
# split one of every class. Anything smaller trains a model on nothing and reports it FINISHED.
MIN_TRAIN_PER_CLASS = 3
MIN_VAL_PER_CLASS = 1


def _normalise(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (x.float().div_(255.0) - mean) / std  # (N, C, H, W)


def make_splits(raw: RawData, cfg: DataConfig, include_test: bool) -> Data:
    """The fixed train/validation split of the source's training set, and optionally its test set."""
    check_noise(cfg, classes=raw.classes)
    n_train = len(raw.train_y)
    if n_train < 2:  # e.g. a folder with one image per class and a held-out test share
        raise DataError(
            f"the dataset's training split holds {n_train} image(s): too few for a training and a "
            "validation split; add images"
        )
    if not 0 < cfg.val_size < n_train:
        raise DataError(f"--val-size {cfg.val_size} must be between 1 and {n_train - 1}")
    if cfg.subset < 0:
        raise DataError(f"--subset {cfg.subset} must be 0 (all data) or positive")
    generator = torch.Generator().manual_seed(cfg.split_seed)
    val_pos = stratified_sample(raw.train_y, cfg.val_size, generator)
    train_mask = torch.ones(n_train, dtype=torch.bool)
    train_mask[val_pos] = False
    train_pos = torch.nonzero(train_mask).flatten()
    test_pos = torch.arange(len(raw.test_y))
    if cfg.subset:
        train_pos, val_pos, test_pos = _subset(raw, cfg, (train_pos, val_pos, test_pos), generator)

    _check_split_sizes(raw, cfg, train_pos, val_pos)

    # Normalisation statistics from the training split only: the others must not leak into it.
    train_u8 = raw.train_x[train_pos].float()
    mean = train_u8.mean(dim=(0, 2, 3), keepdim=True).div(255.0)  # (1, C, 1, 1)
    std = train_u8.div(255.0).std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    del train_u8

    def take(x, y, pos, noisy=None):
        if noisy is None:
            return Split(_normalise(x[pos], mean, std), y[pos].clone(), pos.clone())
        return Split(_normalise(x[pos], mean, std), noisy, pos.clone(), y[pos].clone())

    digest = array_digest(
        np.frombuffer(raw.digest.encode(), dtype=np.uint8),
        train_pos,
        val_pos,
        test_pos,
    )
    noisy_train = noisy_val = None
    noise_digest = ""
    if cfg.label_noise > 0:
        # A generator of its own: the split stays what it is without noise; the test split is
        # never touched.
        noise_gen = torch.Generator().manual_seed(cfg.noise_seed)
        targets = noise_targets(cfg, raw.classes)
        k = len(raw.classes)
        noisy_train = flip_labels(raw.train_y[train_pos], cfg.label_noise, k, targets, noise_gen)
        noisy_val = flip_labels(raw.train_y[val_pos], cfg.label_noise, k, targets, noise_gen)
        noise_digest = array_digest(noisy_train, noisy_val)
        # Folded into the data digest: runs with other noise never pair, reuse scores or pool.
        digest = array_digest(np.frombuffer((digest + noise_digest).encode(), dtype=np.uint8))
    return Data(
        name=dataset_name(cfg.dataset),
        classes=list(raw.classes),
        train=take(raw.train_x, raw.train_y, train_pos, noisy_train),
        val=take(raw.train_x, raw.train_y, val_pos, noisy_val),
        test=take(raw.test_x, raw.test_y, test_pos) if include_test else None,
        source_digest=raw.digest,
        digest=digest,
        mean=tuple(mean.flatten().tolist()),
        std=tuple(std.flatten().tolist()),
        noise_digest=noise_digest,
        source=raw.source,
        source_sha256=raw.source_sha256,
        image_rule=raw.image_rule,
    )


def _subset(raw: RawData, cfg: DataConfig, positions: tuple, generator: torch.Generator) -> tuple:
    """A stratified ``--subset`` of each split's positions (train, validation, test)."""
    if cfg.subset < 2 * len(raw.classes):
        raise DataError(f"--subset {cfg.subset} is too small for {len(raw.classes)} classes")
    train_pos, val_pos, test_pos = positions
    # the validation split is --val-size by choice; the others are what the dataset holds
    short = {
        name: len(pos) for name, pos in (("training", train_pos), ("test", test_pos)) if len(pos) < cfg.subset
    }
    if short:  # a cap the user asked past: said, not silent (the logged sizes show it too)
        print(
            f"note: --subset {cfg.subset} keeps every example of the "
            + ", ".join(f"{name} split ({n:,})" for name, n in short.items())
            + ": the dataset has fewer",
            file=sys.stderr,
        )
    ys = (raw.train_y[train_pos], raw.train_y[val_pos], raw.test_y[test_pos])
    return tuple(
        pos[stratified_sample(y, min(cfg.subset, len(pos)), generator)] for pos, y in zip(positions, ys)
    )


def _check_split_sizes(raw: RawData, cfg: DataConfig, train_pos: torch.Tensor, val_pos: torch.Tensor) -> None:
    """Refuse splits too small to train on or to cut into tiers, naming the options to change."""
    n_classes = len(raw.classes)
    # Which option binds: --subset caps a split at N; otherwise --val-size sets the split.
    capped = bool(cfg.subset) and len(train_pos) >= cfg.subset
    fix = {
        "train": "raise --subset" if capped else f"lower --val-size (of {len(raw.train_y)} examples)",
        "validation": "raise --subset" if cfg.subset and len(val_pos) >= cfg.subset else "raise --val-size",
    }
    for split, pos, least in (
        ("train", train_pos, MIN_TRAIN_PER_CLASS),
        ("validation", val_pos, MIN_VAL_PER_CLASS),
    ):
        counts = torch.bincount(raw.train_y[pos], minlength=n_classes)
        if int(counts.min()) < least:
            sparse = int(counts.argmin())
            raise DataError(
                f"--val-size {cfg.val_size}"
                + (f" --subset {cfg.subset}" if cfg.subset else "")
                + f" leaves {len(pos)} {split} example(s), {int(counts[sparse])} of class "
                f"{raw.classes[sparse]!r}; the {split} split needs at least {least} of every class "
                f"({least * n_classes} for {n_classes} classes): {fix[split]}"
            )


# Set to 1, the loader refuses the test split: the tests run every training and tuning step so,
# which proves they never ask for it (only score_difficulty and evaluate may).
REFUSE_TEST_ENV = "GCNN_REFUSE_TEST_SPLIT"


def load_data(cfg: DataConfig, include_test: bool = False) -> Data:
    if include_test and os.environ.get(REFUSE_TEST_ENV) == "1":
        raise DataError(f"the test split is refused here ({REFUSE_TEST_ENV}=1): this step must not load it")
    check_noise(cfg)  # before the files are read: a bad noise option needs no data to refuse
    return make_splits(load_raw(cfg.dataset, cfg.data_dir), cfg, include_test)

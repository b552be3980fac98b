"""The loaded dataset: train, validation and (for evaluation only) test splits as in-memory tensors.

Every example keeps a stable ``index``: its position in the source's train or test file. A
validation example's index is its position in the source's *training* file, so later steps can
attach difficulty scores to any example by (split, index).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from pipeline.data.config import DataError


@dataclass
class Split:
    x: torch.Tensor  # (N, C, H, W) float32, normalised
    y: torch.Tensor  # (N,) int64, the label training sees (noisy under --label-noise)
    index: torch.Tensor  # (N,) int64, position in the source file
    # (N,) int64, the source's label where --label-noise flipped some; None on clean data
    y_clean: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.y)

    @property
    def flipped(self) -> torch.Tensor:
        """(N,) bool: whether the label was flipped (all False on clean data)."""
        return torch.zeros_like(self.y, dtype=torch.bool) if self.y_clean is None else self.y != self.y_clean

    def take(self, positions: torch.Tensor) -> Split:
        """The examples at ``positions`` (indices into this split, on any device)."""
        at = positions.to(self.x.device)
        clean = None if self.y_clean is None else self.y_clean[at]
        return Split(self.x[at], self.y[at], self.index[at], clean)

    def to(self, device: torch.device | str) -> Split:
        clean = None if self.y_clean is None else self.y_clean.to(device)
        return Split(self.x.to(device), self.y.to(device), self.index.to(device), clean)


@dataclass
class Data:
    name: str
    classes: list[str]
    train: Split
    val: Split
    test: Split | None
    source_digest: str  # the raw dataset's content
    digest: str  # the source, the split and the label noise: what downstream steps must match
    # Per-channel statistics of the training split in [0, 1]: a logged model carries them, so
    # it takes raw uint8 images. (C,) each; empty for data made by hand in tests.
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    noise_digest: str = ""  # the flipped labels alone; '' on clean data
    # Where a folder dataset was read from (resolved) and an archive's sha256; '' otherwise.
    source: str = ""
    source_sha256: str = ""
    image_rule: str = ""  # how a folder dataset's images were decoded (pipeline/data/images.py)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train.x.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, name: str) -> Split:
        if name == "test" and self.test is None:
            raise DataError("the test split was not loaded; only evaluation steps may load it")
        return {"train": self.train, "val": self.val, "test": self.test}[name]

    @property
    def noisy(self) -> bool:
        return self.train.y_clean is not None

    def sizes(self) -> dict[str, int]:
        out = {"train": len(self.train), "val": len(self.val)}
        if self.test is not None:
            out["test"] = len(self.test)
        return out

    def to(self, device: torch.device | str) -> Data:
        """What a training loop reads, on ``device``: train and val moved, the test split left
        behind (None), since training never reads it and it would only take device memory."""
        return dataclasses.replace(self, train=self.train.to(device), val=self.val.to(device), test=None)

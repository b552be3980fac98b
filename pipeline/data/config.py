"""The data options, the error every data check raises, and the name a dataset goes by."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.errors import UserError
from pipeline.cli import opt

BUILTIN_DATASETS = ("fashion-mnist", "mnist", "cifar10")
FOLDER_PREFIX = "folder:"
# Archives a folder dataset may be, read in place: the ImageFolder tree inside them is never unpacked.
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".zip")


class DataError(UserError):
    """Data that cannot be used; the message names the file or option and the fix."""


@dataclass(frozen=True)
class DataConfig:
    dataset: str = opt(
        "fashion-mnist",
        "fashion-mnist, mnist, cifar10, or folder:/path (ImageFolder layout: a directory, or a "
        ".tar, .tar.gz, .tar.xz or .zip archive of one)",
    )
    data_dir: str = opt(
        "", "where the dataset files are; empty: the cache, Debian's package, then a download"
    )
    val_size: int = opt(5000, "validation examples held out of the training set (stratified)")
    # Fixed apart from the training seed, so runs with different seeds share one split.
    split_seed: int = opt(0, "seed of the train/validation split")
    subset: int = opt(0, "0 for all data; N keeps a stratified N examples of each split (smoke runs)")
    label_noise: float = opt(
        0.0, "share P in [0, 1) of training and validation labels replaced by a wrong one (test: never)"
    )
    noise_kind: str = opt(
        "symmetric", "symmetric (any other class) or asymmetric (a confusable class, see README)"
    )
    # Fixed apart from the training seed, like the split: every seed trains on the same labels.
    noise_seed: int = opt(0, "seed of which labels are flipped and to what")


def archive_suffix(path: str | Path) -> str:
    """The archive suffix ``path`` ends with (``.tar.xz``), or '' when it names no archive."""
    name = Path(path).name.lower()
    return next((s for s in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True) if name.endswith(s)), "")


def dataset_name(dataset: str) -> str:
    """The name runs record for ``--dataset``: itself, or ``folder-<dir>`` for a folder
    (``folder-cifar10-jpeg`` for ``folder:/data/cifar10-jpeg.tar.xz``)."""
    if dataset.startswith(FOLDER_PREFIX):
        name = Path(dataset[len(FOLDER_PREFIX) :]).name
        return "folder-" + name[: len(name) - len(archive_suffix(name))]
    return dataset

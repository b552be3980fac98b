"""Datasets as in-memory tensors with fixed, stratified, seeded splits.

Every example keeps a stable ``index``: its position in the source's train or test file. A
validation example's index is its position in the source's *training* file, so later steps can
attach difficulty scores to any example by (split, index).

The test split is loaded only when a step asks for it (``include_test=True``); training and
tuning never do.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline.cli import opt

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
BUILTIN_DATASETS = ("fashion-mnist", "mnist", "cifar10")
FOLDER_PREFIX = "folder:"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}

FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
# Published MD5 sums of the *decompressed* idx files. Debian re-compresses the .gz files, so
# the sums of the archives differ between sources while the content must not.
FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}


# The smallest splits that can be trained on: the training split needs an example of every
# class in each of the three difficulty tiers (tiers are cut within each class), the validation
# split one of every class. Anything smaller trains a model on nothing and reports it FINISHED.
MIN_TRAIN_PER_CLASS = 3
MIN_VAL_PER_CLASS = 1


class DataError(ValueError):
    """Data that cannot be used; the message names the file or option and the fix."""


@dataclass(frozen=True)
class DataConfig:
    dataset: str = opt("fashion-mnist", "fashion-mnist, mnist, cifar10, or folder:/path (ImageFolder layout)")
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


@dataclass(frozen=True)
class RawData:
    """A source's images as uint8 (N, C, H, W) with int64 labels, before any split."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: tuple[str, ...]
    digest: str


def default_cache_dir() -> Path:
    return Path(os.environ.get("GCNN_DATA_CACHE", Path.home() / ".cache" / "growing-cnn"))


# --- idx files (MNIST format) -------------------------------------------------------------


def read_idx(path: Path, expected_md5: str | None) -> np.ndarray:
    """Read one idx file (optionally .gz), verifying its decompressed MD5; errors name the file."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataError(f"{path} is corrupt or truncated ({err}); delete it and run again") from None
    if expected_md5 is not None:
        got = hashlib.md5(raw).hexdigest()
        if got != expected_md5:
            raise DataError(
                f"{path} fails its MD5 check (got {got}, expected {expected_md5}); "
                "the file is corrupt or not Fashion-MNIST: delete it and run again"
            )
    if len(raw) < 8:
        raise DataError(f"{path} is truncated: {len(raw)} bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    count = int(np.prod(dims))
    header = 4 + 4 * ndim
    if raw[:3] != b"\x00\x00\x08" or len(raw) != header + count:
        raise DataError(f"{path} is not a uint8 idx file of the size its header promises")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_idx(directory: Path, stem: str) -> Path | None:
    for candidate in (
        directory / stem,
        directory / f"{stem}.gz",
        directory / "FashionMNIST" / "raw" / stem,
        directory / "FashionMNIST" / "raw" / f"{stem}.gz",
    ):
        if candidate.is_file():
            return candidate
    return None


def _fashion_mnist_dir(data_dir: str) -> Path:
    """Where the Fashion-MNIST files are: --data-dir, the cache, Debian's package, a download."""
    if data_dir:
        directory = Path(data_dir)
        missing = [s for s in FASHION_MNIST_MD5 if _find_idx(directory, s) is None]
        if missing:
            raise DataError(f"--data-dir {data_dir} lacks Fashion-MNIST file(s): {', '.join(missing)}")
        return directory
    for directory in (default_cache_dir() / "fashion-mnist", DEBIAN_FASHION_MNIST):
        if all(_find_idx(directory, s) is not None for s in FASHION_MNIST_MD5):
            return directory
    directory = default_cache_dir() / "fashion-mnist"
    import torchvision

    try:
        torchvision.datasets.FashionMNIST(str(directory), train=True, download=True)
        torchvision.datasets.FashionMNIST(str(directory), train=False, download=True)
    except Exception as err:  # network errors come in many types; all mean the same here
        raise DataError(
            "Fashion-MNIST is not on this machine and could not be downloaded "
            f"({type(err).__name__}); install the Debian package dataset-fashion-mnist "
            "or pass --data-dir"
        ) from None
    return directory


def _digest(*arrays: np.ndarray | torch.Tensor) -> str:
    h = hashlib.sha256()
    for array in arrays:
        a = array.numpy() if isinstance(array, torch.Tensor) else array
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _raw(train_x, train_y, test_x, test_y, classes) -> RawData:
    """Assemble RawData from arrays, adding a channel axis to grayscale images."""
    tx, vx = np.asarray(train_x), np.asarray(test_x)
    if tx.ndim == 3:
        tx, vx = tx[:, None], vx[:, None]
    ty, vy = np.asarray(train_y, dtype=np.int64), np.asarray(test_y, dtype=np.int64)
    return RawData(
        torch.from_numpy(np.array(tx)),
        torch.from_numpy(ty),
        torch.from_numpy(np.array(vx)),
        torch.from_numpy(vy),
        tuple(classes),
        _digest(tx, ty, vx, vy),
    )


def load_fashion_mnist(data_dir: str = "") -> RawData:
    directory = _fashion_mnist_dir(data_dir)
    arrays = {stem: read_idx(_find_idx(directory, stem), md5) for stem, md5 in FASHION_MNIST_MD5.items()}
    return _raw(
        arrays["train-images-idx3-ubyte"],
        arrays["train-labels-idx1-ubyte"],
        arrays["t10k-images-idx3-ubyte"],
        arrays["t10k-labels-idx1-ubyte"],
        FASHION_MNIST_CLASSES,
    )


def load_torchvision(name: str, data_dir: str = "") -> RawData:
    """MNIST or CIFAR-10 through torchvision, which checks the archives' MD5 when it downloads."""
    import torchvision

    cls = {"mnist": torchvision.datasets.MNIST, "cifar10": torchvision.datasets.CIFAR10}[name]
    root = Path(data_dir) if data_dir else default_cache_dir() / name
    try:
        train = cls(str(root), train=True, download=not data_dir)
        test = cls(str(root), train=False, download=not data_dir)
    except RuntimeError as err:
        raise DataError(f"{name} could not be loaded from {root}: {err}") from None
    except Exception as err:
        raise DataError(
            f"{name} is not in {root} and could not be downloaded ({type(err).__name__})"
        ) from None
    tx, vx = np.asarray(train.data), np.asarray(test.data)
    if tx.ndim == 4:  # CIFAR stores (N, H, W, C)
        tx, vx = tx.transpose(0, 3, 1, 2), vx.transpose(0, 3, 1, 2)
    return _raw(tx, train.targets, vx, test.targets, train.classes)


# Pillow's single-channel modes of more than 8 bits, by bit depth. Pillow's own conversion to
# 8 bits clips them (values above 255 become 255: most of a 16-bit image); they are scaled.
WIDE_MODES = {"I;16": 16, "I;16L": 16, "I;16B": 16, "I;16N": 16}


def _eight_bit(img):
    """``img`` with more than 8 bits per pixel scaled to 8 bits by its bit depth; other images
    as they are. 32-bit integer and float pixels carry no depth to scale by and are refused."""
    from PIL import Image

    depth = WIDE_MODES.get(img.mode)
    if depth is None and img.mode == "I" and img.format == "PNG":
        depth = 16  # PNG holds at most 16 bits per channel; Pillow may open them as 32-bit "I"
    if depth is None:
        if img.mode in ("I", "F"):
            kind = "32-bit integer" if img.mode == "I" else "floating-point"
            raise DataError(
                f"{kind} pixels (mode {img.mode}) have no bit depth to scale to 8 bits by; "
                "save the images with 8 or 16 bits per channel"
            )
        return img
    wide = np.asarray(img).astype(np.float64)  # (H, W), 0 .. 2**depth - 1
    return Image.fromarray(np.round(wide * 255 / (2**depth - 1)).clip(0, 255).astype(np.uint8), mode="L")


def _read_image_folder(root: Path, size: tuple[int, int] | None, mode: str | None):
    from PIL import Image, UnidentifiedImageError

    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise DataError(
            f"folder dataset {root} has {len(classes)} class folder(s); it needs at least 2 "
            "(one sub-folder of images per class)"
        )
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataError(f"folder dataset class {root / name} holds no images")
        for file in files:
            try:
                with Image.open(file) as img:
                    img.load()
                    img = _eight_bit(img)
                    if mode is None:
                        mode = "L" if img.mode in ("1", "L") else "RGB"
                    img = img.convert(mode)
                    if size is None:
                        size = img.size
                    if img.size != size:
                        img = img.resize(size)
                    images.append(np.asarray(img, dtype=np.uint8))
            except (UnidentifiedImageError, OSError, ValueError) as err:
                raise DataError(f"cannot read image {file}: {err}") from None
            labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64), classes, size, mode


def load_folder(path: str, test_fraction: float = 1 / 6, seed: int = 0) -> RawData:
    """Images in torchvision's ImageFolder layout: ``root/<class>/*.png``.

    With ``root/train`` and ``root/test`` both present they are the splits; otherwise a fixed
    stratified ``test_fraction`` is held out as the test split. All images are resized to the
    size of the first one read, in grayscale when the first one is grayscale.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"folder dataset {root} does not exist or is not a directory")
    if (root / "train").is_dir() and (root / "test").is_dir():
        tx, ty, classes, size, mode = _read_image_folder(root / "train", None, None)
        vx, vy, test_classes, _, _ = _read_image_folder(root / "test", size, mode)
        if test_classes != classes:
            raise DataError(f"{root}/test has classes {test_classes}, {root}/train has {classes}")
    else:
        x, y, classes, _, _ = _read_image_folder(root, None, None)
        generator = torch.Generator().manual_seed(seed)
        test_idx = stratified_sample(
            torch.from_numpy(y), max(len(classes), round(len(y) * test_fraction)), generator
        )
        mask = np.ones(len(y), dtype=bool)
        mask[test_idx.numpy()] = False
        tx, ty, vx, vy = x[mask], y[mask], x[~mask], y[~mask]
    if tx.ndim == 4:
        tx, vx = tx.transpose(0, 3, 1, 2), vx.transpose(0, 3, 1, 2)
    return _raw(tx, ty, vx, vy, classes)


@functools.lru_cache(maxsize=4)
def load_raw(dataset: str, data_dir: str = "") -> RawData:
    """Raw data of a named dataset, read once per process (tune's trials share it)."""
    if dataset == "fashion-mnist":
        return load_fashion_mnist(data_dir)
    if dataset in ("mnist", "cifar10"):
        return load_torchvision(dataset, data_dir)
    if dataset.startswith(FOLDER_PREFIX):
        return load_folder(dataset[len(FOLDER_PREFIX) :])
    raise DataError(f"unknown dataset {dataset!r} (known: {', '.join(BUILTIN_DATASETS)}, or folder:/path)")


# --- splits ------------------------------------------------------------------------------


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


# --- label noise -------------------------------------------------------------------------

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
    name = _dataset_name(cfg.dataset)
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
    mapping = ASYMMETRIC_MAPS[_dataset_name(cfg.dataset)]
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


def _normalise(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (x.float().div_(255.0) - mean) / std  # (N, C, H, W)


def make_splits(raw: RawData, cfg: DataConfig, include_test: bool) -> Data:
    """The fixed train/validation split of the source's training set, and optionally its test set."""
    check_noise(cfg, classes=raw.classes)
    n_train = len(raw.train_y)
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
        if cfg.subset < 2 * len(raw.classes):
            raise DataError(f"--subset {cfg.subset} is too small for {len(raw.classes)} classes")
        train_pos = train_pos[
            stratified_sample(raw.train_y[train_pos], min(cfg.subset, len(train_pos)), generator)
        ]
        val_pos = val_pos[stratified_sample(raw.train_y[val_pos], min(cfg.subset, len(val_pos)), generator)]
        test_pos = test_pos[stratified_sample(raw.test_y, min(cfg.subset, len(test_pos)), generator)]

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

    digest = _digest(
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
        noise_digest = _digest(noisy_train, noisy_val)
        # Folded into the data digest: runs with other noise never pair, reuse scores or pool.
        digest = _digest(np.frombuffer((digest + noise_digest).encode(), dtype=np.uint8))
    return Data(
        name=_dataset_name(cfg.dataset),
        classes=list(raw.classes),
        train=take(raw.train_x, raw.train_y, train_pos, noisy_train),
        val=take(raw.train_x, raw.train_y, val_pos, noisy_val),
        test=take(raw.test_x, raw.test_y, test_pos) if include_test else None,
        source_digest=raw.digest,
        digest=digest,
        mean=tuple(mean.flatten().tolist()),
        std=tuple(std.flatten().tolist()),
        noise_digest=noise_digest,
    )


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


def _dataset_name(dataset: str) -> str:
    if dataset.startswith(FOLDER_PREFIX):
        return "folder-" + Path(dataset[len(FOLDER_PREFIX) :]).name
    return dataset


# Set to 1, the loader refuses the test split: the tests run every training and tuning step so,
# which proves they never ask for it (only score_difficulty and evaluate may).
REFUSE_TEST_ENV = "GCNN_REFUSE_TEST_SPLIT"


def load_data(cfg: DataConfig, include_test: bool = False) -> Data:
    if include_test and os.environ.get(REFUSE_TEST_ENV) == "1":
        raise DataError(f"the test split is refused here ({REFUSE_TEST_ENV}=1): this step must not load it")
    check_noise(cfg)  # before the files are read: a bad noise option needs no data to refuse
    return make_splits(load_raw(cfg.dataset, cfg.data_dir), cfg, include_test)


# --- batches -----------------------------------------------------------------------------

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

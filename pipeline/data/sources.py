"""Reading a dataset's files into raw uint8 tensors: Fashion-MNIST idx files, torchvision's
MNIST and CIFAR-10, and image folders (a directory or an archive, see ``archive``); each read
once per process."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import numpy as np
import torch

from pipeline.data import archive
from pipeline.data.config import ARCHIVE_SUFFIXES, BUILTIN_DATASETS, FOLDER_PREFIX, DataError
from pipeline.data.sampling import stratified_sample

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
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


@dataclass(frozen=True)
class RawData:
    """A source's images as uint8 (N, C, H, W) with int64 labels, before any split."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: tuple[str, ...]
    digest: str
    # Where a folder dataset was read from (resolved), and an archive's sha256; '' otherwise.
    source: str = ""
    source_sha256: str = ""


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


def array_digest(*arrays: np.ndarray | torch.Tensor) -> str:
    """A short digest of arrays' shapes and contents: what identifies a source, a split, a noise mask."""
    h = hashlib.sha256()
    for array in arrays:
        a = array.numpy() if isinstance(array, torch.Tensor) else array
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _raw(train_x, train_y, test_x, test_y, classes, source: str = "", source_sha256: str = "") -> RawData:
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
        array_digest(tx, ty, vx, vy),
        source,
        source_sha256,
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


def decode_image(file: Path | BinaryIO, name: str, size: tuple[int, int] | None, mode: str | None):
    """One image file (a path, or a binary file) as uint8 (H, W) or (H, W, 3) by the folder
    rules: more than 8 bits scaled to 8, converted to ``mode`` and resized to ``size``, each
    taken from this image when None. Returns the array, the size and the mode; ``name`` is what
    an error calls the file."""
    from PIL import Image, UnidentifiedImageError

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
            return np.asarray(img, dtype=np.uint8), size, mode
    except UnidentifiedImageError:  # its own text names a file object, not the file
        raise DataError(f"cannot read image {name}: not an image, or a damaged one") from None
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read image {name}: {err}") from None


@dataclass(frozen=True)
class DirectoryTree:
    """An image folder on disk, as the folder rules read it; ``archive.ArchiveTree`` is the
    same for an archive. Folders are named relative to ``path``."""

    path: Path

    @property
    def root(self) -> PurePosixPath:
        return PurePosixPath()  # where train/ and test/ are: only an archive may wrap them

    def describe(self, folder: PurePosixPath) -> str:
        return str(self.path / folder)

    def subfolders(self, folder: PurePosixPath) -> list[str]:
        return sorted(p.name for p in (self.path / folder).iterdir() if p.is_dir())

    def images(self, folder: PurePosixPath) -> list[tuple[str, Path]]:
        files = sorted(p for p in (self.path / folder).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        return [(str(p), p) for p in files]


def _read_classes(tree: DirectoryTree | archive.ArchiveTree, folder: PurePosixPath, size, mode):
    """The images of ``folder``'s class folders (labels by sorted class name), decoded."""
    classes = tree.subfolders(folder)
    if len(classes) < 2:
        raise DataError(
            f"folder dataset {tree.describe(folder)} has {len(classes)} class folder(s); it needs "
            "at least 2 (one sub-folder of images per class)"
        )
    images, labels = [], []
    for label, name in enumerate(classes):
        files = tree.images(folder / name)
        if not files:
            raise DataError(f"folder dataset class {tree.describe(folder / name)} holds no images")
        for file_name, file in files:
            image, size, mode = decode_image(file, file_name, size, mode)
            images.append(image)
            labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64), classes, size, mode


# What decoding a folder gives, and what an archive's cache holds. Without train/ and test/
# folders every image is in train_x and test_x is empty: load_folder holds out a test split.
DECODED_KEYS = ("train_x", "train_y", "test_x", "test_y", "classes")


def decode_tree(tree: DirectoryTree | archive.ArchiveTree) -> dict[str, np.ndarray]:
    """Every image of an ImageFolder tree (a ``DirectoryTree`` or ``archive.ArchiveTree``)."""
    root = tree.root
    top = tree.subfolders(root)
    if "train" in top and "test" in top:
        tx, ty, classes, size, mode = _read_classes(tree, root / "train", None, None)
        vx, vy, test_classes, _, _ = _read_classes(tree, root / "test", size, mode)
        if test_classes != classes:
            raise DataError(
                f"{tree.describe(root / 'test')} has classes {test_classes}, "
                f"{tree.describe(root / 'train')} has {classes}"
            )
    elif top in (["train"], ["test"]):
        (only,) = top
        other = "test" if only == "train" else "train"
        raise DataError(
            f"folder dataset {tree.describe(root / only)} has no {other}/ beside it; give both "
            "train/ and test/, or class folders alone (a test split is then held out)"
        )
    else:
        tx, ty, classes, _, _ = _read_classes(tree, root, None, None)
        vx, vy = tx[:0], ty[:0]
    return dict(zip(DECODED_KEYS, (tx, ty, vx, vy, np.asarray(classes))))


def _decode_archive(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """An archive's decoded images and its sha256; decoded once, then read from the cache."""
    sha256 = archive.sha256_file(path)
    cache = archive.cache_file(default_cache_dir(), sha256)
    decoded = archive.read_cache(cache, DECODED_KEYS)
    if decoded is None:
        decoded = decode_tree(archive.ArchiveTree.open(path, IMAGE_SUFFIXES))
        archive.write_cache(cache, decoded)
    return decoded, sha256


def load_folder(path: str, test_fraction: float = 1 / 6, seed: int = 0) -> RawData:
    """Images in torchvision's ImageFolder layout: ``root/<class>/*.png``, in a directory or in
    an archive (``ARCHIVE_SUFFIXES``; read in place, its decoded images cached).

    With ``root/train`` and ``root/test`` both present they are the splits; otherwise a fixed
    stratified ``test_fraction`` is held out as the test split. All images are resized to the
    size of the first one read, in grayscale when the first one is grayscale. An archive may
    wrap the tree in one top-level folder.
    """
    if not path.strip():
        raise DataError(
            "--dataset folder: names no folder; give folder:/path/to/images "
            f"(a directory, or an archive: {', '.join(ARCHIVE_SUFFIXES)})"
        )
    root = Path(path)
    sha256 = ""
    if archive.is_archive(root):
        decoded, sha256 = _decode_archive(root)
    elif root.is_dir():
        decoded = decode_tree(DirectoryTree(root))
    else:
        raise DataError(
            f"folder dataset {root} does not exist or is neither a directory nor an archive "
            f"({', '.join(ARCHIVE_SUFFIXES)})"
        )
    tx, ty, vx, vy = (decoded[k] for k in DECODED_KEYS[:4])
    classes = [str(c) for c in decoded["classes"]]
    if not len(vy):  # no train/ and test/: hold out a fixed stratified share
        generator = torch.Generator().manual_seed(seed)
        test_idx = stratified_sample(
            torch.from_numpy(ty), max(len(classes), round(len(ty) * test_fraction)), generator
        )
        mask = np.ones(len(ty), dtype=bool)
        mask[test_idx.numpy()] = False
        tx, ty, vx, vy = tx[mask], ty[mask], tx[~mask], ty[~mask]
    if tx.ndim == 4:
        tx, vx = tx.transpose(0, 3, 1, 2), vx.transpose(0, 3, 1, 2)
    return _raw(tx, ty, vx, vy, classes, source=str(root.resolve()), source_sha256=sha256)


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

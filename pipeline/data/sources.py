"""Reading a dataset's files into raw uint8 tensors: Fashion-MNIST idx files, torchvision's
MNIST and CIFAR-10, and image folders (a directory or an archive, see ``archive``); each read
once per process."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from pipeline.data import archive, images
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
    image_rule: str = ""  # how a folder dataset's images were decoded (pipeline/data/images.py)


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


def _class_files(tree: DirectoryTree | archive.ArchiveTree, folder: PurePosixPath):
    """``folder``'s class names (sorted) and its images as (label, name, file)."""
    classes = tree.subfolders(folder)
    if len(classes) < 2:
        raise DataError(
            f"folder dataset {tree.describe(folder)} has {len(classes)} class folder(s); it needs "
            "at least 2 (one sub-folder of images per class)"
        )
    files = []
    for label, name in enumerate(classes):
        found = tree.images(folder / name)
        if not found:
            raise DataError(f"folder dataset class {tree.describe(folder / name)} holds no images")
        files += [(label, file_name, file) for file_name, file in found]
    return classes, files


# What decoding a folder gives, and what an archive's cache holds. Without train/ and test/
# folders every image is in train_x and test_x is empty: load_folder holds out a test split.
# ``rule`` is the line that says how the images were decoded (pipeline/data/images.py).
DECODED_KEYS = ("train_x", "train_y", "test_x", "test_y", "classes", "rule")


def _splits(tree: DirectoryTree | archive.ArchiveTree) -> tuple[list[str], list, list]:
    """The class names and the (label, name, file) images of the train and test folders (test
    empty where there are only class folders)."""
    root = tree.root
    top = tree.subfolders(root)
    if "train" in top and "test" in top:
        classes, train = _class_files(tree, root / "train")
        test_classes, test = _class_files(tree, root / "test")
        if test_classes != classes:
            raise DataError(
                f"{tree.describe(root / 'test')} has classes {test_classes}, "
                f"{tree.describe(root / 'train')} has {classes}"
            )
        return classes, train, test
    if top in (["train"], ["test"]):
        (only,) = top
        other = "test" if only == "train" else "train"
        raise DataError(
            f"folder dataset {tree.describe(root / only)} has no {other}/ beside it; give both "
            "train/ and test/, or class folders alone (a test split is then held out)"
        )
    classes, train = _class_files(tree, root)
    return classes, train, []


def decode_tree(tree: DirectoryTree | archive.ArchiveTree) -> dict[str, np.ndarray]:
    """Every image of an ImageFolder tree (a ``DirectoryTree`` or ``archive.ArchiveTree``),
    decoded by the rule its images' headers decide (``images.decide``)."""
    classes, train, test = _splits(tree)
    rule = images.decide([(name, *images.header(file, name)) for _, name, file in [*train, *test]])

    def arrays(files) -> tuple[np.ndarray, np.ndarray]:
        x = [images.decode(file, name, rule) for _, name, file in files]
        c, h, w = rule.shape
        empty = np.zeros((0, h, w, c) if c == 3 else (0, h, w), np.uint8)  # as np.stack would give
        return (np.stack(x) if x else empty), np.asarray([label for label, _, _ in files], dtype=np.int64)

    (tx, ty), (vx, vy) = arrays(train), arrays(test)
    return dict(zip(DECODED_KEYS, (tx, ty, vx, vy, np.asarray(classes), np.asarray(rule.line))))


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
    stratified ``test_fraction`` is held out as the test split. Every image is decoded to the
    channels and size most of them have (``images``: the decision is said in one line, printed
    here and tagged on every run). An archive may wrap the tree in one top-level folder.
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
    rule = str(decoded["rule"])
    print(f"folder dataset {root}: {rule}", file=sys.stderr)
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
    raw = _raw(tx, ty, vx, vy, classes, source=str(root.resolve()), source_sha256=sha256)
    return dataclasses.replace(raw, image_rule=rule)


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

"""Folder datasets in archives (issue 35): read in place to the arrays the unpacked folder gives,
decoded once and then read from a cache; archives that are no ImageFolder tree refused with one
line naming the member; where the data came from recorded on the run; the CIFAR crop."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from PIL import Image

from pipeline.data.archive import cache_file, read_cache, sha256_file, write_cache
from pipeline.data.augment import CROP_PAD, TRANSLATE_PAD, augment_batch
from pipeline.data.config import DataConfig, DataError, dataset_name
from pipeline.data.sources import DECODED_KEYS, load_folder, load_raw
from pipeline.data.splits import load_data
from pipeline.tracking.artifacts import log_dataset
from pipeline.tracking.errors import FAILURE_TAG
from tests.conftest import subprocess_env

CLASSES = ("cat", "dog", "eel")
FORMATS = (".tar", ".tar.gz", ".tar.xz", ".zip")
CIFAR = Path("/work/shared/datasets/cifar10-jpeg.tar.xz")
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The decoded-archive cache in tmp_path, never the user's."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("GCNN_DATA_CACHE", str(directory))
    return directory


def _image_folder(root: Path, splits=("train", "test"), per_class: int = 4) -> Path:
    """An ImageFolder tree of 8x8 RGB images, PNG and JPEG, with non-image files beside them."""
    rng = np.random.default_rng(0)
    for split in splits:
        for name in CLASSES:
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:04d}.{'png' if i % 2 else 'jpg'}")
            (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / "README.txt").write_text("not an image\n")
    return root


def _pack(folder: Path, archive: Path, wrap: str = "") -> Path:
    """``folder``'s files packed into ``archive`` (format by suffix), under ``wrap/`` if given."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    names = [str(Path(wrap) / p.relative_to(folder)) for p in files]
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as z:  # no folder entries, as many zip tools write
            for path, name in zip(files, names):
                z.write(path, name)
    else:
        mode = {".tar": "w", ".gz": "w:gz", ".xz": "w:xz"}[archive.suffix]
        with tarfile.open(archive, mode) as tar:
            for path, name in zip(files, names):
                tar.add(path, name)
    return archive


def _add_to_tar(archive: Path, name: str, kind=tarfile.REGTYPE, data: bytes = b"", link: str = "") -> Path:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data), link
    with tarfile.open(archive, "a") as tar:
        tar.addfile(info, io.BytesIO(data) if data else None)
    return archive


def _assert_same(a, b) -> None:
    for field in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.classes == b.classes and a.digest == b.digest


@pytest.mark.parametrize("suffix", FORMATS)
def test_an_archive_gives_the_arrays_its_unpacked_folder_gives(tmp_path, cache, suffix):
    folder = _image_folder(tmp_path / "images")
    archive = _pack(folder, tmp_path / f"images{suffix}")
    unpacked, packed = load_folder(str(folder)), load_folder(str(archive))
    _assert_same(packed, unpacked)
    assert packed.classes == CLASSES and packed.train_x.shape == (12, 3, 8, 8) and len(packed.test_y) == 12
    assert packed.source == str(archive.resolve()) and unpacked.source == str(folder.resolve())
    assert packed.source_sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert unpacked.source_sha256 == ""


@pytest.mark.parametrize("suffix", [".tar", ".zip"])
def test_a_wrapping_folder_and_a_tree_of_class_folders_alone_read_as_the_folder_does(tmp_path, cache, suffix):
    folder = _image_folder(tmp_path / "images")
    wrapped = _pack(folder, tmp_path / f"wrapped{suffix}", wrap="cifar-mini")
    _assert_same(load_folder(str(wrapped)), load_folder(str(folder)))
    # No train/ and test/: the same fixed stratified test split is held out as from the folder.
    classes_only = _image_folder(tmp_path / "classes", splits=("",), per_class=6)
    raw = load_folder(str(_pack(classes_only, tmp_path / f"classes{suffix}")))
    _assert_same(raw, load_folder(str(classes_only)))
    assert len(raw.train_y) + len(raw.test_y) == 18 and len(raw.test_y) == 3


def test_a_second_load_reads_the_cache_and_not_the_images(tmp_path, cache):
    archive = _pack(_image_folder(tmp_path / "images"), tmp_path / "images.tar.xz")
    first = load_folder(str(archive))
    path = cache_file(cache, sha256_file(archive))
    assert sorted(path.parent.iterdir()) == [path]  # written whole: no temporary file is left
    _assert_same(load_folder(str(archive)), first)
    # What a load returns comes from the cache: doctored arrays in it come back, which no
    # decoding of the archive could give.
    cached = read_cache(path, DECODED_KEYS)
    write_cache(path, {**cached, "train_x": 255 - cached["train_x"]})
    assert torch.equal(load_folder(str(archive)).train_x, 255 - first.train_x)


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "other arrays"])
def test_a_damaged_cache_is_rebuilt_not_a_traceback(tmp_path, cache, capsys, damage):
    archive = _pack(_image_folder(tmp_path / "images"), tmp_path / "images.tar")
    first = load_folder(str(archive))
    path = cache_file(cache, sha256_file(archive))
    content = bytearray(path.read_bytes())
    if damage == "truncated":
        content = content[: len(content) // 2]
    elif damage == "flipped byte":
        content[len(content) // 3] ^= 0xFF  # inside the training images: caught by the CRC
    else:
        write_cache(path, {"x": np.zeros(3)})
        content = path.read_bytes()
    path.write_bytes(bytes(content))
    _assert_same(load_folder(str(archive)), first)
    said = "is another version's" if damage == "other arrays" else "is unreadable"
    assert f"cache {path} {said}" in capsys.readouterr().err
    assert read_cache(path, DECODED_KEYS) is not None  # and rebuilt


def _flat(tmp_path: Path) -> Path:
    """Images at the archive's top, no class folders."""
    folder = tmp_path / "flat"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 8), 40 * i, dtype=np.uint8)).save(folder / f"{i}.png")
    return _pack(folder, tmp_path / "flat.tar")


def _train_only(tmp_path: Path) -> Path:
    return _pack(_image_folder(tmp_path / "images", splits=("train",)), tmp_path / "train-only.zip")


def _good_tar(tmp_path: Path) -> Path:
    return _pack(_image_folder(tmp_path / "images"), tmp_path / "images.tar")


def _zip_link(tmp_path: Path) -> Path:
    archive = _pack(_image_folder(tmp_path / "images"), tmp_path / "images.zip")
    info = zipfile.ZipInfo("train/cat/link.png")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr(info, "/etc/passwd")
    return archive


def _zip_escape(tmp_path: Path) -> Path:
    archive = _pack(_image_folder(tmp_path / "images"), tmp_path / "images.zip")
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("../evil.png", b"\x89PNG")
    return archive


def _truncated(tmp_path: Path) -> Path:
    archive = _pack(_image_folder(tmp_path / "images"), tmp_path / "images.tar.gz")
    archive.write_bytes(archive.read_bytes()[:-200])
    return archive


def _cut_in_a_header(tmp_path: Path) -> Path:
    """A plain .tar cut inside its last member's header, where tarfile's listing ends quietly."""
    archive = _good_tar(tmp_path)
    with tarfile.open(archive) as tar:
        last = tar.getmembers()[-1]
    archive.write_bytes(archive.read_bytes()[: last.offset + 100])
    return archive


BAD_ARCHIVES = {
    "no class folders": (_flat, "has 0 class folder(s)"),
    "train without test": (_train_only, "train-only.zip member train has no test/ beside it"),
    "unreadable image member": (
        lambda p: _add_to_tar(_good_tar(p), "train/dog/9999.png", data=b"\x89PNG\r\n\x1a\n not really"),
        "images.tar member train/dog/9999.png: not an image, or a damaged one",
    ),
    "cut-short archive": (_truncated, "member 'train/eel/0003.png' cannot be read"),
    "tar cut in a header": (_cut_in_a_header, "is cut short after member 'train/eel/0002.jpg'"),
    "member with ..": (lambda p: _add_to_tar(_good_tar(p), "train/../../evil.png"), "outside the archive"),
    "absolute member": (lambda p: _add_to_tar(_good_tar(p), "/tmp/evil.png"), "'/tmp/evil.png' names a path"),
    "zip member with ..": (_zip_escape, "'../evil.png' names a path outside"),
    "symbolic link": (
        lambda p: _add_to_tar(_good_tar(p), "train/cat/x.png", tarfile.SYMTYPE, link="/etc/passwd"),
        "'train/cat/x.png' is a link to '/etc/passwd'",
    ),
    "hard link": (
        lambda p: _add_to_tar(_good_tar(p), "test/eel/y.png", tarfile.LNKTYPE, link="train/cat/0000.jpg"),
        "'test/eel/y.png' is a link",
    ),
    "zip symbolic link": (_zip_link, "'train/cat/link.png' is a symbolic link"),
    "device file": (lambda p: _add_to_tar(_good_tar(p), "train/cat/tty", tarfile.CHRTYPE), "device file"),
}


@pytest.mark.parametrize("case", BAD_ARCHIVES, ids=list(BAD_ARCHIVES))
def test_an_archive_that_is_no_image_folder_is_refused_in_one_line(tmp_path, cache, monkeypatch, case):
    make, expect = BAD_ARCHIVES[case]
    archive = make(tmp_path)
    work = tmp_path / "work" / "here"  # where anything unpacked by mistake would land
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(DataError) as caught:
        load_folder(str(archive))
    message = str(caught.value)
    assert expect in message and "\n" not in message and str(archive) in message, message
    if case != "no class folders":
        assert " member " in message  # the member is named
    assert sorted(tmp_path.rglob("*")) == before  # nothing unpacked, nothing cached


def test_an_empty_folder_path_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch):
    _image_folder(tmp_path)  # what `folder:` read before: the current directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="--dataset folder: names no folder"):
        load_raw("folder:")
    with pytest.raises(DataError, match=r"neither a directory nor an archive \(.tar, "):
        load_folder(str(tmp_path / "README.txt"))


def test_an_archive_dataset_is_named_without_its_suffix():
    assert dataset_name("folder:/data/cifar10-jpeg.tar.xz") == "folder-cifar10-jpeg"
    assert dataset_name("folder:/data/shapes") == "folder-shapes"


def test_a_run_records_where_a_folder_dataset_was_read_from(tracking, tmp_path, cache):
    folder = _image_folder(tmp_path / "images")
    archive = _pack(folder, tmp_path / "images.zip")
    client = mlflow.MlflowClient()
    for source, sha256 in ((archive, sha256_file(archive)), (folder, None)):
        data = load_data(DataConfig(dataset=f"folder:{source}", val_size=3))
        with mlflow.start_run() as run:
            log_dataset(data)
        tags = client.get_run(run.info.run_id).data.tags
        assert tags["data_source"] == str(source.resolve())
        assert tags.get("data_source_sha256") == sha256


def test_the_command_refuses_a_bad_archive_in_one_line_and_fails_its_run(tracking, tmp_path, cache):
    archive = BAD_ARCHIVES["member with .."][0](tmp_path)
    client = mlflow.MlflowClient()
    outer = client.create_run(mlflow.get_experiment_by_name("test").experiment_id)
    env = {**subprocess_env(tracking), "MLFLOW_RUN_ID": outer.info.run_id, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.train_static", "--dataset", f"folder:{archive}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "member 'train/../../evil.png' names a path outside" in line
    run = client.get_run(outer.info.run_id)
    assert run.info.status == "FAILED" and "train/../../evil.png" in run.data.tags[FAILURE_TAG]
    assert not (tmp_path.parent / "evil.png").exists() and not cache.exists()


# --- the CIFAR crop -----------------------------------------------------------------------------


def _offset(crop: torch.Tensor, padded: torch.Tensor, pad: int) -> tuple[int, int]:
    """Where in the padded image (C, H + 2 pad, W + 2 pad) the crop (C, H, W) was taken: the one place."""
    side = 2 * pad + 1
    (found,) = [
        (dy, dx)
        for dy in range(side)
        for dx in range(side)
        if torch.equal(crop, padded[:, dy : dy + crop.shape[1], dx : dx + crop.shape[2]])
    ]
    return found


def test_crop_moves_each_image_on_its_own_by_up_to_the_padding_and_pads_zeros():
    x = torch.rand(64, 3, 32, 32) + 1  # no pixel is 0: zeros in the output are the padding
    out = augment_batch(x, "crop", torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (CROP_PAD,) * 4)
    offsets = []
    for image, crop in zip(padded, out):
        found = _offset(crop, image, CROP_PAD)
        offsets.append(found)
        dy, dx = found
        zero_rows = max(CROP_PAD - dy, 0) + max(dy - CROP_PAD, 0)
        zero_cols = max(CROP_PAD - dx, 0) + max(dx - CROP_PAD, 0)
        assert int((crop == 0).all(0).all(1).sum()) == zero_rows  # whole rows of padding
        assert int((crop == 0).all(0).all(0).sum()) == zero_cols
    assert len(set(offsets)) > 20  # per image, not one offset per batch
    again = augment_batch(x, "crop", torch.Generator().manual_seed(0))
    assert torch.equal(out, again)  # the seed decides everything
    both = augment_batch(x, "flip+crop", torch.Generator().manual_seed(1))
    assert both.shape == x.shape and not torch.equal(both, out)


def test_translate_moves_each_image_by_up_to_2_pixels_over_its_mirrored_edge():
    x = torch.rand(200, 3, 32, 32) + 1  # no pixel is 0: a zero would be a flat padding
    out = augment_batch(x, "translate", torch.Generator().manual_seed(0))
    assert out.shape == x.shape and bool((out != 0).all())
    padded = torch.nn.functional.pad(x, (TRANSLATE_PAD,) * 4, mode="reflect")
    offsets = {_offset(moved, image, TRANSLATE_PAD) for image, moved in zip(padded, out)}
    assert len(offsets) == (2 * TRANSLATE_PAD + 1) ** 2  # every offset of the 5x5, per image
    assert torch.equal(out, augment_batch(x, "translate", torch.Generator().manual_seed(0)))
    both = augment_batch(x, "flip+translate", torch.Generator().manual_seed(0))
    assert not torch.equal(both, out)


# The crop's choices as the code gave them before translate was added: unchanged by it.
BEFORE_TRANSLATE = {
    "crop": ("0653bc44fe07d6c9", 737465808),
    "flip+crop": ("3cc94d216f06eacc", 650783143),
    "flip+crop+shift+erase": ("df67c0ed82cfb4c3", 565848071),
}


# Outputs of each earlier --augment choice on one batch, and the generator's next draw after it,
# as the code gave them before crop was added: crop must change none of them.
BEFORE_CROP = {
    "none": ("c2a0a97ed4e5cfbf", 749065263),
    "flip": ("bf68651740b17102", 103618444),
    "shift": ("4e20f337472345b7", 495924928),
    "erase": ("95b11eaa80e8b814", 520070011),
    "flip+shift": ("ed7aa421d6989eea", 84517057),
    "flip+erase": ("25cd3e1c53ab5986", 681100467),
    "shift+erase": ("f6392709c762e583", 987612799),
    "flip+shift+erase": ("73274f0f82a7db63", 690103738),
}


EARLIER = {**BEFORE_CROP, **BEFORE_TRANSLATE}


@pytest.mark.parametrize("kind", EARLIER)
def test_earlier_augmentations_are_unchanged_by_crop_and_translate(kind):
    x = torch.arange(16 * 3 * 8 * 8, dtype=torch.float32).reshape(16, 3, 8, 8)
    generator = torch.Generator().manual_seed(0)
    out = augment_batch(x, kind, generator)
    next_draw = int(torch.randint(10**9, (1,), generator=generator))
    assert (hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16], next_draw) == EARLIER[kind]


# --- the real archive ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not CIFAR.is_file(), reason=f"{CIFAR} is not on this machine")
def test_the_cifar10_archive_loads_and_then_loads_from_its_cache(cache):
    start = time.perf_counter()
    raw = load_folder(str(CIFAR))
    decoded_s = time.perf_counter() - start
    assert raw.train_x.shape == (50000, 3, 32, 32) and raw.test_x.shape == (10000, 3, 32, 32)
    assert raw.classes == CIFAR_CLASSES
    assert torch.bincount(raw.train_y).tolist() == [5000] * 10
    assert torch.bincount(raw.test_y).tolist() == [1000] * 10
    start = time.perf_counter()
    again = load_folder(str(CIFAR))
    cached_s = time.perf_counter() - start
    _assert_same(again, raw)
    print(
        f"decoded in {decoded_s:.1f} s, from the cache in {cached_s:.1f} s (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', '')})"
    )
    assert cached_s < decoded_s

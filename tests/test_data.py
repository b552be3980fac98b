"""Data: checksums, stable stratified splits, subsets, folder datasets, batch augmentation."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from pipeline.data.augment import alternate_flips, augment_batch
from pipeline.data.config import DataConfig, DataError
from pipeline.data.sampling import stratified_sample
from pipeline.data.sources import DEBIAN_FASHION_MNIST, load_fashion_mnist, load_folder, load_raw, read_idx
from pipeline.data.splits import load_data


def test_splits_are_fixed_disjoint_and_stratified():
    a = load_data(DataConfig(split_seed=0))
    b = load_data(DataConfig(split_seed=0))
    assert torch.equal(a.val.index, b.val.index) and a.digest == b.digest
    assert len(a.val) == 5000 and len(a.train) == 55000 and a.test is None
    assert not set(a.val.index.tolist()) & set(a.train.index.tolist())
    counts = torch.bincount(a.val.y, minlength=10)
    assert counts.min() == counts.max() == 500  # Fashion-MNIST is balanced: exactly 500 per class
    other = load_data(DataConfig(split_seed=1))
    assert other.digest != a.digest and not torch.equal(other.val.index, a.val.index)


def test_stable_index_points_back_to_the_source_example():
    data = load_data(DataConfig(subset=500), include_test=True)
    raw = load_raw("fashion-mnist", "")
    for split, source_y in ((data.train, raw.train_y), (data.val, raw.train_y), (data.test, raw.test_y)):
        assert torch.equal(split.y, source_y[split.index])


def test_subset_is_stratified_and_changes_the_digest():
    full = load_data(DataConfig())
    small = load_data(DataConfig(subset=1000), include_test=True)
    assert small.sizes() == {"train": 1000, "val": 1000, "test": 1000}
    assert torch.bincount(small.train.y).tolist() == [100] * 10
    assert small.digest != full.digest and small.source_digest == full.source_digest


def test_stratified_sample_exact_size_and_deterministic():
    y = torch.tensor([0] * 7 + [1] * 3 + [2] * 5)
    first = stratified_sample(y, 6, torch.Generator().manual_seed(3))
    again = stratified_sample(y, 6, torch.Generator().manual_seed(3))
    assert len(first) == 6 and torch.equal(first, again)
    assert torch.bincount(y[first], minlength=3).tolist() == [3, 1, 2]


def test_corrupted_copy_fails_its_checksum_naming_the_file(tmp_path):
    for f in DEBIAN_FASHION_MNIST.iterdir():
        shutil.copy(f, tmp_path / f.name)
    labels = tmp_path / "train-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(labels.read_bytes()))
    raw[100] = (raw[100] + 1) % 10
    labels.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.gz fails its MD5 check"):
        load_fashion_mnist(str(tmp_path))


def test_truncated_file_is_an_error_naming_the_file(tmp_path):
    src = DEBIAN_FASHION_MNIST / "t10k-labels-idx1-ubyte.gz"
    (tmp_path / src.name).write_bytes(src.read_bytes()[:1000])
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz is corrupt or truncated"):
        read_idx(tmp_path / src.name, None)


def test_data_dir_without_the_files_is_refused(tmp_path):
    with pytest.raises(DataError, match="lacks Fashion-MNIST file"):
        load_fashion_mnist(str(tmp_path))


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(DataError, match="unknown dataset 'imagenet' .*fashion-mnist, mnist, cifar10"):
        load_raw("imagenet", "")


def _write_images(root, classes, per_class, size=(10, 12)):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, size, dtype=np.uint8)).save(root / name / f"{i}.png")


def test_folder_dataset_loads_and_holds_out_a_test_split(tmp_path):
    _write_images(tmp_path, ["cat", "dog", "eel"], 12)
    raw = load_folder(str(tmp_path))
    assert raw.classes == ("cat", "dog", "eel")
    assert raw.train_x.shape[1:] == (1, 10, 12)
    assert len(raw.train_y) + len(raw.test_y) == 36 and len(raw.test_y) == 6


def test_folder_dataset_with_one_class_or_a_bad_image_is_refused(tmp_path):
    _write_images(tmp_path / "one", ["only"], 3)
    with pytest.raises(DataError, match="has 1 class folder"):
        load_folder(str(tmp_path / "one"))
    _write_images(tmp_path / "bad", ["a", "b"], 3)
    (tmp_path / "bad" / "b" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match="cannot read image .*broken.png"):
        load_folder(str(tmp_path / "bad"))


def _shifted(x: torch.Tensor, dx: int, dy: int, pad: int = 2) -> torch.Tensor:
    """(B, C, H, W) moved by (dx - pad, dy - pad) pixels, zeros shifted in: the expected output."""
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    return padded[:, :, dy : dy + x.shape[2], dx : dx + x.shape[3]]


def test_batch_augmentation_is_exactly_a_flip_and_or_a_shift_of_each_image():
    x = torch.randn(32, 1, 28, 28)
    assert augment_batch(x, "none") is x
    generator = torch.Generator().manual_seed(0)
    flipped = augment_batch(x, "flip", generator)
    is_flipped = torch.tensor([torch.equal(o, f) for o, f in zip(flipped, x.flip(3))])
    is_same = torch.tensor([torch.equal(o, i) for o, i in zip(flipped, x)])
    assert torch.all(is_flipped ^ is_same)  # every image is itself or its mirror image
    assert 0 < int(is_flipped.sum()) < len(x)  # and both happen
    offsets = set()
    for _ in range(6):
        out = augment_batch(x, "shift", generator)
        # exactly one of the 25 shifts of up to 2 px explains the whole batch
        matches = [(dx, dy) for dx in range(5) for dy in range(5) if torch.equal(out, _shifted(x, dx, dy))]
        assert len(matches) == 1
        offsets.add(matches[0])
    assert len(offsets) > 1  # batches differ
    both = augment_batch(x, "flip+shift", generator)
    # one shift for the batch, and each image is that shift of itself or of its mirror image
    (_offset,) = [
        (dx, dy)
        for dx in range(5)
        for dy in range(5)
        if all(
            torch.equal(o, a) or torch.equal(o, b)
            for o, a, b in zip(both, _shifted(x, dx, dy), _shifted(x.flip(3), dx, dy))
        )
    ]


def _fmix32_first_side(position: int, seed: int) -> bool:
    """The first side of an image under alternating flips, by murmur3's 32-bit finaliser in
    Python's own integers (no overflow to worry about): what the tensor code must match."""
    mask = 0xFFFFFFFF
    h = (position + ((seed * 0x9E3779B1) & mask)) & mask
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask
    return bool((h ^ (h >> 16)) & 1)


def test_alternating_flips_mirror_a_random_half_then_each_image_every_other_epoch():
    positions = torch.arange(10_000)
    first = alternate_flips(positions, 0, seed=3)
    assert 0.48 < float(first.float().mean()) < 0.52  # a half, as random flips would
    assert torch.equal(alternate_flips(positions, 1, seed=3), ~first)  # then the other side
    for epoch in range(2, 6):
        assert torch.equal(alternate_flips(positions, epoch, seed=3), first ^ bool(epoch % 2))
    other_seed = alternate_flips(positions, 0, seed=4)
    assert 0.48 < float((other_seed ^ first).float().mean()) < 0.52  # another half, not the same
    assert 0.48 < float(alternate_flips(positions, 0, seed=2**40).float().mean()) < 0.52  # any seed
    some = torch.tensor([9_999, 5, 17, 5])  # a batch: in any order, with repeats
    assert torch.equal(alternate_flips(some, 0, seed=3), first[some])
    assert 0.47 < float(first[::2].float().mean()) < 0.53  # no pattern in the positions' parity

    for position, seed in [(0, 0), (1, 0), (12345, 3), (49_999, 2**40), (7, 1000)]:
        assert bool(alternate_flips(torch.tensor([position]), 0, seed)) == _fmix32_first_side(position, seed)

    x = torch.randn(64, 3, 8, 8)
    picked = positions[100:164]
    out = augment_batch(x, "altflip", None, positions=picked, epoch=1, seed=3)
    flip = alternate_flips(picked, 1, seed=3)
    assert torch.equal(out, torch.where(flip[:, None, None, None], x.flip(3), x))
    # it draws nothing: the translations that follow are those of translate alone
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    both = augment_batch(x, "altflip+translate", g1, positions=picked, epoch=1, seed=3)
    assert torch.equal(both, augment_batch(out, "translate", g2))
    assert int(torch.randint(10**9, (1,), generator=g1)) == int(torch.randint(10**9, (1,), generator=g2))
    with pytest.raises(ValueError, match="alternating flips need the images' positions"):
        augment_batch(x, "altflip")


def test_random_erasing_replaces_one_rectangle_of_the_set_area_in_about_half_the_images():
    x = torch.full((400, 1, 28, 28), 7.0)  # no N(0, 1) draw equals 7: changed pixels are erased
    generator = torch.Generator().manual_seed(0)
    out = augment_batch(x, "erase", generator)
    changed = out != x
    erased = changed.flatten(1).any(1)
    assert 150 < int(erased.sum()) < 250  # probability 1/2 per image
    for mask in changed[erased, 0]:
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        height, width = len(rows), len(cols)
        # one solid rectangle: contiguous rows and columns, every pixel inside them erased
        assert rows[-1] - rows[0] + 1 == height and cols[-1] - cols[0] + 1 == width
        assert int(mask.sum()) == height * width
        assert 0.02 * 784 - 28 <= height * width <= 0.4 * 784 + 28  # the area, up to rounding
    again = augment_batch(x, "erase", torch.Generator().manual_seed(0))
    assert torch.equal(out, again)  # the generator decides everything
    flipped_then_erased = augment_batch(x, "flip+erase", torch.Generator().manual_seed(1))
    assert 150 < int((flipped_then_erased != x).flatten(1).any(1).sum()) < 250

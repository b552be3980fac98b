"""Inputs too small or too large to train on faithfully are refused before training (issue #17)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from models.builder import build_model, count_parameters
from models.spec import SIZE_LIMITS, ArchSpec, SizeLimits, SpecError, check_size, named_layers, spec_size
from pipeline.data.config import DataConfig, DataError
from pipeline.data.sources import load_folder
from pipeline.data.splits import MIN_TRAIN_PER_CLASS, load_data


@pytest.mark.parametrize(
    ("cfg", "expect"),
    [
        (DataConfig(subset=1000, val_size=59999), "leaves 1 train example(s)"),  # the example
        (DataConfig(subset=25, val_size=100), "raise --subset"),  # 2 or 3 per class
        (DataConfig(val_size=5), "leaves 5 validation example(s)"),  # a class with none
    ],
)
def test_splits_too_small_to_train_or_to_cut_into_tiers_are_refused(cfg, expect):
    with pytest.raises(DataError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load_data(cfg)


def test_the_smallest_split_that_can_be_cut_into_tiers_loads():
    data = load_data(DataConfig(subset=10 * MIN_TRAIN_PER_CLASS, val_size=100))
    assert len(data.train) == 30 and data.train.y.bincount().min() == MIN_TRAIN_PER_CLASS


def _folder(root, arrays_by_class: dict[str, list[np.ndarray]], suffix: str = ".png"):
    for name, arrays in arrays_by_class.items():
        (root / name).mkdir(parents=True)
        for i, array in enumerate(arrays):
            Image.fromarray(array).save(root / name / f"{i}{suffix}")
    return root


def test_16_bit_images_are_scaled_by_their_bit_depth_not_clipped(tmp_path):
    ramp = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).astype(np.uint16)  # 0 .. 63,000
    root = _folder(tmp_path, {"a": [ramp] * 6, "b": [65535 - ramp] * 6})
    assert Image.open(root / "a" / "0.png").mode == "I;16"
    raw = load_folder(str(root))
    pixels = np.concatenate([raw.train_x.numpy().ravel(), raw.test_x.numpy().ravel()])
    assert (pixels == 255).mean() < 0.05  # clipping made 98% of them 255
    first = raw.train_x[raw.train_y == 0][0, 0].numpy()  # (H, W)
    assert np.array_equal(first, np.round(ramp.astype(float) * 255 / 65535).astype(np.uint8))


def test_images_without_a_bit_depth_are_refused(tmp_path):
    noise = np.random.default_rng(0).random((8, 8), dtype=np.float32)
    root = _folder(tmp_path, {"a": [noise] * 3, "b": [noise] * 3}, suffix=".tiff")
    with pytest.raises(DataError, match="floating-point pixels"):
        load_folder(str(root))


MIXED = [
    {"id": "c1", "type": "conv", "out_channels": 7, "kernel_size": 5},
    {"id": "b1", "type": "batchnorm"},
    {"id": "p1", "type": "pool", "kind": "avg"},
    {"id": "r1", "type": "residual"},
    {"id": "s1", "type": "sepconv", "out_channels": 12, "kernel_size": 5},
    {"id": "f1", "type": "fc", "out_features": 20},
    {"id": "b2", "type": "batchnorm"},
    {"id": "d1", "type": "dropout"},
]


@pytest.mark.parametrize("name", ["minimal", "default", "tiny", "mixed"])
def test_the_size_model_counts_exactly_the_parameters_the_builder_makes(name):
    layers = MIXED if name == "mixed" else named_layers(name)
    spec = ArchSpec((3, 28, 28), 10, tuple(layers), name)
    assert spec_size(spec).params == count_parameters(build_model(spec))


def test_a_network_over_the_limits_is_refused_with_the_figure_before_it_is_built():
    huge = ArchSpec((1, 28, 28), 10, ({"id": "f1", "type": "fc", "out_features": 10**8},))
    with pytest.raises(SpecError, match=r"79,500,000,010 parameters \(layer 'f1' alone 78,500,000,000\)"):
        build_model(huge)  # would try to allocate 314 GB
    default = ArchSpec((1, 28, 28), 10, tuple(named_layers("default")), "default")
    token = SIZE_LIMITS.set(SizeLimits(max_params=10**6, max_bytes=2**30, batch_size=10**4))
    try:
        with pytest.raises(SpecError, match=r"training needs about 8\.\d GiB .* batch of 10000"):
            build_model(default)
    finally:
        SIZE_LIMITS.reset(token)
    assert check_size(default, batch_size=128).params == 495_626  # fits the defaults

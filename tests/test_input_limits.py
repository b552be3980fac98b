"""Inputs too small or too large to train on faithfully are refused before training (issue #17)."""

from __future__ import annotations

import pytest

from pipeline.data import MIN_TRAIN_PER_CLASS, DataConfig, DataError, load_data


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

"""The random-order control draws its order from the run's seed unless --curriculum-seed is given
(issue 34, item 4): with one fixed permutation for every seed, "curriculum vs random order"
compared against one particular order and its interval was too narrow."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pipeline.curriculum.checks import CurriculumError
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.curriculum.diet import build_diet
from pipeline.difficulty.scores_table import ScoresTable
from pipeline.training.config import TrainConfig


def _table(data) -> ScoresTable:
    frames = []
    for name, split in (("train", data.train), ("val", data.val)):
        index = split.index.cpu().numpy()
        loss = np.random.default_rng(0).random(len(index))
        tiers = np.digitize(loss, [1 / 3, 2 / 3])
        frames.append(pd.DataFrame({"split": name, "index": index, "score_loss": loss, "tier_id": tiers}))
    return ScoresTable(pd.concat(frames, ignore_index=True), "scores", data.digest, ("loss",), "loss")


def _first_epoch(data, seed: int, curriculum_seed: int = -1) -> list[int]:
    cfg = DynamicCurriculumConfig(pacing="linear", order="random", prune=0.0, curriculum_seed=curriculum_seed)
    setup = build_diet(cfg, _table(data), data, [], TrainConfig(epochs=4, seed=seed))
    return setup.curriculum.positions(0).tolist()


def test_each_training_seed_draws_its_own_random_order_unless_one_is_given(small_data):
    assert _first_epoch(small_data, seed=0) != _first_epoch(small_data, seed=1)
    assert _first_epoch(small_data, seed=1) == _first_epoch(small_data, seed=1)
    given = _first_epoch(small_data, seed=0, curriculum_seed=5)
    assert given == _first_epoch(small_data, seed=1, curriculum_seed=5)
    assert given == _first_epoch(small_data, seed=5)  # -1 means: the run's seed


def test_a_negative_curriculum_seed_other_than_minus_one_is_refused(small_data):
    with pytest.raises(CurriculumError, match="--curriculum-seed must be -1"):
        _first_epoch(small_data, seed=0, curriculum_seed=-2)


def test_the_default_is_the_runs_seed():
    defaults = {f.name: f.default for f in dataclasses.fields(DynamicCurriculumConfig)}
    assert defaults["curriculum_seed"] == -1

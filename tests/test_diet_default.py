"""The default diet keeps the easy examples after the first growth (issue 35): on CIFAR-10 their
retirement at the growth epoch took training accuracy to 0.14 and cost 6 to 8 points; and it
prunes from the epoch after the growth, since pruning in the growth epoch fed a collapse.
``--retire-easy true`` brings the old rule back, and a static run is never touched by it."""

from __future__ import annotations

from models.schedule import parse_schedule
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.curriculum.diet import build_diet
from pipeline.training.config import TrainConfig
from tests.test_curriculum_seed import _table

EVENTS = parse_schedule("4:conv(8);7:residual", 12)


def _diet(data, cfg):
    return build_diet(cfg, _table(data), data, EVENTS, TrainConfig(epochs=12, seed=0))


def test_every_example_stays_after_the_first_growth_and_pruning_starts_the_epoch_after(small_data):
    setup = _diet(small_data, DynamicCurriculumConfig())
    n = len(small_data.train)
    assert setup.curriculum.retired_from is None
    assert [len(setup.curriculum.positions(e)) for e in (3, 4, 11)] == [n, n, n]
    assert setup.pruner.start == 5  # not in the growth epoch: network and diet change apart
    assert not setup.pruner.active(4, 12) and setup.pruner.active(5, 12)
    assert setup.label() == "+tiers+prune0.3"


def test_retire_easy_brings_back_the_retirement_at_the_first_growth(small_data):
    setup = _diet(small_data, DynamicCurriculumConfig(retire_easy=True))
    assert setup.curriculum.retired_from == 4
    assert len(setup.curriculum.positions(4)) < len(setup.curriculum.positions(3))
    assert setup.pruner.start == 4


def test_a_static_run_on_the_tiers_prunes_from_the_start(small_data):
    cfg = CurriculumConfig(pacing="tiers", prune=0.3)
    static = build_diet(cfg, _table(small_data), small_data, [], TrainConfig(epochs=12, seed=0))
    assert static.curriculum.retired_from is None and static.pruner.start == 1

"""Validation that watches without costing (--monitor-share, pipeline/training/monitor.py): a
fixed class-interleaved sample between the first and last epoch, the whole split where a number
is read off, and never a change to what is trained."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.schedule import parse_schedule
from pipeline.cli import ConfigError
from pipeline.growth.config import GrowthConfig
from pipeline.run.plan import ExperimentPlan
from pipeline.training import monitor
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from tests.conftest import fresh_state

CFG = TrainConfig(epochs=7, batch_size=100, deterministic=True, seed=4, monitor_share=0.15)


def test_the_sample_interleaves_the_classes_and_is_the_same_every_time():
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    order = monitor.sample_order(y)
    assert sorted(order.tolist()) == list(range(100))
    assert sorted(y[order[:3]].tolist()) == [0, 1, 2]  # every class in the first round
    assert torch.equal(order, monitor.sample_order(y))


def test_an_epoch_reads_a_share_of_what_it_trained_but_at_least_the_floor():
    assert monitor.examples_to_read(0.15, 20_000, 5000, whole=False) == 3000
    assert monitor.examples_to_read(0.15, 1000, 5000, whole=False) == monitor.MONITOR_FLOOR
    assert monitor.examples_to_read(0.15, 60_000, 5000, whole=False) == 5000  # full data: all of it
    assert monitor.examples_to_read(0.15, 1000, 5000, whole=True) == 5000
    assert monitor.examples_to_read(0.0, 1000, 5000, whole=False) == 5000


def test_the_whole_split_is_read_around_growth_and_at_the_end_and_training_is_unchanged(small_data):
    assert len(small_data.val) > monitor.MONITOR_FLOOR  # else every epoch reads the whole split

    def run(share: float):
        cfg = dataclasses.replace(CFG, monitor_share=share)
        plan = ExperimentPlan(
            cfg, small_data, parse_schedule("3:conv(16)@after:pool1", cfg.epochs), GrowthConfig()
        )
        return fit(fresh_state(small_data, cfg), small_data, cfg, plan).history

    light, full = run(0.15), run(0.0)
    read = [h["val/examples"] for h in light]
    whole = len(small_data.val)
    assert read == [
        monitor.MONITOR_FLOOR,
        monitor.MONITOR_FLOOR,
        whole,
        whole,
        *[monitor.MONITOR_FLOOR] * 2,
        whole,
    ]
    assert [h["val/examples"] for h in full] == [whole] * 7
    # Validation only watches: the same seed trains the same network either way.
    assert [h["train/loss"] for h in light] == [h["train/loss"] for h in full]
    assert [h["val/acc"] for h in light][2:4] == [h["val/acc"] for h in full][2:4]
    assert light[-1]["val/acc"] == full[-1]["val/acc"]


def test_a_negative_share_is_refused():
    with pytest.raises(ConfigError, match="--monitor-share"):
        TrainConfig(monitor_share=-0.1).validate()

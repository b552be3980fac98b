"""Where a run's seconds go (pipeline/budget/timing.py): the parts that train and those that
only watch, so that a seconds budget charges neither arm for how often it was validated."""

from __future__ import annotations

import time

import pytest

from pipeline.budget import timing


def test_parts_add_up_and_only_training_parts_count_as_trained():
    parts: dict[str, float] = {}
    with timing.timed(parts, "train"):
        time.sleep(0.02)
    with timing.timed(parts, "val"):
        time.sleep(0.01)
    with timing.timed(parts, "growth"):
        pass
    assert parts["train"] >= 0.02 and parts["val"] >= 0.01
    assert timing.trained_s(parts) == pytest.approx(parts["train"] + parts["growth"])
    assert timing.trained_share(parts) == pytest.approx(timing.trained_s(parts) / sum(parts.values()))
    assert timing.trained_share({}) == 1.0


def test_an_epochs_metrics_are_its_own_seconds_and_the_runs_so_far():
    before = {"train": 10.0, "val": 2.0, "log": 1.0}
    after = {"train": 15.0, "val": 3.0, "log": 1.0, "diet": 0.5}
    metrics = timing.epoch_metrics(before, after)
    assert metrics["time/val_s"] == pytest.approx(1.0) and metrics["time/diet_s"] == pytest.approx(0.5)
    assert metrics["time/cumulative_trained_s"] == pytest.approx(15.5)
    assert metrics["time/cumulative_trained_share"] == pytest.approx(15.5 / 19.5)
    totals = timing.run_metrics(after)
    assert totals["time/total_log_s"] == 1.0 and totals["time/total_probe_s"] == 0.0


def test_an_unknown_part_is_a_bug_not_a_silent_zero():
    with pytest.raises(ValueError, match="unknown part"), timing.timed({}, "lunch"):
        pass

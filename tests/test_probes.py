"""Probes plug into the epoch loop: it measures with whatever it is handed and knows nothing of
exits or label noise itself."""

from __future__ import annotations

import torch

from models.spec import resolve_spec
from pipeline.device import seed_everything
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan

CFG = TrainConfig(epochs=2, batch_size=64, seed=0, monitor_share=0.1)


class CountingProbe:
    """Counts the epochs it measured, and asks for whole validation when told to."""

    def __init__(self, whole_validation: bool):
        self.whole_validation = whole_validation
        self.calls = 0

    def measure(self, state, scored, val, positions) -> dict[str, float]:
        self.calls += 1
        return {"probe/calls": float(self.calls), "probe/positions": float(len(positions))}


def _fit(data, probes):
    seed_everything(0, False)
    state = new_state(resolve_spec("tiny", data.input_shape, data.num_classes), CFG, torch.device("cpu"))
    return fit(state, data, CFG, TrainingPlan(), probes=probes).history


def test_a_probe_measures_every_epoch_and_may_ask_for_the_whole_validation_split(small_data):
    sampled = CountingProbe(whole_validation=False)
    history = _fit(small_data, [sampled])
    assert [row["probe/calls"] for row in history] == [1.0, 2.0]
    assert all(row["probe/positions"] == len(small_data.train) for row in history)
    # a monitoring sample on the first epoch (the last is always read whole)
    assert history[0]["val/examples"] < len(small_data.val)
    whole = _fit(small_data, [CountingProbe(whole_validation=True)])
    assert [row["val/examples"] for row in whole] == [len(small_data.val)] * 2


def test_without_probes_an_epoch_has_no_probe_metrics(small_data):
    history = _fit(small_data, [])
    assert not [key for key in history[-1] if key.startswith(("probe/", "noise/", "val/acc_exit"))]

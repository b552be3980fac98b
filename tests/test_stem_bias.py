"""``--whiten-bias-epochs``: the whitening stem's bias trains in the first epochs only, then stays
where it is, the backward pass stops at the second layer and the FLOPs a step counts say so;
through a resume too."""

from __future__ import annotations

import dataclasses
import json

import mlflow
import pytest
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.spec import ArchSpec, resolve_spec
from pipeline import train_static
from pipeline.cli import ConfigError
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.run.length import static_training_flops, training_flops
from pipeline.run.session import RunConfig
from pipeline.train_static import StaticConfig
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.state import new_state
from pipeline.training.stem import refuse_without_stem, set_stem_bias_trains
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import growing_plan, interrupted_then_resumed

CFG = TrainConfig(epochs=3, batch_size=100, deterministic=True, seed=5, monitor_share=0, whiten_bias_epochs=1)
SECOND = 8  # the second layer's channels


def _spec(data) -> ArchSpec:
    layers = (
        {"id": "stem", "type": "whiten"},
        {"id": "c1", "type": "convbn", "out_channels": SECOND},
        {"id": "p1", "type": "pool"},
        {"id": "gap", "type": "gap"},
    )
    return ArchSpec(data.input_shape, data.num_classes, layers)


def _fresh(data, cfg):
    torch.manual_seed(cfg.seed)
    return new_state(_spec(data), cfg, torch.device("cpu"))


def _run(data, cfg):
    """The run's final state and its stem's bias and second layer's weights after each epoch."""
    seen = []

    def on_epoch(epoch, metrics, state):
        layers = state.model.layers
        seen.append((layers["stem"].bias.detach().clone(), layers["c1"].conv.weight.detach().clone()))

    return fit(_fresh(data, cfg), data, cfg, TrainingPlan(), on_epoch=on_epoch), seen


def test_the_stem_s_bias_trains_its_epochs_then_stays_while_the_rest_trains(small_data):
    state, seen = _run(small_data, CFG)
    start = torch.zeros_like(seen[0][0])  # a whiten layer's bias starts at 0
    assert not torch.equal(seen[0][0], start)  # epoch 0: it trained
    assert torch.equal(seen[1][0], seen[0][0]) and torch.equal(seen[2][0], seen[0][0])  # then stayed
    assert not torch.equal(seen[2][1], seen[1][1])  # the second layer still trains
    assert state.history[-1]["val/acc"] > 0.3  # and the network learns (chance is 0.1)
    _, throughout = _run(small_data, dataclasses.replace(CFG, whiten_bias_epochs=0))
    assert not torch.equal(throughout[2][0], throughout[1][0])  # the default: it trains throughout
    assert torch.equal(throughout[0][0], seen[0][0])  # the epochs before the freeze: the same run


def test_a_frozen_stem_ends_the_backward_pass_at_the_second_layer_and_its_flops_say_so(small_data):
    model = build_model(_spec(small_data))
    before = flops_per_example(model, small_data.input_shape)
    assert set_stem_bias_trains(model, False) and not set_stem_bias_trains(model, False)
    after = flops_per_example(model, small_data.input_shape)
    h, w = small_data.input_shape[1] - 1, small_data.input_shape[2] - 1  # the stem's map: no padding
    stem_channels = 2 * small_data.input_shape[0] * 4
    # the second layer's gradient with respect to its input: a 3x3 convolution back to the stem's
    assert before["train"] - after["train"] == 2 * SECOND * stem_channels * 9 * h * w
    assert after["forward"] == before["forward"]
    state, _ = _run(small_data, CFG)
    flops = [row["train/flops_cumulative"] for row in state.history]
    examples = len(small_data.train)
    assert flops[0] == before["train"] * examples  # epoch 0 paid for the stem's backward pass
    assert flops[2] - flops[1] == flops[1] - flops[0] == after["train"] * examples  # then not


def test_growth_keeps_the_stem_frozen_and_counts_the_grown_network_s_flops_so(small_data):
    # the stem's bias trains in epoch 0; a layer grows before epoch 2, after the freeze
    plan = growing_plan(small_data, CFG, "2:convbn(16)@after:p1")
    state = fit(_fresh(small_data, CFG), small_data, CFG, plan)
    assert len(state.trace.events) == 1
    assert not state.model.layers["stem"].bias.requires_grad
    grown = flops_per_example(state.model, small_data.input_shape)["train"]  # as it trained: frozen
    flops = [row["train/flops_cumulative"] for row in state.history]
    assert flops[2] - flops[1] == grown * len(small_data.train)
    set_stem_bias_trains(state.model, True)
    assert flops_per_example(state.model, small_data.input_shape)["train"] > grown


def test_a_resumed_run_freezes_the_stem_where_the_whole_run_did(small_data, tmp_path):
    cfg = dataclasses.replace(CFG, whiten_bias_epochs=2)
    whole = fit(_fresh(small_data, cfg), small_data, cfg, TrainingPlan())
    for crash_after in (1, 2):  # before its last epoch of training the bias, and after it
        resumed = interrupted_then_resumed(
            lambda: _fresh(small_data, cfg), small_data, cfg, TrainingPlan, tmp_path / "ckpt.pt", crash_after
        )
        for name, param in whole.model.state_dict().items():
            assert torch.equal(resumed.model.state_dict()[name], param), (crash_after, name)
        assert [r["train/flops_cumulative"] for r in resumed.history] == [
            r["train/flops_cumulative"] for r in whole.history
        ]


def test_a_network_without_a_stem_or_a_negative_count_is_refused(small_data):
    with pytest.raises(ConfigError, match="--whiten-bias-epochs 3: network 'tiny' has no whitening stem"):
        refuse_without_stem(resolve_spec("tiny", small_data.input_shape, small_data.num_classes), 3)
    refuse_without_stem(resolve_spec("tiny", small_data.input_shape, small_data.num_classes), 0)
    refuse_without_stem(_spec(small_data), 3)
    with pytest.raises(ConfigError, match="--whiten-bias-epochs must be a number of epochs"):
        dataclasses.replace(CFG, whiten_bias_epochs=-1).validate()


@pytest.mark.slow
def test_a_flops_budget_and_a_static_run_s_cost_know_the_stem_freezes(tracking):
    """A static run's cost known beforehand (a study's reference) counts the frozen epochs
    without the stem's backward pass, and a FLOPs budget of exactly that buys the whole run:
    planned as if the bias trained throughout, it would buy an epoch fewer."""
    data_cfg = DataConfig(subset=600)
    data = load_data(data_cfg)
    spec = _spec(data)
    trains, frozen = (training_flops(spec, data.input_shape, each) for each in (False, True))
    assert trains > frozen
    expected = (trains + 2 * frozen) * len(data.train)  # epoch 0 trains the bias, 1 and 2 do not
    assert static_training_flops(spec, data, 3, whiten_bias_epochs=1) == expected
    assert static_training_flops(spec, data, 3) == 3 * trains * len(data.train)
    layers = StaticConfig(spec=json.dumps({"layers": list(spec.layers)}))
    whole = train_static.run(data_cfg, CFG, layers, run_cfg=RunConfig(progress=False))
    assert whole.state.cumulative_train_flops == expected
    budget = dataclasses.replace(CFG, budget=f"{expected}flops")
    bought = train_static.run(data_cfg, budget, layers, run_cfg=RunConfig(progress=False))
    assert mlflow.last_active_run().data.params["planned_epochs"] == "3"
    assert bought.state.cumulative_train_flops == expected
    assert expected < 3 * trains * len(data.train)  # counted as if the bias trained, 3 would not fit

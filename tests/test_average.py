"""The weight average (``--ema-decay``): the exact moving average, restarted at growth, validated,
logged and resumed exactly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.builder import build_model
from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.training.average import WeightAverage
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import evaluate_split
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import fresh_state, growing_plan, interrupted_then_resumed

CFG = TrainConfig(epochs=3, batch_size=100, deterministic=True, seed=5, ema_decay=0.9)
SCHEDULE = "1:conv(16)@after:pool1;2:residual"


def test_each_update_is_the_moving_average_with_its_warm_up():
    torch.manual_seed(0)
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    average = WeightAverage(model, decay=0.9)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    for step in range(100):  # the warm-up reaches 0.9 at step 80
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.add_(1.0)
                    m.num_batches_tracked.add_(1)
        decay = min(0.9, (1 + step) / (10 + step))  # 0.1, 0.18, ... until it reaches 0.9
        average.update()
        for name, value in model.state_dict().items():
            if value.is_floating_point():
                expected[name] = decay * expected[name] + (1 - decay) * value
            else:
                expected[name] = value.clone()
    for name, value in average.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-5, atol=1e-5, msg=name)
    assert average.current_decay() == 0.9
    assert not average.model.training and not any(p.requires_grad for p in average.model.parameters())


def test_the_average_follows_a_model_whose_tensors_were_moved():
    """``.to()`` to another layout replaces the model's tensors; the average pairs again."""
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    average = WeightAverage(model, decay=0.5)
    model.to(memory_format=torch.channels_last)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0)
    for _ in range(200):
        average.update()
    for p in average.model.parameters():
        torch.testing.assert_close(p, torch.ones_like(p))


def test_validation_and_the_final_model_are_the_average_not_the_last_step(small_data):
    plain_cfg = dataclasses.replace(CFG, ema_decay=0.0)
    plain = fit(fresh_state(small_data, plain_cfg), small_data, plain_cfg, TrainingPlan())
    averaged = fit(fresh_state(small_data, CFG), small_data, CFG, TrainingPlan())
    assert plain.average is None and averaged.average is not None
    # the same steps: training is untouched by the average, only what is measured differs
    assert [h["train/loss"] for h in averaged.history] == [h["train/loss"] for h in plain.history]
    assert averaged.history[-1]["val/loss"] != plain.history[-1]["val/loss"]
    for name, value in averaged.model.state_dict().items():  # the model now holds the average
        assert torch.equal(value, averaged.average.model.state_dict()[name]), name
    final = evaluate_split(averaged.model, small_data.val, precision=averaged.precision)
    assert final.loss == pytest.approx(averaged.history[-1]["val/loss"], rel=1e-6)
    assert averaged.history[-1]["val/acc"] > 0.5


def test_the_average_restarts_from_the_grown_network_at_each_growth_event(small_data):
    state = fit(fresh_state(small_data, CFG), small_data, CFG, growing_plan(small_data, CFG, SCHEDULE))
    steps_per_epoch = -(-len(small_data.train) // CFG.batch_size)
    # grown before epoch 1 and again before epoch 2: only the last epoch's steps are averaged
    assert state.average.updates == steps_per_epoch
    assert state.model.spec == state.average.model.spec
    assert state.history[-1]["val/acc"] > 0.5


def test_an_averaged_growing_run_resumes_exactly(small_data, tmp_path):
    """Grown before epoch 1, interrupted after epoch 2: the resumed average goes on from the
    checkpoint's, so the final weights match only if it was restored exactly."""
    plan = lambda: growing_plan(small_data, CFG, "1:conv(16)@after:pool1")
    whole = fit(fresh_state(small_data, CFG), small_data, CFG, plan())
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, CFG), small_data, CFG, plan, tmp_path / "a.pt"
    )
    keys = ("train/loss", "val/loss", "val/acc")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    assert resumed.average.updates == whole.average.updates
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize("decay", [-0.1, 1.0])
def test_a_decay_outside_zero_to_one_is_refused(decay):
    with pytest.raises(ConfigError, match="--ema-decay must be a fraction"):
        dataclasses.replace(TrainConfig(), ema_decay=decay).validate()

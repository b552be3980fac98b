"""The grown layers' own learning rate (``--growth-lr-scale``): which parameters get it, that
the loop applies it, and that a run with it resumes exactly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.builder import build_model
from models.growth import grow
from models.schedule import parse_schedule
from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.training.config import TrainConfig, make_optimizer, rebuild_optimizer
from pipeline.training.epoch_loop import fit
from tests.conftest import fresh_state, growing_plan, interrupted_then_resumed

CFG = TrainConfig(epochs=3, batch_size=100, deterministic=True, seed=5, growth_lr_scale=3.0)
SCHEDULE = "1:conv(16)@after:pool1"


def _scaled(optimizer) -> set[int]:
    return {id(p) for g in optimizer.param_groups if "lr_scale" in g for p in g["params"]}


def test_the_parameters_each_growth_adds_join_the_scaled_group_and_stay_there():
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    optimizer = make_optimizer(model, CFG)
    assert len(optimizer.param_groups) == 1  # nothing has grown yet
    first, second = parse_schedule("1:conv(16)@after:pool1;2:residual", CFG.epochs)
    before = {id(p) for p in model.parameters()}
    model, _ = grow(model, first)
    optimizer = rebuild_optimizer(optimizer, model, CFG)
    added = {id(p) for p in model.parameters()} - before
    assert added and _scaled(optimizer) == added
    assert optimizer.param_groups[1]["lr_scale"] == 3.0
    before = {id(p) for p in model.parameters()}
    model, _ = grow(model, second)
    optimizer = rebuild_optimizer(optimizer, model, CFG)
    now = {id(p) for p in model.parameters()}
    assert _scaled(optimizer) == (added & now) | (now - before)
    assert len({id(p) for g in optimizer.param_groups for p in g["params"]}) == len(now)


def test_without_a_scale_growth_keeps_one_group():
    cfg = dataclasses.replace(CFG, growth_lr_scale=1.0)
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    grown, _ = grow(model, parse_schedule(SCHEDULE, cfg.epochs)[0])
    assert len(rebuild_optimizer(make_optimizer(model, cfg), grown, cfg).param_groups) == 1


def test_the_loop_trains_the_grown_layers_at_the_scaled_rate(small_data):
    state = fit(fresh_state(small_data, CFG), small_data, CFG, growing_plan(small_data, CFG, SCHEDULE))
    old, grown = state.optimizer.param_groups
    assert grown["lr"] == pytest.approx(3.0 * old["lr"]) and old["lr"] > 0
    assert state.history[-1]["train/lr"] == pytest.approx(old["lr"])  # the schedule's own rate
    cfg = dataclasses.replace(CFG, growth_lr_scale=1.0)
    plain = fit(fresh_state(small_data, cfg), small_data, cfg, growing_plan(small_data, cfg, SCHEDULE))
    assert plain.history[-1]["val/loss"] != state.history[-1]["val/loss"]


def test_a_growing_run_with_a_scaled_rate_resumes_exactly(small_data, tmp_path):
    """Grown before epoch 1, interrupted after epoch 2: the resumed run must rebuild the scaled
    group from the checkpoint, or its last epoch trains the new layer at the plain rate."""
    plan = lambda: growing_plan(small_data, CFG, SCHEDULE)
    whole = fit(fresh_state(small_data, CFG), small_data, CFG, plan())
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, CFG), small_data, CFG, plan, tmp_path / "a.pt"
    )
    keys = ("train/loss", "val/loss", "val/acc")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    assert _scaled(resumed.optimizer) and len(resumed.optimizer.param_groups) == 2
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_a_scale_that_is_not_positive_is_refused(scale):
    with pytest.raises(ConfigError, match="--growth-lr-scale must be positive"):
        dataclasses.replace(TrainConfig(), growth_lr_scale=scale).validate()

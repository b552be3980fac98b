"""The batchnorm shifts' own learning rate (``--bn-bias-lr-scale``, airbench's 64x): which
parameters get it and with what weight decay, that it combines with growth's rate, that the loop
applies it, and that a run with it resumes exactly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.builder import build_model
from models.growth import grow
from models.schedule import parse_schedule
from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.training.config import TrainConfig, batchnorm_shifts, make_optimizer, rebuild_optimizer
from pipeline.training.epoch_loop import fit
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import growing_plan, interrupted_then_resumed

CFG = TrainConfig(
    epochs=3, batch_size=100, deterministic=True, seed=5, bn_bias_lr_scale=64.0, weight_decay=5e-4
)
FASHION = ((1, 28, 28), 10)


def _names(model, group) -> set[str]:
    ids = {id(p) for p in group["params"]}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def _fresh(cfg: TrainConfig, spec: str = "default-bn"):
    torch.manual_seed(cfg.seed)
    return new_state(resolve_spec(spec, *FASHION), cfg, torch.device("cpu"))


def test_every_batchnorm_shift_and_only_they_train_at_the_scaled_rate_with_less_decay():
    model = build_model(resolve_spec("default-bn", *FASHION))
    shifts = batchnorm_shifts(model)
    assert shifts == {f"layers.{m}.bias" for m in ("conv1.bn", "conv2.bn", "res1.bn1", "res1.bn2")}
    plain, scaled = make_optimizer(model, CFG).param_groups
    assert _names(model, scaled) == shifts
    assert _names(model, plain) == {name for name, _ in model.named_parameters()} - shifts
    assert scaled["lr_scale"] == 64.0 and "lr_scale" not in plain and not scaled.get("grown")
    assert scaled["weight_decay"] == pytest.approx(5e-4 / 64) and plain["weight_decay"] == 5e-4
    assert len(make_optimizer(model, dataclasses.replace(CFG, bn_bias_lr_scale=1.0)).param_groups) == 1
    tiny = build_model(resolve_spec("tiny", *FASHION))  # no batchnorm: one group
    assert not batchnorm_shifts(tiny) and len(make_optimizer(tiny, CFG).param_groups) == 1


def test_a_shift_that_growth_adds_gets_both_rates():
    cfg = dataclasses.replace(CFG, growth_lr_scale=3.0)
    model = build_model(resolve_spec("minimal-bn", *FASHION))
    optimizer = make_optimizer(model, cfg)
    before = {id(p) for p in model.parameters()}
    model, _ = grow(model, parse_schedule("default-bn", 12)[0])
    optimizer = rebuild_optimizer(optimizer, model, cfg)
    # new parameter objects: the layer inserted, and those a changed input re-made
    added = {name for name, p in model.named_parameters() if id(p) not in before}
    groups = {
        (bool(g.get("grown")), "weight_decay" in g and g["weight_decay"] != cfg.weight_decay): g
        for g in optimizer.param_groups
    }
    assert [g.get("lr_scale", 1.0) for g in optimizer.param_groups] == [1.0, 3.0, 64.0, 192.0]
    assert _names(model, groups[(True, True)]) == added & batchnorm_shifts(model)
    assert _names(model, groups[(True, False)]) == added - batchnorm_shifts(model)
    assert _names(model, groups[(False, True)]) == batchnorm_shifts(model) - added


def test_the_loop_trains_the_shifts_at_the_scaled_rate(small_data):
    state = fit(_fresh(CFG), small_data, CFG, TrainingPlan())
    plain, scaled = state.optimizer.param_groups
    assert scaled["lr"] == pytest.approx(64.0 * plain["lr"]) and plain["lr"] > 0
    assert state.history[-1]["train/lr"] == pytest.approx(plain["lr"])  # the schedule's own rate
    cfg = dataclasses.replace(CFG, bn_bias_lr_scale=1.0)
    same = fit(_fresh(cfg), small_data, cfg, TrainingPlan())
    assert same.history[-1]["val/loss"] != state.history[-1]["val/loss"]


def test_a_growing_run_with_both_rates_resumes_exactly(small_data, tmp_path):
    cfg = dataclasses.replace(CFG, growth_lr_scale=3.0)
    plan = lambda: growing_plan(small_data, cfg, "1:convbn(16)@after:pool1")
    fresh = lambda: _fresh(cfg, "minimal-bn")
    whole = fit(fresh(), small_data, cfg, plan())
    resumed = interrupted_then_resumed(fresh, small_data, cfg, plan, tmp_path / "a.pt")
    keys = ("train/loss", "val/loss", "val/acc")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    assert [g.get("lr_scale", 1.0) for g in resumed.optimizer.param_groups] == [1.0, 3.0, 64.0, 192.0]
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf")])
def test_a_scale_that_is_not_positive_and_finite_is_refused(scale):
    with pytest.raises(ConfigError, match="--bn-bias-lr-scale must be positive"):
        TrainConfig(bn_bias_lr_scale=scale).validate()

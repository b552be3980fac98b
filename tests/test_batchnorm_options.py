"""airbench's batchnorm in training options: scales kept where they start (``--bn-scale-frozen``)
and running statistics that keep up (``--bn-momentum``), through growth and a resume."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.training.config import TrainConfig, batchnorm_scales, make_optimizer
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import clip_gradient
from pipeline.training.state import new_state
from tests.conftest import growing_plan, interrupted_then_resumed

CFG = TrainConfig(
    epochs=3, batch_size=100, deterministic=True, seed=11, bn_scale_frozen=True, bn_momentum=0.4
)
FASHION = ((1, 28, 28), 10)
SCHEDULE = "2:convbn(16)@after:pool1"


def _fresh(cfg: TrainConfig):
    torch.manual_seed(cfg.seed)
    return new_state(resolve_spec("minimal-bn", *FASHION), cfg, torch.device("cpu"))


def _batchnorms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_frozen_scales_form_a_last_group_at_rate_zero_and_only_they_do():
    model = _fresh(CFG).model
    *trained, frozen = make_optimizer(model, CFG).param_groups
    names = {id(p): name for name, p in model.named_parameters()}
    assert {names[id(p)] for p in frozen["params"]} == batchnorm_scales(model) != set()
    assert frozen["lr_scale"] == 0.0 and frozen["weight_decay"] == 0.0
    assert not {names[id(p)] for g in trained for p in g["params"]} & batchnorm_scales(model)
    plain = dataclasses.replace(CFG, bn_scale_frozen=False)
    assert len(make_optimizer(model, plain).param_groups) == 1


def test_clipping_measures_the_gradient_of_what_trains_not_of_the_frozen_scales():
    # A frozen scale never moves, so its gradient must not shrink the others' step.
    state = _fresh(CFG)
    frozen = batchnorm_scales(state.model)
    params = dict(state.model.named_parameters())
    for name, p in params.items():
        p.grad = torch.full_like(p, 100.0 if name in frozen else 1.0)
    clip_gradient(state.optimizer, 1.0)
    trained = torch.cat([params[n].grad.flatten() for n in params if n not in frozen])
    assert float(trained.norm()) == pytest.approx(1.0, rel=1e-5)
    assert all(torch.all(params[n].grad == 100.0) for n in frozen)  # not clipped: it does not move


def test_a_growing_run_keeps_every_scale_where_it_started_and_every_momentum_as_asked(small_data):
    state = _fresh(CFG)
    start = {name: p.detach().clone() for name, p in state.model.named_parameters()}
    state = fit(state, small_data, CFG, growing_plan(small_data, CFG, SCHEDULE))
    assert len(state.trace.events) == 1
    params = dict(state.model.named_parameters())
    for name in batchnorm_scales(state.model):
        expected = start.get(name)
        if expected is not None:  # the start's scales: untouched by three epochs
            assert torch.equal(params[name], expected), name
    shifts = [n for n in params if n.endswith("bn.bias") and n in start]
    assert shifts and any(not torch.equal(params[n], start[n]) for n in shifts)  # shifts still train
    assert {m.momentum for m in _batchnorms(state.model)} == {0.4}  # the grown layer's too


def test_the_momentum_changes_what_validation_sees(small_data):
    plain = dataclasses.replace(CFG, bn_scale_frozen=False, bn_momentum=0.1, epochs=1)
    fast = dataclasses.replace(plain, bn_momentum=0.4)
    a = fit(_fresh(plain), small_data, plain, growing_plan(small_data, plain, ""))
    b = fit(_fresh(fast), small_data, fast, growing_plan(small_data, fast, ""))
    assert a.history[0]["train/loss"] == b.history[0]["train/loss"]  # training itself: the same
    assert a.history[0]["val/loss"] != b.history[0]["val/loss"]  # its running statistics: not


def test_a_resumed_run_with_both_continues_exactly_from_after_its_growth(small_data, tmp_path):
    # every optimizer group present (grown, shifts, both, frozen) in the checkpoint it resumes
    cfg = dataclasses.replace(CFG, growth_lr_scale=2.0, bn_bias_lr_scale=8.0)
    plan = lambda: growing_plan(small_data, cfg, "1:convbn(16)@after:pool1")
    whole = fit(_fresh(cfg), small_data, cfg, plan())
    assert len(whole.optimizer.param_groups) == 5
    resumed = interrupted_then_resumed(
        lambda: _fresh(cfg), small_data, cfg, plan, tmp_path / "a.pt", crash_after=2
    )
    assert [h["val/loss"] for h in resumed.history] == [h["val/loss"] for h in whole.history]
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize("momentum", [0.0, 1.5, -0.1])
def test_a_momentum_outside_0_to_1_is_refused(momentum):
    with pytest.raises(ConfigError, match=r"--bn-momentum must be a fraction in \(0, 1\]"):
        TrainConfig(bn_momentum=momentum).validate()

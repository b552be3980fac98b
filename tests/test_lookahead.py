"""Lookahead (``--lookahead K``, airbench's): the slow copy's schedule and syncs, a run that ends
on the slow weights, growth that restarts it, a resume that continues it exactly, and the bad
input."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.lookahead import BASE_RHO, START, Lookahead
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import growing_plan, interrupted_then_resumed

CFG = TrainConfig(epochs=4, batch_size=100, deterministic=True, seed=7, lookahead=5)
FASHION = ((1, 28, 28), 10)


def _fresh(cfg: TrainConfig, spec: str = "default-bn"):
    torch.manual_seed(cfg.seed)
    return new_state(resolve_spec(spec, *FASHION), cfg, torch.device("cpu"))


def test_the_slow_copy_starts_after_a_quarter_then_pulls_the_weights_back_every_k_steps():
    model = nn.Linear(2, 1)
    lookahead = Lookahead(model, every=2)
    for _ in range(4):  # before START nothing is kept, whatever the step
        lookahead.step(START / 2)
    assert lookahead.slow is None
    lookahead.step(START)  # step 5: not a multiple of 2
    assert lookahead.slow is None
    with torch.no_grad():
        model.weight.fill_(1.0)
    lookahead.step(START)  # step 6: the first sync keeps a copy and changes nothing
    assert torch.equal(lookahead.slow[0], torch.ones(1, 2)) and torch.equal(model.weight, torch.ones(1, 2))
    with torch.no_grad():
        model.weight.fill_(3.0)
    lookahead.step(0.5)  # step 7: trains on
    assert torch.equal(model.weight, torch.full((1, 2), 3.0))
    lookahead.step(0.5)  # step 8: slow = 1 + (1 - rho) * (3 - 1), and the weights take it
    rho = BASE_RHO**2 * 0.5**3
    assert lookahead.rho(0.5) == pytest.approx(rho)
    expected = torch.full((1, 2), 1 + (1 - rho) * 2)
    torch.testing.assert_close(model.weight.detach(), expected)
    torch.testing.assert_close(lookahead.slow[0], expected)
    with torch.no_grad():
        model.weight.fill_(-5.0)
    lookahead.sync()  # an epoch's end: the weights take the slow copy
    torch.testing.assert_close(model.weight.detach(), expected)


def test_a_run_ends_on_its_slow_weights_and_differs_from_one_without(small_data):
    with_it = fit(_fresh(CFG), small_data, CFG, TrainingPlan())
    floats = [t for t in with_it.model.state_dict().values() if t.is_floating_point()]
    assert with_it.lookahead.slow is not None
    assert all(torch.equal(a, b) for a, b in zip(floats, with_it.lookahead.slow))
    assert with_it.lookahead.steps == with_it.global_step  # counted every step
    plain_cfg = dataclasses.replace(CFG, lookahead=0)
    plain = fit(_fresh(plain_cfg), small_data, plain_cfg, TrainingPlan())
    assert plain.lookahead is None
    assert plain.history[-1]["val/loss"] != with_it.history[-1]["val/loss"]
    assert plain.history[0]["val/loss"] == with_it.history[0]["val/loss"]  # before it starts: the same


def test_growth_restarts_the_slow_copy_from_the_grown_network(small_data):
    cfg = dataclasses.replace(CFG, epochs=4)
    state = fit(
        _fresh(cfg, "minimal-bn"), small_data, cfg, growing_plan(small_data, cfg, "2:convbn(16)@after:pool1")
    )
    slow = state.lookahead.slow
    floats = [t for t in state.model.state_dict().values() if t.is_floating_point()]
    assert [t.shape for t in slow] == [t.shape for t in floats]  # the grown network's shapes
    assert all(torch.equal(a, b) for a, b in zip(floats, slow))


def test_a_resumed_run_continues_its_slow_copy_exactly(small_data, tmp_path):
    plan = lambda: growing_plan(small_data, CFG, "3:convbn(16)@after:pool1")
    fresh = lambda: _fresh(CFG, "minimal-bn")
    whole = fit(fresh(), small_data, CFG, plan())
    resumed = interrupted_then_resumed(fresh, small_data, CFG, plan, tmp_path / "a.pt")
    keys = ("train/loss", "val/loss", "val/acc")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    assert resumed.lookahead.steps == whole.lookahead.steps
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lookahead": -1}, "--lookahead must be a number of steps"),
        ({"lookahead": 5, "ema_decay": 0.99}, "--lookahead and --ema-decay are two weight averages"),
    ],
)
def test_a_bad_lookahead_is_refused(change, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**change).validate()

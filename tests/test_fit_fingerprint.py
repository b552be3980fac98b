"""A fingerprint of ``fit``: what five small runs did, epoch by epoch, checked against the one
recorded in ``tests/data/fit_fingerprint.json``, so that a change meant to move code and not
behaviour (the training loop in one home, the budget in one package) shows that it changed
nothing. The runs, each growing by the same schedule: with the tiers curriculum and loss
pruning; with a weight average; stopped by a FLOPs budget in its last epoch; under a seconds
budget it cannot spend (so the clock changes next to nothing); and under one too small for a step (of
which only the stop is kept: when it stops depends on the clock).

A change that is meant to change training regenerates the record, and its commit says so:

    FIT_FINGERPRINT_UPDATE=1 .venv/bin/python -m pytest tests/test_fit_fingerprint.py

The runs are deterministic up to rounding (``deterministic=True``, one seed, one thread), and
numbers are compared to ``TOLERANCE``, so the record holds on this project's machines; a new kind
of CPU may round differently, which regenerating there shows.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.schedule import final_spec, parse_schedule
from models.spec import resolve_spec
from pipeline.budget.meter import BudgetMeter
from pipeline.budget.spec import Budget
from pipeline.curriculum.pruning import LossPruner
from pipeline.curriculum.strategies import make_curriculum
from pipeline.growth.config import GrowthConfig
from pipeline.run.plan import ExperimentPlan
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from tests.conftest import fresh_state

RECORD = Path(__file__).parent / "data" / "fit_fingerprint.json"
# fp32 as recorded: `auto` is bf16 on a CPU with AMX, which would train another run there
CFG = TrainConfig(epochs=4, batch_size=100, deterministic=True, seed=11, lr=0.05, precision="fp32")
SCHEDULE = "2:conv(16)@after:pool1;3:residual"
# Floats agree to this: the same run's losses differ in the fifth decimal from one process to
# the next (an accuracy by an example or two at most), what a change to training moves by far more.
TOLERANCE = 1e-3
# What an epoch's metrics say about the clock, not about training: left out of the fingerprint.
CLOCK_WORDS = ("seconds", "time", "_s", "per_s", "throughput")


def _plan(data, cfg: TrainConfig, diet: bool) -> ExperimentPlan:
    """The schedule above; with ``diet``, the tiers curriculum (medium examples from epoch 1, hard
    ones from the growth) and loss pruning from epoch 1."""
    events = parse_schedule(SCHEDULE, cfg.epochs)
    if not diet:
        return ExperimentPlan(cfg, data, events, GrowthConfig())
    n = len(data.train)
    difficulty = torch.linspace(0, 1, n)[torch.randperm(n, generator=torch.Generator().manual_seed(3))]
    tiers = torch.bucketize(difficulty, torch.tensor([1 / 3, 2 / 3]))
    curriculum = make_curriculum(difficulty, tiers, epochs=cfg.epochs, n=n, pacing="tiers", boundaries=[1, 2])
    return ExperimentPlan(cfg, data, events, GrowthConfig(), curriculum, LossPruner(n, rate=0.3, start=1))


def _flops_budget(data, cfg: TrainConfig, share: float) -> BudgetMeter:
    """``share`` of the grown network's FLOPs over the run, as a static run would spend them."""
    final = final_spec(
        resolve_spec("tiny", data.input_shape, data.num_classes), parse_schedule(SCHEDULE, cfg.epochs)
    )
    per_example = flops_per_example(build_model(final), data.input_shape)["train"]
    amount = share * per_example * len(data.train) * cfg.epochs
    return BudgetMeter(Budget("flops", amount, f"{amount:.17g}flops"))


def _epoch_record(metrics: dict) -> dict:
    return {
        key: round(value, 6) if isinstance(value, float) else value
        for key, value in sorted(metrics.items())
        if not any(word in key for word in CLOCK_WORDS)
    }


def _fingerprint(state, clock_decides_stop: bool = False) -> dict:
    """What the run did; where the clock decides when it stops, only that it stopped, and why."""
    trace = state.trace.to_dict()
    kept = ("epoch", "layer_id", "preserved", "params_after")
    events = [{k: e[k] for k in kept if k in e} for e in trace["events"]]
    record = {"stop_reason": state.stop_reason, "epochs_run": state.epoch, "events": events}
    if not clock_decides_stop:
        record["history"] = [_epoch_record(m) for m in state.history]
        record["params"] = [e["params"] for e in trace["epochs"]]
    return record


def _differences(got, want, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: numbers by more than TOLERANCE, anything else at all."""
    if isinstance(want, dict) and isinstance(got, dict):
        keys = sorted(set(got) | set(want))
        return [d for k in keys for d in _differences(got.get(k), want.get(k), f"{where}/{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, f"{where}[{i}]")]
    if isinstance(want, float) and isinstance(got, float) and abs(got - want) <= TOLERANCE:
        return []
    return [] if got == want else [f"{where}: {got!r}, recorded {want!r}"]


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: a sum split over two threads rounds differently from one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _runs(data) -> dict:
    runs = {}
    state = fit(fresh_state(data, CFG), data, CFG, _plan(data, CFG, diet=True))
    runs["growing, tiers curriculum, loss pruning"] = _fingerprint(state)
    ema = dataclasses.replace(CFG, ema_decay=0.9)
    state = fit(fresh_state(data, ema), data, ema, _plan(data, ema, diet=False))
    runs["growing, weight average 0.9"] = _fingerprint(state)
    budget = _flops_budget(data, CFG, 0.3)  # ends in the last epoch
    state = fit(fresh_state(data, CFG), data, CFG, _plan(data, CFG, diet=False), meter=budget)
    runs["growing, 0.3 of the grown network's FLOPs"] = _fingerprint(state)
    # Seconds to spare: the steps' share of the run sets the rate, as in an epochs run, but for
    # where the clock's share is further on (the first steps, by a hair)
    plenty = BudgetMeter(Budget("seconds", 1e6, "1000000s"))
    state = fit(fresh_state(data, CFG), data, CFG, _plan(data, CFG, diet=False), meter=plenty)
    runs["growing, a seconds budget it cannot spend"] = _fingerprint(state)
    # Too few seconds for a step: the run stops before its first, for its budget
    none = BudgetMeter(Budget("seconds", 1e-6, "0.000001s"))
    state = fit(fresh_state(data, CFG), data, CFG, _plan(data, CFG, diet=False), meter=none)
    runs["growing, a seconds budget too small for a step"] = _fingerprint(state, clock_decides_stop=True)
    return runs


def test_fit_does_what_the_recorded_fingerprint_says(small_data):
    runs = _runs(small_data)
    if os.environ.get("FIT_FINGERPRINT_UPDATE"):
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(RECORD.read_text())
    assert set(runs) == set(recorded)
    for name, run in runs.items():
        wrong = _differences(run, recorded[name])
        assert not wrong, f"{name}: fit no longer does what {RECORD.name} recorded: {wrong[:5]}"


def test_the_fingerprint_tells_a_changed_run_apart(small_data):
    """The record is not blind: a learning rate 2% higher moves it beyond the tolerance."""
    recorded = json.loads(RECORD.read_text())["growing, weight average 0.9"]
    other = dataclasses.replace(CFG, ema_decay=0.9, lr=0.051)
    state = fit(fresh_state(small_data, other), small_data, other, _plan(small_data, other, diet=False))
    assert _differences(_fingerprint(state), recorded)

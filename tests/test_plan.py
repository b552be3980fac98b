"""The experiment plan inside fit: growth keeps training valid, and resume is exact."""

from __future__ import annotations

import torch

from models.builder import build_model
from models.schedule import parse_schedule, validate_schedule
from models.spec import resolve_spec
from pipeline.curriculum.diet import diet_of_growth, growth_boundaries
from pipeline.curriculum.pruning import LossPruner
from pipeline.curriculum.strategies import make_curriculum
from pipeline.growth.config import GrowthConfig
from pipeline.run.plan import ExperimentPlan
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from tests.conftest import fresh_state, interrupted_then_resumed

CFG = TrainConfig(epochs=4, batch_size=100, deterministic=True, seed=3)
SCHEDULE = "1:conv(16)@after:pool1;2:residual;3:dropout(0.2)"


def _plan(data, curriculum=None):
    return ExperimentPlan(CFG, data, parse_schedule(SCHEDULE, CFG.epochs), GrowthConfig(), curriculum)


def _curriculum(data):
    n = len(data.train)
    difficulty = torch.linspace(0, 1, n)
    tiers = torch.div(torch.arange(n) * 3, n, rounding_mode="floor")
    return make_curriculum(difficulty, tiers, epochs=CFG.epochs, n=n, pacing="tiers", boundaries=[1, 2])


def test_growth_during_fit_reaches_the_final_spec_with_every_parameter_optimised(small_data):
    state = fit(fresh_state(small_data, CFG), small_data, CFG, _plan(small_data))
    start = resolve_spec("tiny", small_data.input_shape, small_data.num_classes)
    final = validate_schedule(start, parse_schedule(SCHEDULE, CFG.epochs), CFG.epochs)
    assert state.model.spec.layers == final.layers
    in_optimizer = {id(p) for group in state.optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in state.model.parameters()} == in_optimizer
    assert all(p in state.optimizer.state for p in state.model.parameters())  # all have momentum now
    static = build_model(final)
    assert {k: v.shape for k, v in static.state_dict().items()} == {
        k: v.shape for k, v in state.model.state_dict().items()
    }
    events = state.trace.events
    assert [e["epoch"] for e in events] == [1, 2, 3]
    assert all(
        {"probe_loss_before", "probe_loss_after", "flops_before", "flops_after", "seconds"} <= e.keys()
        for e in events
    )
    assert [h["model/params"] for h in state.history] == sorted(h["model/params"] for h in state.history)


def test_dynamic_run_with_curriculum_resumes_exactly(small_data, tmp_path):
    whole = fit(fresh_state(small_data, CFG), small_data, CFG, _plan(small_data, _curriculum(small_data)))
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, CFG),
        small_data,
        CFG,
        lambda: _plan(small_data, _curriculum(small_data)),
        tmp_path / "c.pt",
    )
    keys = ("train/loss", "val/loss", "val/acc", "train/examples", "model/params")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    assert [h["train/examples"] for h in whole.history] == [667, 1334, 2000, 2000]


def test_tiers_are_worked_through_before_the_first_growth_and_easy_ones_stay_unless_told():
    events = parse_schedule("4:conv(8);4:pool;7:residual;7:dropout(0.3)", 12)
    assert growth_boundaries(events) == [1, 2]
    assert growth_boundaries(events, retire_easy=True) == [1, 2, 4]
    first = parse_schedule("default", 12)[0].epoch
    assert growth_boundaries(parse_schedule("default", 12)) == [first // 3, 2 * first // 3]
    assert growth_boundaries(parse_schedule("9:conv(8);6:pool", 12), True) == [2, 4, 6]  # the earliest event
    assert growth_boundaries(parse_schedule("1:conv(8)", 12), True) == [0, 0, 1]  # no room: all data at once
    assert growth_boundaries([]) is None
    # The static control of the diet: the same boundaries, pruning from the epoch after the first
    # growth (at the growth where the easy examples retire there).
    assert diet_of_growth(events) == {"tier_boundaries": "1,2", "prune_from": 5}
    assert diet_of_growth(events, retire_easy=True) == {"tier_boundaries": "1,2,4", "prune_from": 4}
    assert diet_of_growth([]) == {"tier_boundaries": ""}


def test_a_pruned_run_resumes_exactly_and_trains_on_fewer_examples(small_data, tmp_path):
    def plan():
        pruner = LossPruner(len(small_data.train), rate=0.5, anneal=0.25, start=1, seed=CFG.seed)
        return ExperimentPlan(
            CFG, small_data, parse_schedule(SCHEDULE, CFG.epochs), GrowthConfig(), pruner=pruner
        )

    whole = fit(fresh_state(small_data, CFG), small_data, CFG, plan())
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, CFG), small_data, CFG, plan, tmp_path / "p.pt"
    )
    keys = ("train/loss", "val/loss", "val/acc", "train/examples", "curriculum/pruned_share")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    examples = [h["train/examples"] for h in whole.history]
    assert examples[0] == examples[3] == len(small_data.train)  # before the start, and the annealed tail
    assert all(n < len(small_data.train) for n in examples[1:3])

"""Training budgets: parsing, the epochs a budget buys, scaling of schedules, and real runs that
spend what they were given and no more."""

from __future__ import annotations

import mlflow
import pytest
import torch

from models.flops import flops_per_example
from models.schedule import named_schedule
from pipeline import train_dynamic, train_static
from pipeline.budget.meter import BudgetMeter, step_allowed
from pipeline.budget.plan import written_schedule
from pipeline.budget.spec import Budget, BudgetError, epochs_for, parse_budget, scale_epoch
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.growth.config import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.train_static import StaticConfig
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit, schedule_progress
from pipeline.training.lr_schedule import cosine_lr
from pipeline.training.state import RunProgress
from tests.conftest import fresh_state, growing_plan

DATA = DataConfig(subset=600)
QUIET = RunConfig(progress=False)


@pytest.mark.parametrize(
    ("text", "unit", "amount"),
    [("", "epochs", 12), ("24ep", "epochs", 24), ("3.2e14flops", "flops", 3.2e14), ("600s", "seconds", 600)],
)
def test_budgets_parse_to_unit_and_amount(text, unit, amount):
    assert parse_budget(text, 12) == Budget(unit, amount, text)


def test_a_run_budget_is_that_runs_cost_times_the_factor():
    costs = {("abc", "flops"): 1e12, ("abc", "seconds"): 30.0}
    lookup = lambda run_id, unit: costs[(run_id, unit)]
    assert parse_budget("run:abc", 12, lookup).amount == 1e12
    assert parse_budget("run:abc*1.5", 12, lookup) == Budget("flops", 1.5e12, "run:abc*1.5")
    assert parse_budget("run:abc:s", 12, lookup) == Budget("seconds", 30.0, "run:abc:s")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("12 parsecs", "use a number with a unit"),
        ("0flops", "must be positive"),
        ("-5s", "use a number with a unit"),
        ("2.5ep", "epochs must be a whole number"),
        ("run:abc:ep", "the cost of a run is its flops or its s"),
    ],
)
def test_bad_budgets_are_refused_by_name(text, message):
    with pytest.raises(BudgetError, match=message):
        parse_budget(text, 12, lambda run_id, unit: 1.0)


def test_the_epochs_a_budget_buys_are_the_most_that_fit():
    cost = lambda epochs: 10.0 * epochs  # 10 FLOPs an epoch
    assert epochs_for(Budget("flops", 35.0, "35flops"), cost, one_step=1.0) == 3
    assert epochs_for(Budget("flops", 40.0, "40flops"), cost, one_step=1.0) == 4
    assert epochs_for(Budget("flops", 5.0, "5flops"), cost, one_step=1.0) == 1  # a part of one epoch
    with pytest.raises(BudgetError, match="less than one training step"):
        epochs_for(Budget("flops", 0.5, "0.5flops"), cost, one_step=1.0)


def test_the_meter_refuses_the_step_that_would_overrun():
    meter = BudgetMeter(Budget("flops", 100.0, "100flops"), spent=60.0)
    assert meter.allows(examples_done=30, next_batch=10, flops_per_example=1.0, elapsed_s=0)  # 100
    assert not meter.exhausted
    assert not meter.allows(examples_done=40, next_batch=10, flops_per_example=1.0, elapsed_s=0)  # 110
    assert meter.exhausted


def test_a_budget_that_ends_where_the_network_grows_ends_the_run_on_the_network_it_trained(small_data):
    """Spent to within less than a step when the growth epoch comes: the epoch grows, cannot pay
    one step of the grown network, and the run ends on what it trained, not on new layers that
    never trained (which it would log and evaluate), with the growth gone from its trace and plan
    and a checkpoint written where it stopped."""
    cfg = TrainConfig(epochs=4, batch_size=100, seed=5, lr=0.05)
    state = fresh_state(small_data, cfg)
    start_spec = state.model.spec
    per_example = flops_per_example(state.model, small_data.input_shape)["train"]
    two_epochs = 2 * per_example * len(small_data.train)  # the start network's epochs 0 and 1
    meter = BudgetMeter(Budget("flops", two_epochs * 1.0001, "two epochs and a hair"))
    plan = growing_plan(small_data, cfg, "2:conv(16)@after:pool1")
    assert plan.growth_epochs() == {2}

    written = []
    keep = lambda s, _: written.append((s.epoch, s.stop_reason, s.model.spec))
    state = fit(state, small_data, cfg, plan, meter=meter, checkpoint=keep)

    assert state.stop_reason == "budget" and state.epoch == 2 and len(state.history) == 2
    assert written[-1] == (2, "budget", start_spec)  # a resume finds the run stopped there
    assert state.model.spec == start_spec
    assert state.trace.events == [] and plan.growth.applied == 0
    trained = {id(p) for p in state.model.parameters()}
    assert {id(p) for group in state.optimizer.param_groups for p in group["params"]} == trained
    assert state.cumulative_train_flops <= meter.budget.amount


def test_a_schedule_written_for_12_epochs_means_the_same_at_24():
    events = written_schedule("3:conv(64)@after:pool1;9:residual", 12)(24)
    assert [e.epoch for e in events] == [6, 18]
    assert scale_epoch(3, 12, 12) == 3
    # A named schedule is a function of the run length already.
    assert [e.epoch for e in written_schedule("default", 12)(24)] == [6, 6, 6]


@pytest.mark.slow
def test_a_flops_budget_trains_until_spent_and_never_more(tracking):
    static = train_static.run(DATA, TrainConfig(epochs=3, seed=1), StaticConfig(spec="tiny"), run_cfg=QUIET)
    spent = static.state.cumulative_train_flops
    # Half the static run's FLOPs: at most half, and most of it (whole epochs of equal cost).
    half = train_static.run(
        DATA,
        TrainConfig(epochs=3, seed=1, budget=f"{spent / 2}flops"),
        StaticConfig(spec="tiny"),
        run_cfg=QUIET,
    )
    assert half.state.cumulative_train_flops <= spent / 2
    assert half.state.epoch == 1  # 1.5 epochs' worth buys one whole epoch
    run = mlflow.last_active_run()
    assert run.data.params["budget_resolved"] == f"{spent / 2:.6g} flops"
    assert run.data.params["planned_epochs"] == "1"
    assert run.data.tags["stop_reason"] == "epochs" and run.data.tags["budget_unit"] == "flops"
    assert run.data.metrics["budget/used_fraction"] == pytest.approx(
        half.state.cumulative_train_flops / (spent / 2)
    )


@pytest.mark.slow
def test_a_dynamic_run_at_the_cost_of_a_static_run_trains_more_epochs_within_it(tracking):
    static = train_static.run(
        DATA, TrainConfig(epochs=8, seed=2), StaticConfig(spec="default"), run_cfg=QUIET
    )
    static_id = mlflow.last_active_run().info.run_id
    dynamic = train_dynamic.run(
        DATA,
        TrainConfig(epochs=8, seed=2, budget=f"run:{static_id}"),
        GrowthConfig(),
        DynamicCurriculumConfig(pacing="none", prune=0.0),
        QUIET,
    )
    budget = static.state.cumulative_train_flops
    assert dynamic.state.cumulative_train_flops <= budget
    assert dynamic.state.epoch > 8  # the cheaper start network buys extra epochs
    assert dynamic.state.cumulative_train_flops > 0.85 * budget
    # The growth schedule followed the run length: the default grows a quarter of the way in.
    grown_at = {event["applied_at_epoch"] for event in dynamic.state.trace.events}
    assert grown_at == {e.epoch for e in named_schedule("default", dynamic.state.epoch)}


def test_a_budget_of_an_unfinished_run_is_refused(tracking):
    with mlflow.start_run() as active:
        pass
    client = mlflow.MlflowClient()
    client.set_terminated(active.info.run_id, "FAILED")
    with pytest.raises(BudgetError, match="is FAILED, not FINISHED"):
        train_static.run(DATA, TrainConfig(budget=f"run:{active.info.run_id}"), StaticConfig(), run_cfg=QUIET)


def test_main_runs_the_quarter_budget_only_where_it_buys_static_a_whole_epoch(capsys):
    from pipeline.main import MainConfig, resolve_preset

    assert resolve_preset(MainConfig()).budgets == "epochs,seconds,flops:0.25"  # quick: 12 epochs
    assert resolve_preset(MainConfig(epochs=4)).budgets == "epochs,seconds,flops:0.25"
    assert resolve_preset(MainConfig(epochs=3)).budgets == "epochs,seconds"
    assert "no runs at flops:0.25 of static's training FLOPs: at 3 epochs" in capsys.readouterr().err


@pytest.mark.slow
def test_a_seconds_budget_counts_the_seconds_that_train_not_validation_or_logging(tracking):
    static = train_static.run(DATA, TrainConfig(epochs=3, seed=3), StaticConfig(spec="tiny"), run_cfg=QUIET)
    static_run = mlflow.last_active_run()
    parts = static.state.time_parts
    assert {"train", "growth", "diet", "val", "log", "checkpoint"} <= parts.keys()
    metrics = static_run.data.metrics
    assert metrics["time/trained_s"] == pytest.approx(parts["train"] + parts["growth"] + parts["diet"])
    assert metrics["time/total_val_s"] > 0 and metrics["time/total_checkpoint_s"] > 0
    assert 0 < metrics["time/trained_share"] < 1
    assert metrics["time/cumulative_trained_s"] < static.state.cumulative_s  # validation is not training
    # Another run given the static run's seconds spends its seconds that train, never more.
    given = metrics["time/cumulative_trained_s"]
    again = train_static.run(
        DATA,
        TrainConfig(epochs=3, seed=3, budget=f"run:{static_run.info.run_id}:s"),
        StaticConfig(spec="tiny"),
        run_cfg=QUIET,
    )
    run = mlflow.last_active_run()
    assert run.data.params["budget_resolved"] == f"{given:.6g} training seconds"
    assert run.data.metrics["budget/used"] == pytest.approx(run.data.metrics["time/trained_s"])
    assert run.data.metrics["budget/used"] <= given
    assert again.state.cumulative_s > run.data.metrics["budget/used"]
    # Most of its seconds spent (its plan has an epoch to spare, and the clock ends it), its last
    # step's rate the schedule's at the progress it logged, into the anneal. How many epochs the
    # timing planned, how much a loaded machine leaves unspent and how far the rate's progress
    # ends short of the seconds spent depend on the load (a stall after the last step began is
    # spent and cannot move the rate: seen in CI, the rate at 0.70 of the schedule with 0.875 of
    # the seconds spent), so none is asserted beyond that; the clock's pull on the rate is
    # test_a_seconds_runs_schedule_follows_the_clock_where_it_is_further_on's, on a given clock.
    assert run.data.metrics["budget/used_fraction"] > 0.8
    last, cfg = again.state.history[-1], TrainConfig()
    assert last["train/lr"] == pytest.approx(cosine_lr(cfg.lr, last["budget/schedule_progress"], cfg.warmup))
    assert last["budget/schedule_progress"] > 0.5


def test_a_seconds_runs_schedule_follows_the_clock_where_it_is_further_on():
    meter = BudgetMeter(Budget("seconds", 100.0, "100s"), spent=60.0, seconds_per_example=0.1)
    plan = RunProgress(4)
    assert schedule_progress(plan, 0.5, None) == 0.5  # no clock: the plan's share
    assert meter.allows(examples_done=100, next_batch=10, flops_per_example=0.0, elapsed_s=25.0)
    assert meter.progress == pytest.approx(0.85)  # 60 + 25 of 100 seconds
    assert schedule_progress(plan, 0.5, meter) == pytest.approx(0.85)  # a slow run: the clock's
    assert schedule_progress(plan, 0.9, meter) == pytest.approx(0.9)  # a fast one: the plan's
    plan.replan(2, 8)  # a re-planned run's progress goes on from where it was
    assert schedule_progress(plan, 2 / 8, None) == pytest.approx(0.5)
    assert schedule_progress(plan, 2 / 8, meter) == pytest.approx(0.85)


def test_the_meter_says_when_a_check_came_near_the_end_of_its_budget():
    meter = BudgetMeter(Budget("seconds", 100.0, "100s"), spent=90.0, seconds_per_example=0.1)
    assert meter.allows(examples_done=0, next_batch=10, flops_per_example=0.0, elapsed_s=0.0)  # 91
    assert not meter.near_end(0.02)
    assert meter.allows(examples_done=80, next_batch=10, flops_per_example=0.0, elapsed_s=8.0)  # 99
    assert meter.near_end(0.02)


def test_off_cuda_a_budget_check_reads_the_clock_once():
    reads = []

    def clock() -> float:
        reads.append(1)
        return 9.5

    meter = BudgetMeter(Budget("seconds", 10.0, "10s"), seconds_per_example=0.01)
    assert step_allowed(meter, 1.0, torch.device("cpu"), 950, 10, clock)  # 9.6 s, near the end
    assert len(reads) == 1  # the host's clock is the device's: nothing to wait for
    assert not step_allowed(meter, 1.0, torch.device("cpu"), 950, 60, clock)  # 10.1 s

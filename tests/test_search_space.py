"""tune's search space: every point it proposes either builds, grows and runs, or is refused
with the one documented reason (more pools than the input can halve), before any training."""

from __future__ import annotations

import math

import optuna
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.builder import build_model
from models.growth import grow
from models.layers import GROWABLE_TYPES, LAYER_TYPES, LAYERS
from models.schedule import GrowthError, GrowthEvent, parse_schedule
from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.curriculum.strategies import CURRICULUM_PACINGS
from pipeline.tune import search_space

START = resolve_spec("minimal", (1, 28, 28), 10)  # conv1 pool1 pool2 fc1: the map is 7x7 after pool2
SPACE = search_space.SearchSpace(
    epochs=6, max_events=5, layer_types=GROWABLE_TYPES, pacings=CURRICULUM_PACINGS, lr_low=0.01, lr_high=0.2
).validate()
# Pools the 7x7 map after pool2 can still take: 7 -> 3 -> 1.
POOLS_LEFT = 2

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny forward passes: on busy shared cores, a second intra-op thread costs 50x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _pools(candidate: search_space.Candidate) -> int:
    return sum(event.type == "pool" for event in candidate.events)


def _assert_trainable(candidate: search_space.Candidate) -> None:
    """The schedule's final network builds and maps a batch to class scores, and growing the
    start network event by event reaches that same architecture."""
    final = search_space.check(candidate, START, SPACE.epochs)
    logits = build_model(final).eval()(torch.zeros(2, *START.input_shape))  # (B, num_classes)
    assert logits.shape == (2, START.num_classes)
    model = build_model(START)
    for event in candidate.events:
        model, _ = grow(model, event)
    assert model.spec.layers == final.layers


def test_random_sampling_of_the_space_never_proposes_an_unexplained_invalid_schedule():
    """Sampled the way a study samples it (RandomSampler, in-memory study, define-by-run); the
    hypothesis test below builds, grows and runs the networks."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    outcomes = {"valid": 0, "invalid": 0}

    def objective(trial: optuna.Trial) -> float:
        candidate = search_space.suggest(trial, SPACE)
        epochs = [event.epoch for event in candidate.events]
        assert epochs == sorted(epochs) and all(1 <= e < SPACE.epochs for e in epochs)
        assert len(candidate.events) == trial.params["n_growth"] <= SPACE.max_events
        assert SPACE.lr_low <= candidate.lr <= SPACE.lr_high
        assert candidate.pacing in SPACE.pacings
        try:
            search_space.check(candidate, START, SPACE.epochs)
        except GrowthError as err:
            assert "below 1x1" in str(err) and "\n" not in str(err)
            assert _pools(candidate) > POOLS_LEFT
            outcomes["invalid"] += 1
            return 0.0
        assert _pools(candidate) <= POOLS_LEFT
        outcomes["valid"] += 1
        return 1.0

    study.optimize(objective, n_trials=300)
    assert outcomes["valid"] >= 280  # the space is mostly valid: invalid needs 4+ pools in 5 slots


# Every parameter the space may ask for, so FixedTrial can answer whichever it asks.
@st.composite
def space_points(draw) -> dict:
    params = {
        "n_growth": draw(st.integers(0, SPACE.max_events)),
        "pacing": draw(st.sampled_from(SPACE.pacings)),
        "pacing_a": draw(st.floats(*search_space.PACING_A)),
        "pacing_b": draw(st.floats(*search_space.PACING_B)),
        "lr": math.exp(draw(st.floats(math.log(SPACE.lr_low), math.log(SPACE.lr_high)))),
    }
    for k in range(1, SPACE.max_events + 1):
        params[f"growth{k}_epoch"] = draw(st.integers(1, SPACE.epochs - 1))
        # Pools are drawn often, so schedules with too many of them are common here.
        params[f"growth{k}_layer"] = draw(st.sampled_from(("pool", "pool", *GROWABLE_TYPES)))
        for search in {kind.search.param: kind.search for kind in LAYERS.values() if kind.search}.values():
            sizes = st.floats(*search.span) if search.span else st.sampled_from(search.choices)
            params[f"growth{k}_{search.param}"] = draw(sizes)
    return params


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=space_points())
def test_a_point_of_the_space_is_valid_exactly_when_its_pools_fit_the_map(params):
    candidate = search_space.suggest(optuna.trial.FixedTrial(params), SPACE)
    if _pools(candidate) > POOLS_LEFT:
        with pytest.raises(GrowthError, match="below 1x1"):
            search_space.check(candidate, START, SPACE.epochs)
    else:
        _assert_trainable(candidate)


@settings(max_examples=60, deadline=None)
@given(params=space_points())
def test_a_candidates_schedule_string_reads_back_as_its_events(params):
    """The schedule a trial logs is what ``train_dynamic --schedule`` will train."""
    candidate = search_space.suggest(optuna.trial.FixedTrial(params), SPACE)
    assert tuple(parse_schedule(candidate.schedule(), SPACE.epochs)) == candidate.events


def test_without_scores_only_pacing_none_is_searched_and_nothing_is_asked():
    assert search_space.restrict_pacings(("none", "tiers", "linear"), have_scores=False) == ("none",)
    assert search_space.restrict_pacings(("none", "tiers"), have_scores=True) == ("none", "tiers")
    assert search_space.restrict_pacings(("tiers",), have_scores=False) == ()
    space = search_space.SearchSpace(4, 0, ("conv",), ("none",), 0.05, 0.05).validate()
    trial = optuna.create_study().ask()
    candidate = search_space.suggest(trial, space)
    assert (candidate.pacing, candidate.events, candidate.lr) == ("none", (), 0.05)
    assert trial.params == {}  # fixed choices are not parameters: importances stay honest


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layer_types": ("conv", "lstm")}, "--layer-types 'conv,lstm': use some of conv, pool"),
        ({"pacings": ("tiers", "warp")}, "--pacings 'tiers,warp': use some of none, tiers"),
        ({"epochs": 1}, "--max-events 5 needs --epochs >= 2"),
        ({"lr_low": 0.3}, "learning-rate range [0.3, 0.2] must be positive and ordered"),
    ],
)
def test_a_space_that_cannot_work_is_refused_with_the_option_named(change, message):
    import dataclasses

    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        dataclasses.replace(SPACE, **change).validate()


def test_describe_names_each_layer_with_its_size():
    final = search_space.check(
        search_space.Candidate(
            tuple(parse_schedule("1:conv(64);2:dropout(0.3)", 4)), "none", None, None, 0.1
        ),
        START,
        4,
    )
    assert search_space.describe(final) == "conv1(32) pool1 pool2 conv2(64) fc1(128) drop1(0.3)"


def test_sepconv_is_searched_only_when_asked_with_the_conv_channel_choices():
    assert "sepconv" in LAYER_TYPES and "sepconv" not in search_space.DEFAULT_LAYER_TYPES.split(",")
    space = search_space.SearchSpace(4, 1, ("sepconv",), ("none",), 0.05, 0.05).validate()
    trial = optuna.trial.FixedTrial(
        {"n_growth": 1, "growth1_epoch": 2, "growth1_layer": "sepconv", "growth1_channels": 64}
    )
    candidate = search_space.suggest(trial, space)
    assert candidate.events == (GrowthEvent(2, {"type": "sepconv", "out_channels": 64}),)
    final = search_space.check(candidate, START, 4)
    assert search_space.describe(final) == "conv1(32) pool1 pool2 sep1(64) fc1(128)"

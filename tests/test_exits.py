"""Early exits: the spec carries them, growth keeps them (and turns a stage's head into one),
adaptive inference is the full forward at "never exit" and the first exit at "always", a mixed
batch gives each example what it gets alone, and a saved model takes the same exits."""

from __future__ import annotations

import mlflow
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.builder import build_model
from models.confidence import CONFIDENCES, ConfidenceError, confidence
from models.flops import exit_flops_per_example, flops_per_example
from models.growth import carry_stage_head, grow, stage_exits
from models.io import CONFIDENCE_KEY, ModelFileError, check_thresholds, load_model, save_model
from models.schedule import final_spec, named_schedule
from models.spec import ArchSpec, SpecError, named_layers, validate
from pipeline import exit_calibration, exits
from pipeline.exits import ExitConfig, ExitError, with_exits
from pipeline.training.loop import EpochClock, LossTerms, StepRecipe, train_one_epoch

SHAPE = (1, 28, 28)
MINIMAL = ArchSpec(SHAPE, 10, tuple(named_layers("minimal")), "minimal")
DEFAULT = ArchSpec(SHAPE, 10, tuple(named_layers("default")), "default")


def _model(spec: ArchSpec, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(spec).eval()


def _two_exits() -> ArchSpec:
    """The default network with exits after conv1 and after pool2."""
    return with_exits(DEFAULT, "conv1,pool2", 12)


# --- the spec ------------------------------------------------------------------------------


def test_exits_round_trip_through_json_and_leave_specs_without_them_unchanged():
    spec = _two_exits()
    assert ArchSpec.from_dict(spec.to_dict()) == spec
    assert [e["after"] for e in spec.exits] == ["conv1", "pool2"]
    # the exit's path: the later pools and the classifier layers, no convolutions
    assert [lay["id"] for lay in spec.exits[0]["layers"]] == ["pool1", "pool2", "fc1", "drop1"]
    assert "exits" not in DEFAULT.to_dict()


@pytest.mark.parametrize(
    "exits_value, message",
    [
        ("conv9", "'conv9' names no layer"),
        ("head", "nothing comes after the head"),
        ("drop1", "it would read what the head reads"),
        (
            '[{"id": "e1", "after": "fc1", "layers": [{"id": "c", "type": "conv", "out_channels": 4}]}]',
            "conv cannot follow",
        ),
        ('[{"id": "e1", "after": "pool2", "layers": [{"id": "p", "type": "pool", "size": 8}]}]', "below 1x1"),
        ('[{"id": "e1", "after": "pool2"}, {"id": "e2", "after": "conv1"}]', "depth order"),
        ('[{"id": "e1", "after": "pool1", "wrong": 1}]', "unknown field"),
    ],
)
def test_exits_that_cannot_work_are_refused_with_one_line(exits_value, message):
    with pytest.raises(ExitError, match=message):
        with_exits(DEFAULT, exits_value, 12)


@pytest.mark.parametrize("values", [[1.5], [-0.1], [0.5, 0.5], ["x"]])
def test_thresholds_outside_0_1_or_of_the_wrong_count_are_refused(values):
    with pytest.raises(SpecError):
        check_thresholds(values, with_exits(DEFAULT, "pool1", 12))


def test_exit_options_are_checked():
    with pytest.raises(
        ConfidenceError, match=r"--exit-confidence 'margin' is unknown \(known: maxprob, entropy\)"
    ):
        ExitConfig(exit_confidence="margin").validate()
    with pytest.raises(
        ExitError, match=r"--exit-calibration 'median' is unknown \(known: bound, point, tiers\)"
    ):
        ExitConfig(exit_calibration="median").validate()
    with pytest.raises(ExitError, match="outside"):
        ExitConfig(exit_threshold="1.2").validate()
    with pytest.raises(ExitError, match="outside"):
        ExitConfig(exit_weights="-1").validate()
    assert ExitConfig(exit_weights="0.3").weights_for(2) == (0.3, 0.3)
    assert ExitConfig(exit_threshold="0.9,0.8").thresholds_for(_two_exits()) == (0.9, 0.8)


def test_static_stages_are_the_exits_a_default_growing_run_ends_with():
    grown = stage_exits(MINIMAL, named_schedule("default", 12))
    static = with_exits(DEFAULT, "stages", 12)
    assert static.exits == grown.exits and static.layers == grown.layers
    assert static.exits[0]["after"] == "pool1"


# --- growth ----------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["default", "deep", "wide-fc", "late"])
def test_growth_keeps_each_stage_head_as_its_exit_and_every_function(schedule):
    """At every growth epoch the stage's head is carried into an exit that computes exactly
    what the stage did, and the final head still does too (function-preserving growth); the
    grown model has the names and shapes of a model built from its final spec."""
    events = named_schedule(schedule, 12)
    model = _model(MINIMAL)
    x = torch.randn(6, *SHAPE)
    for epoch in sorted({e.epoch for e in events}):
        due = [e for e in events if e.epoch == epoch]
        with torch.no_grad():
            before = model(x)
        model, entry = carry_stage_head(model, final_spec(model.spec, due))
        for event in due:
            model, _ = grow(model, event)
        model.eval()
        with torch.no_grad():
            outputs = model(x, exits=True)
        torch.testing.assert_close(outputs[-1], before, rtol=1e-5, atol=1e-5)
        if entry is not None:
            k = model.spec.exit_ids().index(entry["id"])
            torch.testing.assert_close(outputs[k], before, rtol=1e-5, atol=1e-5)
    final = stage_exits(MINIMAL, events)
    assert model.spec.layers == final.layers and model.spec.exits == final.exits
    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert shapes(model) == shapes(build_model(final))


def test_growth_keeps_an_exit_whose_map_is_unchanged_and_rebuilds_one_whose_map_changed():
    model = _model(with_exits(MINIMAL, "conv1,pool2", 12))
    (event,) = [e for e in named_schedule("default", 12) if e.id == "conv2"]  # after pool1, 64 channels
    grown, info = grow(model, event)
    assert grown.exits["exit1"] is model.exits["exit1"]  # conv1's output is what it was
    assert grown.exits["exit2"] is not model.exits["exit2"]  # pool2 now carries 64 channels
    assert info["reinitialised"] == ["exits.exit2"]


def test_exit_flops_grow_with_depth_and_the_first_exit_is_cheap():
    model = _model(with_exits(DEFAULT, "stages", 12))
    per_exit = exit_flops_per_example(model, SHAPE)
    full = flops_per_example(model, SHAPE)["forward"]
    assert per_exit[0] < 0.1 * full  # conv1 and a small classifier, against the whole network
    assert per_exit[-1] > full  # the head's path asks every exit on the way
    assert per_exit == sorted(per_exit)


# --- adaptive inference ----------------------------------------------------------------------


@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 9))
def test_never_exit_is_the_full_forward_and_always_exit_the_first_exit(measure, seed, n):
    model = _model(_two_exits(), seed % 7)
    model.exit_confidence = measure
    x = torch.randn(n, *SHAPE, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full, all_exits = model(x), model(x, exits=True)
    logits, taken = model.adaptive(x, [1.0, 1.0])
    torch.testing.assert_close(logits, full, rtol=1e-5, atol=1e-6)
    assert (taken == 2).all()
    logits, taken = model.adaptive(x, [0.0, 0.0])
    torch.testing.assert_close(logits, all_exits[0], rtol=1e-5, atol=1e-6)
    assert (taken == 0).all()


@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 12),
    thresholds=st.lists(st.sampled_from([0.01, 0.03, 0.12, 0.15, 0.2, 0.3, 0.5]), min_size=2, max_size=2),
)
def test_a_mixed_batch_gives_each_example_what_it_gets_alone(measure, seed, n, thresholds):
    model = _model(_two_exits(), seed % 5)
    model.exit_confidence = measure
    x = torch.randn(n, *SHAPE, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        confidences = torch.stack([confidence(o, measure) for o in model(x, exits=True)[:-1]])
    # an example whose confidence sits on a threshold could go either way at float precision
    if (confidences - torch.tensor(thresholds).view(-1, 1)).abs().min() < 1e-4:
        return
    logits, taken = model.adaptive(x, thresholds)
    for i in range(n):
        alone, where = model.adaptive(x[i : i + 1], thresholds)
        torch.testing.assert_close(logits[i : i + 1], alone, rtol=1e-5, atol=1e-5)
        assert int(taken[i]) == int(where)
    # the simulation that calibrates and draws curves takes the same decisions
    all_logits = exit_calibration.all_exit_logits(model, x)
    predictions, simulated = exit_calibration.simulate(all_logits, thresholds, measure)
    assert torch.equal(simulated, taken) and torch.equal(predictions, logits.argmax(1))


def test_save_load_keeps_exits_and_thresholds_and_takes_the_same_exits(tmp_path, small_data):
    model = _model(with_exits(DEFAULT, "stages", 12))
    x = small_data.val.x[:64]
    with torch.no_grad():  # an untrained exit is unsure: a threshold at its median splits the batch
        median = float(torch.softmax(model(x, exits=True)[0], 1).amax(1).median())
    model.exit_thresholds = (median,)
    logits, taken = model.adaptive(x)
    loaded = load_model(save_model(model, tmp_path / "m.safetensors")).eval()
    assert loaded.spec == model.spec and loaded.exit_thresholds == (median,)
    assert loaded.exit_confidence == "maxprob"
    again, taken_again = loaded.adaptive(x)
    assert torch.equal(taken, taken_again) and torch.equal(logits, again)
    assert 0 < int((taken == 0).sum()) < len(x)  # both ways taken, so the check means something


def test_the_logged_model_answers_by_adaptive_inference(tracking, small_data, tmp_path):
    from pipeline.run.logged_model import MODEL_ID_TAG, log_classifier, raw_images

    model = _model(with_exits(DEFAULT, "stages", 12))
    x = small_data.val.x[:32]
    with torch.no_grad():
        model.exit_thresholds = (float(torch.softmax(model(x, exits=True)[0], 1).amax(1).median()),)
    with mlflow.start_run() as run:
        log_classifier(model, small_data, "exits", tmp_path)
    logged = mlflow.pyfunc.load_model(f"models:/{mlflow.get_run(run.info.run_id).data.tags[MODEL_ID_TAG]}")
    probabilities = logged.predict(raw_images(small_data, x))
    logits, _ = model.adaptive(x)
    np.testing.assert_allclose(probabilities, torch.softmax(logits, 1).numpy(), atol=1e-3)


# --- calibration and training ----------------------------------------------------------------


def test_calibration_takes_the_lowest_threshold_within_the_allowed_loss():
    """Exit 0 is right on its confident half and wrong elsewhere: a shared threshold that lets
    only the confident half leave costs nothing, a lower one costs accuracy."""
    n = 200
    y = torch.zeros(n, dtype=torch.long)
    head = torch.zeros(n, 3)
    head[:, 0] = 5.0  # the head is always right
    exit0 = torch.zeros(n, 3)
    exit0[: n // 2, 0] = 6.0  # confident and right (max softmax ~0.995)
    exit0[n // 2 :, 1] = 1.0  # unsure and wrong (max softmax ~0.58)
    logits = torch.stack([exit0, head])
    (t,) = exit_calibration.calibrate(logits, y, acc_loss_points=0.2, rule="point")
    predictions, taken = exit_calibration.simulate(logits, [t])
    assert bool((predictions == y).all()) and (taken == 0).sum() == n // 2
    (loose,) = exit_calibration.calibrate(logits, y, acc_loss_points=60, rule="point")
    assert loose < t


def test_deep_supervision_trains_every_exit(small_data):
    model = build_model(with_exits(validate(DEFAULT), "stages", 12)).train()
    before = [p.detach().clone() for p in model.exits.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    stats = train_one_epoch(
        model,
        optimizer,
        small_data.train,
        torch.arange(256),
        StepRecipe(batch_size=64),
        EpochClock.single(0.05),
        LossTerms(exit_weights=(0.5,)),
    )
    assert np.isfinite(stats.loss) and stats.examples == 256
    assert all(not torch.equal(a, b) for a, b in zip(before, model.exits.parameters()))


# --- confidence measures ----------------------------------------------------------------------


@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    classes=st.integers(2, 12),
    scale=st.sampled_from([0.1, 1.0, 10.0, 100.0]),
)
def test_every_confidence_is_in_0_1_and_orders_sure_above_unsure(measure, seed, classes, scale):
    logits = scale * torch.randn(16, classes, generator=torch.Generator().manual_seed(seed))
    c = confidence(logits, measure)
    assert c.shape == (16,) and bool(((c >= 0) & (c <= 1)).all())
    # a uniform prediction is the least sure, a one-hot one the surest
    uniform, sure = torch.zeros(1, classes), torch.zeros(1, classes)
    sure[0, 0] = 1000.0
    assert bool((confidence(uniform, measure) <= c + 1e-6).all())
    assert bool((confidence(sure, measure) >= c - 1e-6).all())
    assert float(confidence(sure, measure)) > 0.999
    # the order of two candidates under one measure does not depend on a logit shift
    torch.testing.assert_close(confidence(logits + 3.0, measure), c)


def test_entropy_and_max_softmax_disagree_where_the_distribution_matters():
    """Torn between two classes (0.5, 0.5, 0, ...) against sure of one at 0.6 with the rest
    spread over nine: max softmax prefers the second, entropy the first (it is two-way unsure,
    not ten-way)."""
    torn = torch.log(torch.tensor([[0.5, 0.5] + [1e-9] * 8]))
    spread = torch.log(torch.tensor([[0.6] + [0.4 / 9] * 9]))
    assert float(confidence(spread, "maxprob")) > float(confidence(torn, "maxprob"))
    assert float(confidence(torn, "entropy")) > float(confidence(spread, "entropy"))
    # and entropy's uniform is 0, not max softmax's 1/C
    assert float(confidence(torch.zeros(1, 10), "entropy")) == pytest.approx(0.0, abs=1e-6)


def test_the_confidence_measure_is_saved_with_the_model(tmp_path, small_data):
    model = _model(with_exits(DEFAULT, "stages", 12))
    model.exit_confidence = "entropy"
    x = small_data.val.x[:64]
    with torch.no_grad():
        median = float(confidence(model(x, exits=True)[0], "entropy").median())
    model.exit_thresholds = (median,)
    logits, taken = model.adaptive(x)
    path = save_model(model, tmp_path / "m.safetensors")
    loaded = load_model(path).eval()
    assert loaded.exit_confidence == "entropy" and loaded.exit_thresholds == (median,)
    again, taken_again = loaded.adaptive(x)
    assert torch.equal(taken, taken_again) and torch.equal(logits, again)
    assert 0 < int((taken == 0).sum()) < len(x)
    # a file naming a measure this code does not know is refused, not read as max softmax
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as handle:
        metadata = {**handle.metadata(), CONFIDENCE_KEY: "margin"}
    save_file(load_file(str(path)), str(tmp_path / "bad.safetensors"), metadata=metadata)
    with pytest.raises(ModelFileError, match="'margin' is unknown"):
        load_model(tmp_path / "bad.safetensors")


def test_evaluate_refuses_another_measure_without_its_thresholds():
    model = _model(with_exits(DEFAULT, "stages", 12))
    model.exit_thresholds = (0.9,)
    assert exits.eval_confidence("", model, thresholds_given=False) == "maxprob"
    assert exits.eval_confidence("entropy", model, thresholds_given=True) == "entropy"
    with pytest.raises(ExitError, match="saved thresholds are on maxprob; pass --exit-threshold"):
        exits.eval_confidence("entropy", model, thresholds_given=False)
    with pytest.raises(ConfidenceError, match="unknown"):
        exits.eval_confidence("margin", model, thresholds_given=True)


# --- calibration: fine grid, per exit ---------------------------------------------------------


def _sure(p: float, cls: int, n: int, classes: int = 3) -> torch.Tensor:
    """(n, classes) logits whose max softmax is ``p``, on class ``cls``."""
    out = torch.zeros(n, classes)
    out[:, cls] = float(np.log(p * (classes - 1) / (1 - p)))
    return out


def test_the_fine_grid_finds_a_threshold_between_the_old_coarse_steps():
    """Exit 0's wrong half is 0.725 sure: the coarse grid (0.7, 0.8, ...) had to stop at 0.8,
    the fine grid stops at 0.73 and lets the 0.75-sure right examples out too."""
    y = torch.zeros(300, dtype=torch.long)
    exit0 = torch.cat([_sure(0.95, 0, 100), _sure(0.75, 0, 100), _sure(0.725, 1, 100)])
    head = _sure(0.99, 0, 300)
    logits = torch.stack([exit0, head])
    (t,) = exit_calibration.calibrate(logits, y, acc_loss_points=0.2, rule="point")
    assert t == pytest.approx(0.73)
    _, taken = exit_calibration.simulate(logits, [t])
    assert int((taken == 0).sum()) == 200
    coarse = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    assert exit_calibration.calibrate(logits, y, 0.2, candidates=coarse, rule="point") == (0.8,)


def test_per_exit_calibration_lowers_a_later_exit_below_the_shared_threshold_and_keeps_the_rule():
    """Exit 0 is wrong on a 0.8-sure third, so no shared threshold goes below 0.8; exit 1 is
    right on that third at 0.55: its own threshold can fall below 0.55 and send them out there
    instead of the head, at no accuracy cost."""
    n = 100
    y = torch.zeros(3 * n, dtype=torch.long)
    exit0 = torch.cat([_sure(0.95, 0, n), _sure(0.8, 1, n), _sure(0.4, 1, n)])
    exit1 = torch.cat([_sure(0.95, 0, n), _sure(0.55, 0, n), _sure(0.5, 2, n)])
    head = _sure(0.99, 0, 3 * n)
    logits = torch.stack([exit0, exit1, head])
    shared = exit_calibration.calibrate(logits, y, 0.2, per_exit=False, rule="point")
    t0, t1 = exit_calibration.calibrate(logits, y, 0.2, rule="point")
    assert shared[0] == shared[1] == pytest.approx(0.8) and t0 == pytest.approx(0.8)
    assert t1 < 0.55 and t1 >= 0.5
    predictions, taken = exit_calibration.simulate(logits, [t0, t1])
    assert bool((predictions == y).all())
    flops = [1, 2, 10]
    cost = float(torch.tensor(flops, dtype=torch.float)[taken].mean())
    _, shared_taken = exit_calibration.simulate(logits, list(shared))
    assert cost < float(torch.tensor(flops, dtype=torch.float)[shared_taken].mean())


def _growing_exits(seed: int, k_exits: int, n: int = 400, classes: int = 5):
    """Random logits (K+1, n, classes) of exits that grow more accurate with depth (the label's
    logit boosted more each exit), and the labels."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    logits = torch.randn(k_exits + 1, n, classes, generator=g) * 2
    for k in range(k_exits + 1):
        logits[k, torch.arange(n), y] += 1.0 + k
    return logits, y


def _tiers_of(seed: int, n: int) -> torch.Tensor:
    """(n,) random tier ids 0 easy, 1 medium, 2 hard."""
    return torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(seed + 1))


@pytest.mark.parametrize("rule", list(exits.CALIBRATION_RULES))
@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k_exits=st.integers(1, 3),
    loss=st.sampled_from([0.0, 0.2, 1.0, 5.0]),
)
def test_calibration_always_keeps_its_rule_on_the_split_it_saw(rule, measure, seed, k_exits, loss):
    logits, y = _growing_exits(seed, k_exits)
    tiers = _tiers_of(seed, len(y))
    thresholds = exit_calibration.calibrate(logits, y, loss, measure, rule=rule, tiers=tiers)
    assert len(thresholds) == k_exits and all(0 <= t <= 1 for t in thresholds)
    predictions, _ = exit_calibration.simulate(logits, thresholds, measure)
    right_head, right = logits[-1].argmax(1) == y, predictions == y
    # the rule holds at the thresholds (on every tier, for a per-tier rule), or none was found
    # and nothing leaves early (the head)
    never = all(t == 1.0 for t in thresholds)
    groups = [torch.ones_like(y, dtype=torch.bool)]
    if exits.CALIBRATION_RULES[rule].per_tier:
        groups += [tiers == t for t in range(3)]
    for g in groups:
        assert exits.acc_loss(right_head[g], right[g], rule) <= loss + 1e-9 or never
    if rule == "point":  # measured, the loss is the accuracy difference (exact, in float64)
        assert float(right.double().mean()) >= float(right_head.double().mean()) - loss / 100 - 1e-9
    # per exit never costs more FLOPs than the shared threshold (deeper exits cost more)
    flops = torch.arange(1, k_exits + 2, dtype=torch.float)
    shared = exit_calibration.calibrate(logits, y, loss, measure, per_exit=False, rule=rule, tiers=tiers)
    _, taken = exit_calibration.simulate(logits, thresholds, measure)
    _, shared_taken = exit_calibration.simulate(logits, shared, measure)
    assert float(flops[taken].mean()) <= float(flops[shared_taken].mean()) + 1e-9


# --- the upper-bound rule --------------------------------------------------------------------


def test_the_upper_bound_equals_a_hand_computation():
    """b = 6 discordant pairs against adaptive inference, c = 2 for it, of n = 100. Agresti-Min
    adds 1/2 to each cell: b = 6.5, c = 2.5, n = 102, so the loss is 4 / 102 = 0.0392157, its
    variance (9 - 16 / 102) / 102^2 = 0.00084997, sd 0.0291543; one-sided 95%: z = 1.6448536,
    bound = 0.0392157 + 1.6448536 * 0.0291543 = 0.0871703, 8.717 points (point rule: 4.0)."""
    assert exits.upper_bound_loss(6, 2, 100) == pytest.approx(8.71703, abs=1e-4)
    assert exits.point_loss(6, 2, 100) == pytest.approx(4.0)
    # no discordant pair: the bound is z / (n + 2), not the plain Wald bound's zero
    assert exits.upper_bound_loss(0, 0, 1000) == pytest.approx(100 * 1.6448536 / 1002, abs=1e-5)
    # counts from correctness vectors: head right / adaptive wrong, and the other way round
    head = torch.tensor([1, 1, 1, 0, 0, 1], dtype=torch.bool)
    adaptive = torch.tensor([1, 0, 0, 1, 0, 1], dtype=torch.bool)
    assert exits.discordant(head, adaptive) == (2, 1, 6)
    assert exits.acc_loss(head, adaptive, "point") == pytest.approx(100 / 6)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20_000), data=st.data())
def test_the_upper_bound_is_above_the_point_and_grows_with_the_losing_pairs(n, data):
    b = data.draw(st.integers(0, n))
    c = data.draw(st.integers(0, n - b))
    bound = exits.upper_bound_loss(b, c, n)
    assert bound > exits.point_loss(b, c, n)
    if b + c < n:
        assert exits.upper_bound_loss(b + 1, c, n) > bound


def test_the_bound_rule_keeps_wrong_leavers_in_that_the_point_rule_lets_out():
    """n = 1000, the head always right. Exit 0 is right and sure (0.999) on 898, wrong on two at
    0.955 and wrong on 100 at 0.505. The point rule may lose 2 of 1000 (0.2 points): it lets the
    two out and stops above 0.505, at 0.51. Their bound is 0.484 points (b = 2, c = 0: by hand,
    (2 + 1.6449 * sqrt(3 - 4/1002)) / 1002), over the budget, so the bound rule stops at 0.96,
    where nobody wrong leaves (bound z / 1002 = 0.164 points)."""
    y = torch.zeros(1000, dtype=torch.long)
    exit0 = torch.cat([_sure(0.999, 0, 898), _sure(0.955, 1, 2), _sure(0.505, 1, 100)])
    logits = torch.stack([exit0, _sure(0.99, 0, 1000)])
    assert exit_calibration.calibrate(logits, y, 0.2, rule="point") == pytest.approx((0.51,))
    assert exit_calibration.calibrate(logits, y, 0.2, rule="bound") == pytest.approx((0.96,))
    assert exits.upper_bound_loss(2, 0, 1000) == pytest.approx(0.48374, abs=1e-4)
    # at budget 0 the bound never passes (it is z / (n + 2) even with no loss): never exit
    assert exit_calibration.calibrate(logits, y, 0.0, rule="bound") == (1.0,)
    assert ExitConfig().exit_calibration == exits.DEFAULT_CALIBRATION == "tiers"
    assert exits.FALLBACK_CALIBRATION == "bound"


@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k_exits=st.integers(1, 3),
    loss=st.sampled_from([0.0, 0.2, 1.0, 5.0]),
)
def test_the_bound_rule_never_picks_a_lower_threshold_than_the_point_rule(measure, seed, k_exits, loss):
    """The bound is above the point wherever the point passes, so the downward search under the
    bound stops no later. Holds for the shared threshold, and so for one exit with the per-exit
    search (with several, coordinate descent may trade one exit against another)."""
    logits, y = _growing_exits(seed, k_exits)
    bound = exit_calibration.calibrate(logits, y, loss, measure, per_exit=False, rule="bound")
    point = exit_calibration.calibrate(logits, y, loss, measure, per_exit=False, rule="point")
    assert all(tb >= tp for tb, tp in zip(bound, point))
    one_exit = logits[[0, -1]]
    assert exit_calibration.calibrate(one_exit, y, loss, measure, rule="bound") >= exit_calibration.calibrate(
        one_exit, y, loss, measure, rule="point"
    )


# --- tier-aware rules -------------------------------------------------------------------------


def test_the_tiers_rule_keeps_in_the_wrong_leavers_the_hard_tier_would_pay_for():
    """3,000 examples, 1,000 per tier, the head always right. Exit 0 is right and 0.999 sure on
    everything but two hard examples, wrong and 0.955 sure. Over the whole split those two cost
    a bound of 0.1615 points (b = 2, c = 0, n = 3000; by hand (2 + 1.6449 * sqrt(3 - 4/3002)) /
    3002), within 0.2, so the bound rule lets everyone out (threshold 0). On the hard tier alone
    (n = 1000) they cost 0.484 points, so the tiers rule stops at 0.96, above them; there no one
    wrong leaves and each tier's bound is z / 1002 = 0.164 points."""
    y = torch.zeros(3000, dtype=torch.long)
    tiers = torch.arange(3000) // 1000  # 0 easy, 1 medium, 2 hard
    exit0 = torch.cat([_sure(0.999, 0, 2998), _sure(0.955, 1, 2)])
    logits = torch.stack([exit0, _sure(0.99, 0, 3000)])
    assert exits.upper_bound_loss(2, 0, 3000) == pytest.approx(0.16153, abs=1e-4)
    assert exits.upper_bound_loss(2, 0, 1000) == pytest.approx(0.48374, abs=1e-4)
    assert exit_calibration.calibrate(logits, y, 0.2, rule="bound") == (0.0,)
    assert exit_calibration.calibrate(logits, y, 0.2, rule="tiers", tiers=tiers) == pytest.approx((0.96,))
    # a tier-aware rule needs tiers; the whole-split ones ignore them
    with pytest.raises(
        ExitError, match="--exit-calibration tiers needs the validation split's difficulty tiers"
    ):
        exit_calibration.calibrate(logits, y, 0.2, rule="tiers")
    assert exit_calibration.calibrate(logits, y, 0.2, rule="bound", tiers=tiers) == (0.0,)


@pytest.mark.parametrize("measure", list(CONFIDENCES))
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k_exits=st.integers(1, 3),
    loss=st.sampled_from([0.0, 0.2, 1.0, 5.0, 20.0]),
)
def test_the_tiers_rule_never_picks_a_lower_threshold_than_the_bound_rule(measure, seed, k_exits, loss):
    """The tiers rule is the bound rule and more (each tier's bound too), so the downward
    search stops no later: the shared threshold, and one exit's with the per-exit search."""
    logits, y = _growing_exits(seed, k_exits)
    tiers = _tiers_of(seed, len(y))
    bound = exit_calibration.calibrate(logits, y, loss, measure, per_exit=False, rule="bound")
    tiered = exit_calibration.calibrate(logits, y, loss, measure, per_exit=False, rule="tiers", tiers=tiers)
    assert all(tt >= tb for tt, tb in zip(tiered, bound))
    one_exit = logits[[0, -1]]
    assert exit_calibration.calibrate(
        one_exit, y, loss, measure, rule="tiers", tiers=tiers
    ) >= exit_calibration.calibrate(one_exit, y, loss, measure, rule="bound")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k_exits=st.integers(1, 3), share=st.sampled_from([0.3, 0.5, 0.9]))
def test_a_hard_deep_floor_keeps_that_share_of_the_hard_tier_past_the_first_exit(seed, k_exits, share):
    logits, y = _growing_exits(seed, k_exits)
    tiers = _tiers_of(seed, len(y))
    floor = exits.CalibrationRule("floor", exits.point_loss, hard_deep=share)
    thresholds = exit_calibration.calibrate(logits, y, 20.0, rule=floor, tiers=tiers)
    _, taken = exit_calibration.simulate(logits, thresholds)
    assert float((taken[tiers == exits.HARD_TIER] > 0).double().mean()) >= share
    # without the floor, the same budget lets at least as many hard examples out at exit 1
    _, free = exit_calibration.simulate(logits, exit_calibration.calibrate(logits, y, 20.0, rule="point"))
    hard = tiers == exits.HARD_TIER
    assert int((free[hard] == 0).sum()) >= int((taken[hard] == 0).sum())


def test_the_hard_tier_id_matches_the_tier_names():
    from pipeline.data.tiers import TIER_NAMES

    assert TIER_NAMES.index("hard") == exits.HARD_TIER


def test_the_tiers_rule_falls_back_to_the_bound_without_tiers_and_says_so(tracking, small_data, capsys):
    """A run without difficulty scores (train_static --exits without a score_difficulty run)
    calibrates with the bound rule, prints one line saying why, and tags the rule it used."""
    from pipeline.run.exit_thresholds import set_exit_thresholds

    model = _model(with_exits(DEFAULT, "stages", 12))
    cfg = ExitConfig(exits="stages")  # the default rule: tiers
    with mlflow.start_run() as run:
        set_exit_thresholds(model, small_data.val, cfg, 256, None)
    tags = mlflow.get_run(run.info.run_id).data.tags
    assert tags["exit_calibration"] == "bound" and "no difficulty tiers" in tags["exit_calibration_fallback"]
    err = capsys.readouterr().err
    assert "--exit-calibration tiers needs the validation split's difficulty tiers" in err
    assert "calibrated with bound" in err
    logits = exit_calibration.all_exit_logits(model, small_data.val.x)
    bound = exit_calibration.calibrate(logits, small_data.val.y.cpu(), 0.2, rule="bound")
    assert model.exit_thresholds == bound
    # with tiers it uses them, logs each tier's bound, and the tag says tiers
    tiers = torch.arange(len(small_data.val.y)) % 3
    with mlflow.start_run() as run:
        set_exit_thresholds(model, small_data.val, cfg, 256, tiers)
    data = mlflow.get_run(run.info.run_id).data
    assert data.tags["exit_calibration"] == "tiers" and "exit_calibration_fallback" not in data.tags
    assert {f"val/exit_acc_loss_bound_{t}" for t in ("easy", "medium", "hard")} <= set(data.metrics)


# --- size checks count stage exits ------------------------------------------------------------


def test_the_size_check_counts_the_exits_each_growth_stage_adds():
    from types import SimpleNamespace

    from models.spec import spec_size
    from pipeline.run.session import RunConfig, check_network_sizes

    events = named_schedule("default", 12)
    bare = spec_size(final_spec(MINIMAL, events)).params
    staged = spec_size(stage_exits(MINIMAL, events)).params
    assert staged > bare
    limits = RunConfig(max_params=(bare + staged) // 2)
    cpu = torch.device("cpu")
    grows = SimpleNamespace(growth=SimpleNamespace(events=events, stage_exits=False))  # a plan's growth
    check_network_sizes(MINIMAL, grows, 128, limits, cpu)
    with pytest.raises(SpecError, match=r"with its stage exits \(exit1\).*exceed --max-params"):
        staging = SimpleNamespace(growth=SimpleNamespace(events=events, stage_exits=True))
        check_network_sizes(MINIMAL, staging, 128, limits, cpu)

"""The growth engine: a grown model has its static twin's shapes, ``init="preserve"`` keeps the
function whenever it says so, and every named schedule grows the minimal model that way."""

from __future__ import annotations

import json
import math

import hypothesis
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from models.builder import SpecNet, build_model, layer_signature
from models.growth import PlateauTrigger, events_due, grow, probe_jump
from models.layers import GROWABLE_TYPES
from models.schedule import (
    NAMED_SCHEDULES,
    GrowthError,
    GrowthEvent,
    apply_event,
    final_spec,
    parse_schedule,
)
from models.spec import (
    HEAD_ID,
    ArchSpec,
    SpecError,
    infer_shapes,
    layer_output_shape,
    resolve_spec,
)
from pipeline.training.config import TrainConfig, make_optimizer, rebuild_optimizer

FASHION = ((1, 28, 28), 10)


def minimal(input_shape=(1, 28, 28), num_classes=10) -> ArchSpec:
    return resolve_spec("minimal", input_shape, num_classes)


def shapes(model: nn.Module) -> dict[str, tuple]:
    """Names and shapes of parameters and buffers, in registration order."""
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def randomise_batchnorm(model: nn.Module) -> None:
    """Trained-looking batchnorm statistics, so that copying them (or not) shows in the output."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)


def check_grown(before: SpecNet, after: SpecNet) -> None:
    """Grown model = static model of its spec in names, shapes and order; unchanged layers shared."""
    assert isinstance(after, SpecNet)
    static = build_model(after.spec)
    assert list(after.layers) == list(static.layers) == [*after.spec.layer_ids(), HEAD_ID]
    assert list(shapes(after).items()) == list(shapes(static).items())
    old = {layer["id"]: layer for layer in before.spec.layers}
    old_in = dict(zip([*before.spec.layer_ids(), HEAD_ID], infer_shapes(before.spec)))
    for layer, in_shape in zip(after.spec.layers, infer_shapes(after.spec)):
        lid = layer["id"]
        same = lid in old and layer_signature(old[lid], old_in[lid]) == layer_signature(layer, in_shape)
        assert (lid in before.layers and after.layers[lid] is before.layers[lid]) == same, lid


# --- hypothesis strategies ---------------------------------------------------------------


def layer_fields(draw, kind: str) -> dict:
    if kind in ("conv", "sepconv"):
        return {"out_channels": draw(st.integers(1, 6)), "kernel_size": draw(st.sampled_from([1, 3]))}
    if kind == "pool":
        return {"kind": draw(st.sampled_from(["max", "avg"])), "size": draw(st.integers(1, 2))}
    if kind == "dropout":
        return {"p": draw(st.sampled_from([0.0, 0.3]))}
    if kind == "fc":
        return {"out_features": draw(st.integers(1, 12))}
    if kind == "residual":
        return {"kernel_size": draw(st.sampled_from([1, 3]))}
    return {}


@st.composite
def start_specs(draw) -> ArchSpec:
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    input_shape, layers = shape, []
    kinds = ["conv"] if draw(st.integers(0, 3)) else []  # as most real specs start
    kinds += draw(
        st.lists(
            st.sampled_from(["conv", "conv", "pool", "batchnorm", "residual", "dropout", "sepconv"]),
            max_size=3,
        )
    )
    if draw(st.booleans()):
        kinds += ["fc", *draw(st.lists(st.sampled_from(["fc", "dropout", "batchnorm"]), max_size=2))]
    for i, kind in enumerate(kinds):
        layer = {"id": f"s{i}", "type": kind, **layer_fields(draw, kind)}
        try:
            shape = layer_output_shape(layer, shape)
        except SpecError:  # a pool too big for the map: skip it
            continue
        layers.append(layer)
    return ArchSpec(input_shape, draw(st.integers(2, 4)), tuple(layers))


# Fields that fit anywhere the type can go, to find the positions open to it.
PROBE_FIELDS = {
    "conv": {"out_channels": 1},
    "sepconv": {"out_channels": 1},
    "fc": {"out_features": 1},
    "pool": {"size": 1},
}


@st.composite
def events_for(draw, spec: ArchSpec) -> GrowthEvent:
    """A valid event for ``spec``: any type, at any position where it builds, with widths often
    equal to or a little above the input's, which are the cases that can preserve."""
    kind = draw(st.sampled_from(GROWABLE_TYPES))
    ids = spec.layer_ids()
    where = {}
    for position in [None, "head", *(f"{side}:{lid}" for lid in ids for side in ("before", "after"))]:
        probe = GrowthEvent(1, {"type": kind, **PROBE_FIELDS.get(kind, {})}, position, "probe")
        try:
            where[position] = apply_event(spec, probe).layer_ids().index("probe")
        except GrowthError:
            continue
    if not where:  # e.g. a conv when the spec ends in fc layers: a dropout always fits
        return GrowthEvent(1, {"type": "dropout"})
    position = draw(st.sampled_from(list(where)))
    in_shape = infer_shapes(spec)[where[position]]
    fields = layer_fields(draw, kind)
    if "out_channels" in fields:
        fields["out_channels"] = draw(st.sampled_from([in_shape[0], in_shape[0] + 2, fields["out_channels"]]))
    elif "out_features" in fields:
        features = math.prod(in_shape)
        fields["out_features"] = draw(st.sampled_from([features, features + 3, fields["out_features"]]))
    layer_id = draw(st.sampled_from([None, f"g{len(ids)}"]))
    event = GrowthEvent(1, {"type": kind, **fields}, position, layer_id)
    try:
        apply_event(spec, event)
    except GrowthError:  # a pool that leaves a later pool too small a map: size 1 fits
        event = GrowthEvent(1, {**event.layer, "size": 1}, position, layer_id)
    return event


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_grow_matches_static_model_and_preserves_the_function(data):
    torch.manual_seed(0)
    start = data.draw(start_specs(), label="start")
    init = "random" if data.draw(st.integers(0, 3), label="init") == 0 else "preserve"
    model = build_model(start).eval()
    randomise_batchnorm(model)
    x = torch.randn(5, *start.input_shape)  # (B, C, H, W)
    if data.draw(st.booleans(), label="non-negative input"):
        x = x.abs()
    events = []
    for _ in range(data.draw(st.integers(1, 2), label="events")):
        event = data.draw(events_for(model.spec), label="event")
        events.append(event)
        grown, info = grow(model, event, init)
        check_grown(model, grown)
        assert not grown.training
        assert info["params_after"] == sum(p.numel() for p in grown.parameters())
        json.dumps(info)  # loggable as is
        hypothesis.event(f"{event.type} preserved={info['preserved']} widened={bool(info['widened'])}")
        if info["preserved"]:
            assert init == "preserve" or event.type == "dropout"
            torch.testing.assert_close(grown(x), model(x), atol=1e-5, rtol=1e-5)
        model = grown
    assert model.spec.layers == final_spec(start, events).layers


# --- each way of preserving, and each way it cannot ---------------------------------------

# conv1(32) pool1 fc1(128): fc1 reads 32x4x4
SMALL = ArchSpec(
    (1, 8, 8),
    10,
    (
        {"id": "conv1", "type": "conv", "out_channels": 32},
        {"id": "pool1", "type": "pool"},
        {"id": "fc1", "type": "fc", "out_features": 128},
    ),
)
WITH_RESIDUAL = ArchSpec(
    (2, 6, 6),
    3,
    (
        {"id": "conv1", "type": "conv", "out_channels": 4},
        {"id": "res1", "type": "residual"},
        {"id": "pool1", "type": "pool"},
        {"id": "bn1", "type": "batchnorm"},
        {"id": "fc1", "type": "fc", "out_features": 8},
    ),
)
DEFAULT = resolve_spec("default", (1, 8, 8), 10)  # conv1 pool1 conv2 pool2 res1 fc1 drop1
WITH_SEPCONV = ArchSpec(
    (1, 8, 8),
    10,
    (
        {"id": "conv1", "type": "conv", "out_channels": 4},
        {"id": "sep1", "type": "sepconv", "out_channels": 8},
        {"id": "pool1", "type": "pool"},
        {"id": "fc1", "type": "fc", "out_features": 16},
    ),
)
NO_FC = ArchSpec(
    (1, 4, 4), 3, ({"id": "conv1", "type": "conv", "out_channels": 2}, {"id": "pool1", "type": "pool"})
)


@pytest.mark.parametrize(
    ("start", "event", "preserved", "reinitialised", "widened"),
    [
        (SMALL, "1:conv(32)@after:pool1", True, [], []),
        (SMALL, "1:conv(64,5)@after:pool1", True, [], ["fc1"]),  # extra channels: fc1 columns zeroed
        (SMALL, "1:conv(16)@after:pool1", False, ["fc1"], []),  # narrower: cannot keep all channels
        (SMALL, "1:conv(1)@before:conv1", False, [], []),  # raw input may be negative
        (SMALL, "1:pool", False, ["fc1"], []),  # map shrinks
        (SMALL, "1:pool(max,1)", True, [], []),  # a pool of size 1 keeps the map
        (SMALL, "1:residual", True, [], []),
        (SMALL, "1:batchnorm@after:conv1", True, [], []),
        (SMALL, "1:dropout", True, [], []),
        (SMALL, "1:fc(128)", True, [], []),
        (SMALL, "1:fc(200)", True, [], ["head"]),
        (SMALL, "1:fc(64)", False, ["head"], []),
        (SMALL, "1:fc(600)@before:fc1", True, [], ["fc1"]),  # 600 >= 32*4*4 flattened features
        (NO_FC, "1:fc(9)", True, [], ["head"]),
        (
            WITH_RESIDUAL,
            "1:conv(6)@after:conv1",
            True,
            [],
            ["res1", "bn1", "fc1"],
        ),  # pool1 has no weights: reused
        (DEFAULT, "1:conv(48)@after:pool1", True, [], ["conv2"]),  # conv2 ignores the 16 extra channels
        (SMALL, "1:sepconv(32)@after:pool1", True, [], []),
        (SMALL, "1:sepconv(48,5)@after:pool1", True, [], ["fc1"]),  # extra channels: fc1 columns zeroed
        (SMALL, "1:sepconv(16)@after:pool1", False, ["fc1"], []),  # narrower: cannot keep all channels
        (WITH_SEPCONV, "1:conv(6)@after:conv1", True, [], ["sep1"]),  # sep1 ignores the 2 extra channels
        (WITH_SEPCONV, "1:sepconv(1)@before:conv1", False, [], []),  # raw input may be negative
        (WITH_RESIDUAL, "1:residual@after:bn1", False, [], []),  # after a batchnorm: may be negative
        (WITH_RESIDUAL, "1:conv(4)@after:bn1", False, [], []),
    ],
)
def test_preserving_init_by_case(start, event, preserved, reinitialised, widened):
    torch.manual_seed(1)
    model = build_model(start).eval()
    randomise_batchnorm(model)
    x = torch.randn(7, *start.input_shape)
    grown, info = grow(model, parse_schedule(event)[0], init="preserve")
    check_grown(model, grown)
    assert (info["preserved"], info["reinitialised"], info["widened"]) == (preserved, reinitialised, widened)
    if preserved:
        torch.testing.assert_close(grown(x), model(x), atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(grown(x), model(x))


def test_random_init_reinitialises_changed_layers_and_keeps_dtype():
    model = build_model(SMALL).double()
    grown, info = grow(model, parse_schedule("1:conv(64)")[0], init="random")
    assert (info["preserved"], info["reinitialised"], info["widened"]) == (False, ["fc1"], [])
    assert {p.dtype for p in grown.parameters()} == {torch.float64}
    with pytest.raises(GrowthError, match="use one of preserve, random"):
        grow(model, parse_schedule("1:dropout")[0], init="net2net")


@pytest.mark.parametrize("noise", [1.0, 3.0])
def test_growth_noise_adds_the_fresh_init_to_what_the_identity_set(noise):
    model = build_model(SMALL).eval()
    event = parse_schedule("1:conv(64)@after:pool1")[0]
    torch.manual_seed(5)
    exact, _ = grow(model, event, init="preserve")
    torch.manual_seed(5)  # the same draw: the noise consumes no extra randomness
    noisy, info = grow(model, event, init="preserve", noise=noise)
    torch.manual_seed(5)
    drawn, _ = grow(model, event, init="random")
    assert (info["noise"], info["preserved"]) == (noise, True)
    new, old, fresh = (m.layers["conv2"].conv for m in (noisy, exact, drawn))
    channels = old.weight.shape[1]  # conv2 reads the pool's channels; its first ones are the identity
    torch.testing.assert_close(new.weight[:channels], old.weight[:channels] + noise * fresh.weight[:channels])
    torch.testing.assert_close(new.weight[channels:], old.weight[channels:])  # random already
    torch.testing.assert_close(new.bias, old.bias)  # a zero bias stays the identity's
    x = torch.randn(7, *SMALL.input_shape)
    assert not torch.allclose(noisy(x), model(x))  # near the function, no longer on it


def test_optimizer_keeps_momentum_of_reused_parameters():
    torch.manual_seed(0)
    cfg = TrainConfig(lr=0.05, momentum=0.9)
    model = build_model(SMALL)
    optimizer = make_optimizer(model, cfg)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    old_params = set(model.parameters())
    grown, _ = grow(model, parse_schedule("1:conv(64)@after:pool1")[0])
    new_optimizer = rebuild_optimizer(optimizer, grown, cfg)

    in_optimizer = {p for group in new_optimizer.param_groups for p in group["params"]}
    assert in_optimizer == set(grown.parameters())
    kept = [p for p in grown.parameters() if p in old_params]
    assert {id(p) for p in kept} == {
        id(p) for lid in ("conv1", HEAD_ID) for p in grown.layers[lid].parameters()
    }
    for p in kept:
        assert new_optimizer.state[p]["momentum_buffer"] is optimizer.state[p]["momentum_buffer"]
    assert all(p not in new_optimizer.state for p in grown.parameters() if p not in old_params)
    buffer_before = new_optimizer.state[kept[0]]["momentum_buffer"].clone()
    new_optimizer.zero_grad()
    nn.functional.cross_entropy(grown(x), y).backward()
    new_optimizer.step()  # the kept buffers go on accumulating
    assert not torch.equal(new_optimizer.state[kept[0]]["momentum_buffer"], buffer_before)


def test_probe_jump_reports_loss_and_accuracy_in_eval_mode():
    torch.manual_seed(0)
    model = build_model(SMALL).train()
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    kept, _ = grow(model, parse_schedule("1:dropout(0.5)")[0])
    jump = probe_jump(model, kept, x, y)
    assert jump["loss_before"] == pytest.approx(jump["loss_after"], abs=1e-6)  # dropout is off in eval
    assert jump["acc_before"] == jump["acc_after"]
    assert model.training and kept.training  # modes restored
    shrunk, _ = grow(model, parse_schedule("1:pool")[0])
    assert probe_jump(model, shrunk, x, y)["loss_after"] != pytest.approx(jump["loss_before"])


# --- named schedules, grown ---------------------------------------------------------------


def test_default_schedule_grows_a_model_into_the_default_static_model():
    torch.manual_seed(0)
    model = build_model(resolve_spec("minimal", *FASHION))
    preserved = []
    for event in parse_schedule("default", 12):
        model, info = grow(model, event)
        preserved.append((info["layer_id"], info["preserved"], info["reinitialised"]))
    assert preserved == [("conv2", True, []), ("res1", True, []), ("drop1", True, [])]
    static = build_model(resolve_spec("default", *FASHION))
    assert list(shapes(model).items()) == list(shapes(static).items())


# The start network of a named schedule, and its data's shape, where it is not minimal's.
SCHEDULE_STARTS = {
    "resnet": ("resnet-start", ((3, 32, 32), 10)),
    "resnet-widen": ("resnet-narrow", ((3, 32, 32), 10)),
    "resnet-short": ("resnet-short-start", ((3, 32, 32), 10)),
    "resnet-short-widen": ("resnet-short-narrow", ((3, 32, 32), 10)),
    "resnet-short-whiten-widen": ("resnet-short-whiten-narrow", ((3, 32, 32), 10)),
    "short-convs-widen": ("short-convs-narrow", ((3, 32, 32), 10)),
}


@pytest.mark.parametrize("name", [n for n in NAMED_SCHEDULES if n != "none"])
def test_every_named_schedule_preserves_the_function_at_every_event(name):
    # The minimal spec holds the pools already, so no event shrinks a map under a trained layer.
    torch.manual_seed(0)
    start, shape = SCHEDULE_STARTS.get(name, ("minimal", FASHION))
    model = build_model(resolve_spec(start, *shape)).eval()
    x = torch.rand(4, *shape[0])  # (B, C, H, W)
    for event in parse_schedule(name, 12):
        grown, info = grow(model, event)
        assert info["preserved"] and not info["reinitialised"], (name, info["layer_id"])
        torch.testing.assert_close(grown(x), model(x), atol=1e-5, rtol=1e-5)
        model = grown


# --- growing on a plateau ----------------------------------------------------------------


def test_plateau_trigger_fires_after_patience_epochs_without_improvement_and_restarts():
    trigger = PlateauTrigger(patience=2, min_delta=0.01)
    fired = [trigger.update(acc) for acc in (0.50, 0.60, 0.605, 0.60, 0.70, 0.70, 0.70)]
    assert fired == [False, False, False, True, False, False, True]
    trigger.update(0.8)
    restored = PlateauTrigger(patience=2, min_delta=0.01)
    restored.load_state_dict(json.loads(json.dumps(trigger.state_dict())))
    assert restored == trigger
    with pytest.raises(GrowthError, match="patience must be >= 1"):
        PlateauTrigger(patience=0)


def test_events_due_brings_the_next_event_forward_on_a_plateau():
    events = parse_schedule("4:dropout;4:residual;8:pool")
    assert events_due(events, 0, 3) == []
    assert events_due(events, 0, 3, plateau=True) == events[:1]
    assert events_due(events, 1, 4) == events[1:2]
    assert events_due(events, 0, 9) == events
    assert events_due(events, 3, 9, plateau=True) == []

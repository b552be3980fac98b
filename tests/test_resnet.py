"""The residual family: the resblock and gap layer types, the resnet specs and their schedules
(blocks inserted, stages widened)."""

from __future__ import annotations

import pytest
import torch

from models import resnet
from models.builder import build_model, count_parameters, make_layer
from models.flops import flops_per_example
from models.growth import embed, grow
from models.layers import LAYERS
from models.schedule import (
    GrowthError,
    GrowthEvent,
    apply_event,
    parse_schedule,
    schedule_to_json,
    validate_schedule,
)
from models.spec import ArchSpec, SpecError, infer_shapes, resolve_spec, spec_size

CIFAR = ((3, 32, 32), 10)


@pytest.mark.parametrize(
    ("fields", "in_shape", "out_shape"),
    [
        ({"out_channels": 0}, (16, 32, 32), (16, 32, 32)),
        ({"out_channels": 32, "stride": 2}, (16, 32, 32), (32, 16, 16)),
        ({"out_channels": 32, "stride": 2}, (16, 7, 7), (32, 4, 4)),
        ({"out_channels": 24}, (16, 8, 8), (24, 8, 8)),
    ],
)
def test_a_resblock_has_the_shape_and_parameters_its_entry_says(fields, in_shape, out_shape):
    layer = {"id": "b", "type": "resblock", "kernel_size": 3, "stride": 1, **fields}
    module = make_layer(layer, in_shape)
    assert LAYERS["resblock"].output_shape(layer, in_shape) == out_shape
    assert module(torch.rand(2, *in_shape)).shape == (2, *out_shape)
    assert LAYERS["resblock"].params(layer, in_shape) == count_parameters(module)
    assert (module.shortcut is None) == (in_shape[0] == out_shape[0] and in_shape[1] == out_shape[1])


def test_a_resblock_refuses_strides_it_cannot_keep():
    for layer, shape, said in (
        ({"id": "b", "type": "resblock", "stride": 3}, (8, 8, 8), r"stride must be one of \(1, 2\), got 3"),
        ({"id": "b", "type": "resblock", "stride": 2}, (8, 1, 1), "below 1x1"),
        ({"id": "b", "type": "resblock", "out_channels": -4}, (8, 8, 8), "positive integer"),
    ):
        spec = ArchSpec(shape, 10, ({"id": "c", "type": "convbn", "out_channels": 8}, layer))
        with pytest.raises(SpecError, match=said):
            infer_shapes(spec)


def test_a_shape_keeping_resblock_starts_as_the_identity_and_widening_keeps_its_function():
    torch.manual_seed(0)
    layer = {"id": "b", "type": "resblock", "out_channels": 0, "stride": 1, "kernel_size": 3}
    block = make_layer(layer, (8, 6, 6)).eval()
    assert LAYERS["resblock"].identity(block, layer, (8, 6, 6), True)
    x = torch.rand(3, 8, 6, 6)
    torch.testing.assert_close(block(x), x)
    down = {"id": "d", "type": "resblock", "out_channels": 16, "stride": 2, "kernel_size": 3}
    old, new = make_layer(down, (8, 6, 6)).eval(), make_layer(down, (12, 6, 6)).eval()
    assert not LAYERS["resblock"].identity(old, down, (8, 6, 6), True)  # its shortcut projects
    assert LAYERS["resblock"].widen(old, new, (8, 6, 6), (12, 6, 6))
    wider = torch.cat([x, torch.rand(3, 4, 6, 6)], dim=1)  # the input gained 4 channels
    torch.testing.assert_close(new(wider), old(x))


def test_gap_is_a_head_growth_does_not_insert():
    spec = resolve_spec("resnet-start", *CIFAR)
    assert infer_shapes(spec)[-1] == (64,)  # the head reads a channel mean each
    with pytest.raises(GrowthError, match="a gap layer is in a network from its start"):
        parse_schedule("2:gap")


def test_the_resnet_schedule_grows_its_start_into_the_baseline_at_a_third_of_its_flops():
    start, final = resolve_spec("resnet-start", *CIFAR), resolve_spec("resnet", *CIFAR)
    assert validate_schedule(start, parse_schedule("resnet", 12), 12).layers == final.layers
    assert [layer["id"] for layer in final.layers] == [
        "stem", "s1b1", "s1b2", "s1b3", "s2b1", "s2b2", "s2b3", "s3b1", "s3b2", "s3b3", "gap",
    ]  # fmt: skip
    # ResNet-20: 0.27 M parameters (He et al. 2016, table 6), with option B's two projections
    assert 270_000 <= spec_size(final).params <= 280_000
    ratio = (
        flops_per_example(build_model(start), CIFAR[0])["train"]
        / flops_per_example(build_model(final), CIFAR[0])["train"]
    )
    assert 0.25 <= ratio <= 0.35
    assert resnet.growth_steps()[0] == ({"id": "s1b2", "type": "residual"}, "after:s1b1")


@pytest.mark.parametrize("init", ["preserve", "random"])
def test_growing_a_resnet_keeps_or_restarts_its_function_as_asked(init):
    torch.manual_seed(0)
    model = build_model(resolve_spec("resnet-start", *CIFAR)).eval()
    x = torch.rand(4, *CIFAR[0])  # (B, C, H, W)
    before = model(x)
    for event in parse_schedule("resnet", 12):
        model, info = grow(model, event, init=init)
        assert info["preserved"] == (init == "preserve") and not info["reinitialised"]
    model.eval()
    static = build_model(resolve_spec("resnet", *CIFAR))
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in static.named_parameters()
    ]
    if init == "preserve":
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(model(x), before, atol=1e-3)


# --- widening a stage ---------------------------------------------------------------------


def _train_flops(spec_name: str) -> float:
    return flops_per_example(build_model(resolve_spec(spec_name, *CIFAR)), CIFAR[0])["train"]


def test_the_resnet_widen_schedule_widens_its_narrow_start_into_the_baseline_from_a_quarter_of_its_flops():
    start, final = resolve_spec("resnet-narrow", *CIFAR), resolve_spec("resnet", *CIFAR)
    assert [infer_shapes(start)[i][0] for i in (1, 5, 8)] == [8, 16, 32]  # after stem, s2b1, s3b1
    events = parse_schedule("resnet-widen", 12)
    assert [e.to_compact() for e in events] == [
        "3:stem=widen(width=16)", "3:s2b1=widen(width=32)", "3:s3b1=widen(width=64)",
    ]  # fmt: skip
    assert validate_schedule(start, events, 12).layers == final.layers
    assert 0.22 <= _train_flops("resnet-narrow") / _train_flops("resnet") <= 0.28


def test_a_widen_event_reads_back_from_each_form_and_refuses_what_cannot_widen():
    event = GrowthEvent(5, {"type": "widen", "width": 32}, id="s2b1")
    assert parse_schedule("5:s2b1=widen(32)") == parse_schedule(schedule_to_json([event])) == [event]
    start = resolve_spec("resnet-narrow", *CIFAR)
    assert apply_event(start, event).layers[4] == {
        "id": "s2b1", "type": "resblock", "out_channels": 32, "stride": 2, "kernel_size": 3,
    }  # fmt: skip
    for text, said in (
        ("5:widen(32)", "names the layer it widens"),
        ("5:s2b1=widen(32)@after:stem", "takes no position"),
        ("5:s2b1=widen(-3)", "width must be a positive integer"),
        ("5:s2b1=widen(32,depth=2)", r"unknown field\(s\) depth"),
    ):
        with pytest.raises(GrowthError, match=said):
            parse_schedule(text)
    for text, said in (
        ("5:s1b2=widen(32)", "a residual layer has no width to widen"),
        ("5:s2b1=widen(16)", "'s2b1' is 16 wide already; a widen event only widens"),
        ("5:s9b9=widen(64)", "it widens 's9b9', which is no layer"),
    ):
        with pytest.raises(GrowthError, match=said):
            apply_event(start, parse_schedule(text)[0])


@pytest.mark.parametrize("init", ["preserve", "random"])
def test_widening_keeps_every_trained_weight_and_the_function_where_asked(init):
    torch.manual_seed(0)
    model = build_model(resolve_spec("resnet-narrow", *CIFAR))
    model.train()
    model(torch.rand(32, *CIFAR[0]))  # batchnorm statistics of their own, not the defaults
    model.eval()
    x = torch.rand(4, *CIFAR[0])  # (B, C, H, W)
    before, start = model(x), model
    for event in parse_schedule("resnet-widen", 12):
        model, info = grow(model, event, init=init)
        assert info["kind"] == "widen" and info["layer_id"] == event.id and not info["reinitialised"]
        assert info["preserved"] == (init == "preserve") and event.id in info["widened"]
    model.eval()
    static = build_model(resolve_spec("resnet", *CIFAR))
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in static.named_parameters()
    ]
    # every weight and statistic the narrow network trained sits in the leading slice
    grown = model.state_dict()
    for name, old in start.state_dict().items():
        torch.testing.assert_close(grown[name][tuple(slice(0, n) for n in old.shape)], old)
    if init == "preserve":
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)
        # the old channels read the new ones with zeros; the new ones are drawn, so they learn
        conv = model.layers["s2b2"].conv1.weight  # (32, 32, 3, 3), 16 of them old
        assert conv[:16, 16:].abs().sum() == 0 and conv[16:].abs().sum() > 0
    else:
        assert not torch.allclose(model(x), before, atol=1e-3)


def test_embed_refuses_modules_that_do_not_nest():
    torch.manual_seed(0)
    same = {"id": "b", "type": "resblock", "out_channels": 0, "stride": 1, "kernel_size": 3}
    narrow, projected = make_layer(same, (8, 6, 6)), make_layer({**same, "out_channels": 16}, (8, 6, 6))
    kept = {k: v.clone() for k, v in projected.state_dict().items()}
    assert not embed(narrow, projected, zero_new_inputs=True)  # the wider one has a shortcut
    assert all(torch.equal(v, kept[k]) for k, v in projected.state_dict().items())  # untouched
    assert not embed(make_layer(same, (16, 6, 6)), make_layer(same, (8, 6, 6)), zero_new_inputs=False)

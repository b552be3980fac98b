"""The residual family: the resblock and gap layer types, the resnet specs and their schedule."""

from __future__ import annotations

import pytest
import torch

from models import resnet
from models.builder import build_model, count_parameters, make_layer
from models.flops import flops_per_example
from models.growth import grow
from models.layers import LAYERS
from models.schedule import GrowthError, parse_schedule, validate_schedule
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
    with pytest.raises(GrowthError, match="a gap layer is a network's head"):
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

"""The scale layer type (airbench's constant multiplier before the head): what it computes, that
it costs nothing, what it does to the head's gradient, and the bad input."""

from __future__ import annotations

import math

import pytest
import torch

from models.builder import build_model, count_parameters
from models.growth_event import GrowthError
from models.layers import LAYERS, SpecError
from models.schedule import parse_schedule
from models.spec import ArchSpec, infer_shapes

CIFAR = ((3, 32, 32), 10)


def _spec(factor) -> ArchSpec:
    layers = (
        {"id": "c1", "type": "convbn", "out_channels": 8},
        {"id": "gap", "type": "gap"},
        {"id": "scale", "type": "scale", "factor": factor},
    )
    return ArchSpec(*CIFAR, layers)


def test_a_scale_layer_multiplies_by_its_factor_and_has_no_parameters():
    kind = LAYERS["scale"]
    layer = {"id": "s", "type": "scale", "factor": 0.25}
    for shape in ((8, 5, 5), (12,)):
        assert kind.output_shape(layer, shape) == shape
        module = kind.build(layer, shape)
        x = torch.randn(3, *shape)
        assert torch.equal(module(x), x * 0.25)
        assert kind.params(layer, shape) == count_parameters(module) == 0
    assert kind.identity(module, {**layer, "factor": 1}, (12,), False)
    assert not kind.identity(module, layer, (12,), False)


def test_a_scale_before_the_head_scales_its_logits_and_every_weights_gradient():
    torch.manual_seed(0)
    plain, scaled = build_model(_spec(1)), build_model(_spec(1 / 9))
    scaled.load_state_dict(plain.state_dict())  # the same weights: only the factor differs
    plain.eval(), scaled.eval()  # batchnorm by its running statistics: the body is linear in front
    x, direction = torch.randn(4, 3, 32, 32), torch.randn(4, 10)
    bias = plain.layers["head"].linear.bias
    torch.testing.assert_close(scaled(x) - bias, (plain(x) - bias) / 9)
    for model in (plain, scaled):  # a loss linear in the logits: its gradients scale exactly
        (model(x) * direction).sum().backward()
    for (name, p), q in zip(plain.named_parameters(), scaled.parameters()):
        expected = p.grad if name.endswith("head.linear.bias") else p.grad / 9
        torch.testing.assert_close(q.grad, expected, msg=name)


@pytest.mark.parametrize("factor", [0, -1, math.nan, math.inf, True, "0.1"])
def test_a_scale_with_a_factor_that_is_not_a_positive_number_is_refused_by_name(factor):
    message = f"layer 'scale': factor must be a positive finite number, got {factor!r}"
    with pytest.raises(SpecError, match=message):
        infer_shapes(_spec(factor))


def test_a_scale_needs_its_factor_and_growth_cannot_insert_one():
    layers = ({"id": "gap", "type": "gap"}, {"id": "scale", "type": "scale"})
    with pytest.raises(SpecError, match="layer 'scale': scale needs factor"):
        ArchSpec(*CIFAR, layers)
    with pytest.raises(GrowthError, match="a scale layer is in a network from its start"):
        parse_schedule("2:scale(0.5)")

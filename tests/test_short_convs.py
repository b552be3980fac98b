"""airbench93's layout as named specs: the baseline, its start at half the widths, and the
schedule that widens the one into the other, keeping its function where asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.growth import grow
from models.layers import LAYERS, SpecError
from models.layers.convbn import dirac_init
from models.schedule import parse_schedule, validate_schedule
from models.spec import infer_shapes, resolve_spec, spec_size
from pipeline.study.recipes import recipe
from pipeline.training.config import TrainConfig

CIFAR = ((3, 32, 32), 10)
PORT_SCREEN = Path(__file__).resolve().parents[1] / "docs" / "results" / "resnet" / "port-screen"


def _flops(spec_name: str) -> dict:
    return flops_per_example(build_model(resolve_spec(spec_name, *CIFAR)), CIFAR[0])


def test_the_baseline_is_airbench93s_layout():
    final = resolve_spec("short-convs", *CIFAR)
    assert [layer["id"] for layer in final.layers] == [
        "stem", "g1a", "g1pool", "g1b", "g2a", "g2pool", "g2b", "g3a", "g3pool", "g3b", "gap", "scale",
    ]  # fmt: skip
    convs = [layer for layer in final.layers if layer["type"] == "convbn"]
    assert [c["out_channels"] for c in convs] == [64, 64, 128, 128, 128, 128]
    assert {c["activation"] for c in convs} == {"gelu"} and final.layers[-1]["factor"] == pytest.approx(1 / 9)
    shapes = infer_shapes(final)
    assert shapes[1] == (24, 31, 31) and shapes[3] == (64, 15, 15) and shapes[9] == (128, 3, 3)
    assert 550_000 <= spec_size(final).params <= 600_000
    assert _flops("short-convs")["forward"] == 108_447_808  # the screens' figure
    assert 0.8 <= _flops("short-convs")["train"] / _flops("resnet-short")["train"] <= 0.88


def test_the_widen_schedule_widens_every_convolution_of_a_start_of_about_a_third_of_the_flops():
    start, final = resolve_spec("short-convs-narrow", *CIFAR), resolve_spec("short-convs", *CIFAR)
    assert start.layers[0] == final.layers[0]  # the stem keeps its 24 channels
    events = parse_schedule("short-convs-widen", 12)
    assert [e.to_compact() for e in events] == [
        "3:g1a=widen(width=64)", "3:g1b=widen(width=64)", "3:g2a=widen(width=128)",
        "3:g2b=widen(width=128)", "3:g3a=widen(width=128)", "3:g3b=widen(width=128)",
    ]  # fmt: skip
    assert validate_schedule(start, events, 12).layers == final.layers
    # g1a reads the stem's 24 channels at 31x31 at either width: above a quarter
    assert 0.28 <= _flops("short-convs-narrow")["train"] / _flops("short-convs")["train"] <= 0.34


@pytest.mark.parametrize("init", ["preserve", "random"])
def test_widening_keeps_or_restarts_the_function_as_asked_and_ends_as_the_baseline(init):
    torch.manual_seed(0)
    model = build_model(resolve_spec("short-convs-narrow", *CIFAR))
    model.train()
    model(torch.rand(32, *CIFAR[0]))  # batchnorm statistics of their own, not the defaults
    model.eval()
    x = torch.rand(4, *CIFAR[0])
    before, start = model(x), model
    for event in parse_schedule("short-convs-widen", 12):
        model, info = grow(model, event, init=init)
        assert info["kind"] == "widen" and info["preserved"] == (init == "preserve")
    model.eval()
    static = build_model(resolve_spec("short-convs", *CIFAR))
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in static.named_parameters()
    ]
    grown = model.state_dict()
    for name, old in start.state_dict().items():  # what trained sits in the leading slice
        torch.testing.assert_close(grown[name][tuple(slice(0, n) for n in old.shape)], old)
    if init == "preserve":
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(model(x), before, atol=1e-5, rtol=0)  # the logits are a ninth


def test_the_airbench_recipe_is_a_valid_configuration_of_every_arm():
    both = recipe("airbench").both
    assert both["batch_size"] == 1024 and both["bn_bias_lr_scale"] == 64.0 and both["lookahead"] == 5
    TrainConfig(**both).validate()
    # airbench94's pieces, each a change of one option over it, and all three together
    changed = {
        name: {k: v for k, v in recipe(name).both.items() if both.get(k) != v}
        for name in ("airbench-altflip", "airbench-whiten3", "airbench-triangular", "airbench94")
    }
    assert changed["airbench-altflip"] == {"augment": "altflip+translate"}
    assert changed["airbench-whiten3"] == {"whiten_bias_epochs": 3}
    assert changed["airbench-triangular"] == {"lr_schedule": "triangular"}
    assert changed["airbench94"] == {
        "augment": "altflip+translate",
        "whiten_bias_epochs": 3,
        "lr_schedule": "triangular",
    }


def test_a_convpoolbn_pools_between_its_convolution_and_its_batchnorm():
    torch.manual_seed(0)
    layer = {
        "id": "g1a",
        "type": "convpoolbn",
        "out_channels": 8,
        "kernel_size": 3,
        "activation": "gelu",
        "pool": 2,
    }
    kind = LAYERS["convpoolbn"]
    module = kind.build(layer, (4, 9, 9))
    assert kind.output_shape(layer, (4, 9, 9)) == (8, 4, 4)
    assert kind.params(layer, (4, 9, 9)) == sum(p.numel() for p in module.parameters())
    x = torch.randn(16, 4, 9, 9)  # (B, C, H, W)
    module.train()
    airbench = torch.nn.functional.gelu(module.bn(torch.nn.functional.max_pool2d(module.conv(x), 2)))
    torch.testing.assert_close(module(x), airbench)
    assert not kind.identity(module, layer, (4, 9, 9), True)  # the pool changes the map
    with pytest.raises(SpecError, match="pool of 4 would shrink the 3x3 map below 1x1"):
        kind.output_shape({**layer, "pool": 4}, (4, 3, 3))
    assert dirac_init(module) == 1  # airbench's identity start reaches it, as a convbn
    assert torch.equal(module.conv.weight[:4, :, 1, 1], torch.eye(4))


def test_the_pool_first_baseline_pools_as_airbench_and_widens_from_its_narrow_start():
    final = resolve_spec("short-convs-poolbn", *CIFAR)
    assert [layer["id"] for layer in final.layers] == [
        "stem", "g1a", "g1b", "g2a", "g2b", "g3a", "g3b", "gap", "scale",
    ]  # fmt: skip
    assert [layer["type"] for layer in final.layers[1:7]] == ["convpoolbn", "convbn"] * 3
    # the same maps, parameters and convolution FLOPs (what the budgets count) as short-convs;
    # only its first convolutions' batchnorms and activations see a quarter of the positions
    assert infer_shapes(final)[-1] == infer_shapes(resolve_spec("short-convs", *CIFAR))[-1]
    assert spec_size(final).params == spec_size(resolve_spec("short-convs", *CIFAR)).params
    assert _flops("short-convs-poolbn") == _flops("short-convs")
    _widens_into("short-convs-poolbn-narrow", final)


def test_the_max_head_baseline_is_the_port_screens_and_widens_from_its_narrow_start():
    final = resolve_spec("short-convs-maxhead", *CIFAR)
    screened = json.loads((PORT_SCREEN / "maxhead.json").read_text())["layers"]
    assert final.layers == resolve_spec(str(PORT_SCREEN / "maxhead.json"), *CIFAR).layers
    assert [layer["id"] for layer in screened][-2:] == ["headpool", "scale"]
    shapes = infer_shapes(final)
    assert shapes[-3] == (128, 3, 3) and shapes[-2] == (128, 1, 1)  # a 3x3 max-pool of a 3x3 map: global
    # the same parameters and FLOPs as the averaging head (the screens' 1.08e8 forward)
    assert spec_size(final).params == spec_size(resolve_spec("short-convs", *CIFAR)).params
    assert _flops("short-convs-maxhead")["forward"] == 108_447_808
    model = build_model(final).eval()
    x = torch.rand(2, *CIFAR[0])
    features = model.layers["g3b"](torch.nn.Sequential(*list(model.layers.values())[:-4])(x))
    logits = model.layers["head"](model.layers["scale"](model.layers["headpool"](features)).flatten(1))
    assert torch.allclose(model(x), logits)
    assert torch.equal(model.layers["headpool"](features).flatten(1), features.amax(dim=(2, 3)))
    _widens_into("short-convs-maxhead-narrow", final)


def _widens_into(start_name: str, final) -> None:
    """``short-convs-widen`` takes the named start to ``final``'s layers, and a model grown by it
    has the parameters, by name and shape, of a static model built from ``final``."""
    start = resolve_spec(start_name, *CIFAR)
    assert validate_schedule(start, parse_schedule("short-convs-widen", 12), 12).layers == final.layers
    torch.manual_seed(0)
    model = build_model(start)
    for event in parse_schedule("short-convs-widen", 12):
        model, info = grow(model, event, init="random")
        assert info["kind"] == "widen"
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in build_model(final).named_parameters()
    ]

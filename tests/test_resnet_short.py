"""The residual family for short runs: its specs, their sizes, and its two schedules (residual
blocks inserted, layers widened), which grow each start into the baseline keeping its function
where asked."""

from __future__ import annotations

import pytest
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.growth import grow
from models.schedule import parse_schedule, validate_schedule
from models.spec import infer_shapes, resolve_spec, spec_size

CIFAR = ((3, 32, 32), 10)


def _train_flops(spec_name: str) -> float:
    return flops_per_example(build_model(resolve_spec(spec_name, *CIFAR)), CIFAR[0])["train"]


def test_the_baseline_is_wide_and_shallow_and_ends_in_a_channel_mean():
    final = resolve_spec("resnet-short", *CIFAR)
    assert [layer["id"] for layer in final.layers] == [
        "stem", "g1conv", "g1pool", "g1res", "g2conv", "g2pool", "g2res", "g3conv", "g3pool", "g3res", "gap",
    ]  # fmt: skip
    shapes = infer_shapes(final)
    assert shapes[3] == (48, 16, 16) and shapes[9] == (192, 4, 4) and shapes[-1] == (192,)
    assert 1_000_000 <= spec_size(final).params <= 1_200_000
    # about 1.6 ResNet-20s of compute a step, for far fewer epochs to the same accuracy
    assert 1.4 <= _train_flops("resnet-short") / _train_flops("resnet") <= 1.8


def test_the_resnet_short_schedule_inserts_each_groups_block_into_a_start_of_half_the_flops():
    start, final = resolve_spec("resnet-short-start", *CIFAR), resolve_spec("resnet-short", *CIFAR)
    events = parse_schedule("resnet-short", 12)
    assert [e.to_compact() for e in events] == [
        "3:g1res=residual@after:g1pool",
        "3:g2res=residual@after:g2pool",
        "3:g3res=residual@after:g3pool",
    ]
    assert validate_schedule(start, events, 12).layers == final.layers
    assert 0.4 <= _train_flops("resnet-short-start") / _train_flops("resnet-short") <= 0.6


def test_the_widen_schedule_widens_a_start_of_a_quarter_of_the_flops_into_the_baseline():
    start, final = resolve_spec("resnet-short-narrow", *CIFAR), resolve_spec("resnet-short", *CIFAR)
    widths = [infer_shapes(start)[i][0] for i in (1, 2, 5, 8)]  # after stem, g1conv, g2conv, g3conv
    assert widths == [12, 24, 48, 96]
    events = parse_schedule("resnet-short-widen", 12)
    assert [e.to_compact() for e in events] == [
        "3:stem=widen(width=24)", "3:g1conv=widen(width=48)", "3:g2conv=widen(width=96)",
        "3:g3conv=widen(width=192)",
    ]  # fmt: skip
    assert validate_schedule(start, events, 12).layers == final.layers
    assert 0.22 <= _train_flops("resnet-short-narrow") / _train_flops("resnet-short") <= 0.28


def test_the_whitened_start_keeps_the_stem_and_costs_three_tenths_of_the_flops():
    start, final = (
        resolve_spec("resnet-short-whiten-narrow", *CIFAR),
        resolve_spec("resnet-short-whiten", *CIFAR),
    )
    assert (
        start.layers[0] == final.layers[0] and start.layers[0]["type"] == "whiten"
    )  # 24 channels either way
    widths = [infer_shapes(start)[i][0] for i in (1, 2, 5, 8)]  # after stem, g1conv, g2conv, g3conv
    assert widths == [24, 24, 48, 96]
    events = parse_schedule("resnet-short-whiten-widen", 12)
    assert [e.to_compact() for e in events] == [
        "3:g1conv=widen(width=48)", "3:g2conv=widen(width=96)", "3:g3conv=widen(width=192)",
    ]  # fmt: skip
    assert validate_schedule(start, events, 12).layers == final.layers
    # g1conv reads the stem's full 24 channels: a little above the plain start's quarter
    assert 0.28 <= _train_flops("resnet-short-whiten-narrow") / _train_flops("resnet-short-whiten") <= 0.32


# (start, schedule, the static network it ends as)
GROWTHS = [
    ("resnet-short-start", "resnet-short", "resnet-short"),
    ("resnet-short-narrow", "resnet-short-widen", "resnet-short"),
    ("resnet-short-whiten-narrow", "resnet-short-whiten-widen", "resnet-short-whiten"),
]


@pytest.mark.parametrize(("start_name", "schedule", "final"), GROWTHS)
@pytest.mark.parametrize("init", ["preserve", "random"])
def test_growing_keeps_or_restarts_the_function_as_asked_and_ends_as_the_baseline(
    start_name, schedule, final, init
):
    torch.manual_seed(0)
    model = build_model(resolve_spec(start_name, *CIFAR))
    model.train()
    model(torch.rand(32, *CIFAR[0]))  # batchnorm statistics of their own, not the defaults
    model.eval()
    x = torch.rand(4, *CIFAR[0])  # (B, C, H, W)
    before, start = model(x), model
    for event in parse_schedule(schedule, 12):
        model, info = grow(model, event, init=init)
        assert info["preserved"] == (init == "preserve") and not info["reinitialised"]
        if event.type == "widen" and event.id != "stem":  # the group's block widens with it
            block = event.id.replace("conv", "res")
            assert info["kind"] == "widen" and {event.id, block} <= set(info["widened"])
    model.eval()
    static = build_model(resolve_spec(final, *CIFAR))
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in static.named_parameters()
    ]
    if schedule.endswith("-widen"):  # every weight and statistic trained sits in the leading slice
        grown = model.state_dict()
        for name, old in start.state_dict().items():
            torch.testing.assert_close(grown[name][tuple(slice(0, n) for n in old.shape)], old)
    if init == "preserve":
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(model(x), before, atol=1e-3)

"""convbn (convolution, batchnorm, ReLU) and the -bn spec pair: growth into it keeps the function
in eval mode exactly and, once calibrated on a training batch, in train mode too (issue 35);
and --clip-grad bounds a step."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from models.builder import build_model
from models.growth import calibrate, grow, output_nonnegative
from models.layers import SpecError
from models.layers.convbn import CONVBN, ConvBnLayer
from models.schedule import final_spec, parse_schedule
from models.spec import ArchSpec, infer_shapes, resolve_spec
from pipeline.cli import ConfigError
from pipeline.growth.config import GrowthConfig
from pipeline.run.plan import ExperimentPlan
from pipeline.training.config import TrainConfig
from pipeline.training.state import new_state
from tests.conftest import fresh_state
from tests.test_training import one_batch_at_zero_rate

CIFAR = ((3, 32, 32), 10)


def test_minimal_bn_grows_into_default_bn_keeping_the_eval_function():
    torch.manual_seed(0)
    start = resolve_spec("minimal-bn", *CIFAR)
    events = parse_schedule("default-bn", 12)
    assert final_spec(start, events).layers == resolve_spec("default-bn", *CIFAR).layers
    model, x = build_model(start), torch.randn(32, *CIFAR[0])  # (B, C, H, W)
    model.train()
    model(x)  # batchnorm running statistics that are not the initial ones
    model.eval()
    before = model(x)
    for event in events:
        model, info = grow(model, event)
        assert info["preserved"] and not info["reinitialised"], info["layer_id"]
        assert calibrate(model, info["layer_id"], x) == (info["layer_id"] == "conv2")
    model.eval()
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)


def test_a_calibrated_identity_convbn_is_the_identity_in_train_mode_too():
    torch.manual_seed(0)
    layer = ConvBnLayer(8, 16, 3)
    x = 3 * torch.relu(torch.randn(64, 8, 6, 6)) + 1  # a trained layer's scale, far from N(0, 1)
    grown_layer = {
        "id": "conv2",
        "type": "convbn",
        "out_channels": 16,
        "kernel_size": 3,
        "activation": "relu",
    }
    assert CONVBN.identity(layer, grown_layer, (8, 6, 6), True)
    layer.train()
    uncalibrated = layer(x)[:, :8]
    assert (uncalibrated - x).norm() / x.norm() > 0.3  # batch statistics undo the identity...
    CONVBN.calibrate(layer, x)
    torch.testing.assert_close(layer(x)[:, :8], x, atol=1e-4, rtol=1e-4)  # ...until calibrated
    layer.eval()
    torch.testing.assert_close(layer(x)[:, :8], x, atol=1e-4, rtol=1e-4)


def test_the_plan_calibrates_what_it_grows_as_an_identity(small_data):
    cfg = TrainConfig(epochs=4, batch_size=64, seed=0)
    events = parse_schedule("2:convbn(16)@after:pool1", cfg.epochs)
    plan = ExperimentPlan(cfg, small_data, events, GrowthConfig(growth_init="preserve"))
    state = fresh_state(small_data, cfg)  # tiny: conv1 (a plain conv) pool1 fc1
    _, _, reports = plan.before_epoch(2, state.model, state.optimizer)
    assert reports[0]["calibrated"] and reports[0]["probe_loss_after"] == pytest.approx(
        reports[0]["probe_loss_before"], rel=1e-4
    )


def test_clip_grad_bounds_the_step(small_data):
    cfg = TrainConfig(batch_size=64, momentum=0.0, weight_decay=0.0, seed=0)
    state = fresh_state(small_data, cfg)
    before = [p.detach().clone() for p in state.model.parameters()]
    one_batch_at_zero_rate(state, small_data.train, clip_grad=1e-3)  # the rate is 0: no change
    assert all(torch.equal(a, b) for a, b in zip(before, state.model.parameters()))
    from pipeline.training.loop import EpochClock, StepRecipe, train_one_epoch

    train_one_epoch(
        state.model,
        state.optimizer,
        small_data.train,
        torch.arange(64),
        StepRecipe(batch_size=64, clip_grad=1e-3),
        EpochClock.single(1.0),
    )
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(state.model.parameters(), before)])
    assert 0 < float(step.norm()) <= 1e-3 * 1.0001  # rate 1 times a gradient clipped to norm 1e-3


def test_a_negative_clip_is_refused():
    with pytest.raises(ConfigError, match="--clip-grad"):
        dataclasses.replace(TrainConfig(), clip_grad=-1.0).validate()


# --- GELU (airbench's activation) ----------------------------------------------------------------


def test_a_gelu_convbn_applies_gelu_and_is_never_an_identity_or_known_non_negative():
    torch.manual_seed(0)
    layer = {"id": "c", "type": "convbn", "out_channels": 8, "kernel_size": 3, "activation": "gelu"}
    module = CONVBN.build(layer, (4, 6, 6)).eval()
    x = torch.randn(2, 4, 6, 6)
    torch.testing.assert_close(module(x), torch.nn.functional.gelu(module.bn(module.conv(x))))
    assert (module(x) < 0).any()  # GELU dips below 0: what follows cannot count on a ReLU's sign
    assert not CONVBN.identity(module, layer, (4, 6, 6), True)
    relu = {**layer, "activation": "relu"}
    assert CONVBN.identity(CONVBN.build(relu, (4, 6, 6)), relu, (4, 6, 6), True)
    spec = ArchSpec((3, 8, 8), 10, (relu, {**layer, "id": "g"}, {**relu, "id": "r2"}))
    assert output_nonnegative(spec) == [True, False, True]
    default = ArchSpec((3, 8, 8), 10, ({"id": "c", "type": "convbn", "out_channels": 8},))
    assert default.layers[0]["activation"] == "relu"


def test_growth_inserts_no_identity_after_a_gelu_layer_and_keeps_the_function_after_a_relu_one():
    torch.manual_seed(0)
    layers = (
        {"id": "c1", "type": "convbn", "out_channels": 8, "activation": "gelu"},
        {"id": "c2", "type": "convbn", "out_channels": 8},
        {"id": "gap", "type": "gap"},
    )
    model = build_model(ArchSpec((3, 8, 8), 10, layers)).eval()
    x = torch.randn(4, 3, 8, 8)
    before = model(x)
    after_relu, info = grow(model, parse_schedule("1:convbn(8)@after:c2", 4)[0])
    assert info["preserved"] and torch.allclose(after_relu.eval()(x), before, atol=1e-5)
    _, info = grow(model, parse_schedule("1:convbn(8)@after:c1", 4)[0])
    assert not info["preserved"]  # a ReLU identity would clip GELU's negative outputs


@pytest.mark.parametrize("activation", ["tanh", "", 1, ["relu"]])
def test_a_convbn_with_an_unknown_activation_is_refused_by_name(activation):
    layer = {"id": "c", "type": "convbn", "out_channels": 8, "activation": activation}
    message = f"layer 'c': activation must be one of relu, gelu, got {activation!r}"
    with pytest.raises(SpecError, match=re.escape(message)):
        infer_shapes(ArchSpec((3, 8, 8), 10, (layer,)))


# --- the identity start (--conv-init dirac) -----------------------------------------------------


def test_conv_init_dirac_starts_each_convbn_copying_its_inputs_and_leaves_the_rest_to_the_seed():
    layers = (
        {"id": "c1", "type": "convbn", "out_channels": 8},  # 3 inputs: 3 copying filters, 5 random
        {"id": "c2", "type": "convbn", "out_channels": 4},  # 8 inputs, 4 outputs: all 4 copy
        {"id": "gap", "type": "gap"},
    )
    spec = ArchSpec((3, 8, 8), 10, layers)
    cfg = TrainConfig(seed=3)
    torch.manual_seed(3)
    plain = new_state(spec, cfg, torch.device("cpu")).model
    torch.manual_seed(3)
    dirac = new_state(spec, dataclasses.replace(cfg, conv_init="dirac"), torch.device("cpu")).model
    identity = torch.zeros(3, 3, 3, 3)
    identity[range(3), range(3), 1, 1] = 1
    c1, c2 = (dirac.layers[lid].conv.weight for lid in ("c1", "c2"))
    assert torch.equal(c1[:3], identity)
    assert torch.equal(c1[3:], plain.layers["c1"].conv.weight[3:])  # the others: the seed's draw
    assert torch.equal(c2[:, :4, 1, 1], torch.eye(4)) and int(c2.count_nonzero()) == 4
    assert torch.equal(dirac.layers["head"].linear.weight, plain.layers["head"].linear.weight)
    with pytest.raises(ConfigError, match="--conv-init 'identity': use one of default, dirac"):
        TrainConfig(conv_init="identity").validate()

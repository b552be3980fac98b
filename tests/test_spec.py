"""Specs: JSON round trip, builder output shapes for random valid specs, clear rejections."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.builder import build_model, count_parameters
from models.spec import NAMED_SPECS, ArchSpec, SpecError, infer_shapes, resolve_spec


@st.composite
def valid_specs(draw) -> ArchSpec:
    """Random specs that are valid by construction: feature-map layers, then fc layers."""
    channels = draw(st.sampled_from([1, 3]))
    size = draw(st.sampled_from([8, 12, 16, 28]))
    layers, h, n = [], size, 0
    for _ in range(draw(st.integers(0, 5))):
        n += 1
        kind = draw(st.sampled_from(["conv", "pool", "batchnorm", "residual", "dropout", "sepconv"]))
        if kind in ("conv", "sepconv"):
            layers.append(
                {
                    "id": f"l{n}",
                    "type": kind,
                    "out_channels": draw(st.integers(1, 8)),
                    "kernel_size": draw(st.sampled_from([1, 3, 5])),
                }
            )
        elif kind == "pool" and h >= 2:
            layers.append({"id": f"l{n}", "type": "pool", "kind": draw(st.sampled_from(["max", "avg"]))})
            h //= 2
        elif kind in ("batchnorm", "residual", "dropout"):
            layers.append({"id": f"l{n}", "type": kind})
    for _ in range(draw(st.integers(0, 2))):
        n += 1
        kind = draw(st.sampled_from(["fc", "dropout", "batchnorm"]))
        layer = {"id": f"l{n}", "type": kind}
        if kind == "fc":
            layer["out_features"] = draw(st.integers(1, 16))
        layers.append(layer)
    return ArchSpec((channels, size, size), draw(st.integers(2, 10)), tuple(layers))


@settings(max_examples=40, deadline=None)
@given(valid_specs())
def test_spec_round_trips_through_json_and_builds_to_the_right_shape(spec):
    again = ArchSpec.from_dict(json.loads(spec.to_json()))
    assert again == spec
    model = build_model(spec).eval()
    out = model(torch.randn(3, *spec.input_shape))
    assert out.shape == (3, spec.num_classes)
    names = [name for name, _ in model.named_parameters()]
    assert all(
        name.startswith(("layers.head.", *(f"layers.{i}." for i in spec.layer_ids()))) for name in names
    )


@pytest.mark.parametrize("name", sorted(NAMED_SPECS))
def test_named_specs_build_for_fashion_mnist(name):
    spec = resolve_spec(name, (1, 28, 28), 10)
    assert build_model(spec)(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_minimal_is_one_conv_and_one_fc():
    kinds = [layer["type"] for layer in resolve_spec("minimal", (1, 28, 28), 10).layers]
    assert kinds.count("conv") == 1 and kinds.count("fc") == 1


def test_the_default_spec_builds_exactly_the_parameters_it_describes():
    """Names and shapes written out by hand from the spec (same-padding 3x3 convs, two 2x2
    pools: 28 -> 14 -> 7, so fc1 sees 64 x 7 x 7), so a builder that drifts from it fails."""
    model = build_model(ArchSpec.from_dict(json.loads(resolve_spec("default", (1, 28, 28), 10).to_json())))
    bn = {"weight": (64,), "bias": (64,), "running_mean": (64,), "running_var": (64,)}
    expected = {
        "layers.conv1.conv.weight": (32, 1, 3, 3),
        "layers.conv1.conv.bias": (32,),
        "layers.conv2.conv.weight": (64, 32, 3, 3),
        "layers.conv2.conv.bias": (64,),
        "layers.res1.conv1.weight": (64, 64, 3, 3),
        **{f"layers.res1.bn1.{k}": v for k, v in bn.items()},
        "layers.res1.conv2.weight": (64, 64, 3, 3),
        **{f"layers.res1.bn2.{k}": v for k, v in bn.items()},
        "layers.fc1.linear.weight": (128, 64 * 7 * 7),
        "layers.fc1.linear.bias": (128,),
        "layers.head.linear.weight": (10, 128),
        "layers.head.linear.bias": (10,),
    }
    got = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert got == expected
    trainable = sum(torch.Size(v).numel() for k, v in expected.items() if "running" not in k)
    assert count_parameters(model) == trainable


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (
            [{"id": "p1", "type": "pool", "size": 2}] * 1
            + [{"id": f"p{i}", "type": "pool"} for i in range(2, 7)],
            "would shrink the 1x1 map below 1x1",
        ),
        (
            [{"id": "f", "type": "fc", "out_features": 4}, {"id": "c", "type": "conv", "out_channels": 4}],
            "layer 'c': conv cannot follow a fully connected layer",
        ),
        ([{"id": "x", "type": "attention"}], "layer 'x': unknown layer type 'attention'"),
        ([{"id": "c", "type": "conv"}], "layer 'c': conv needs out_channels"),
        ([{"id": "c", "type": "conv", "out_channels": 0}], "out_channels must be a positive integer"),
        ([{"id": "c", "type": "conv", "out_channels": 4, "kernel_size": 2}], "kernel_size must be odd"),
        ([{"id": "d", "type": "dropout", "p": 1.5}], "dropout p must be in [0, 1)"),
        ([{"id": "c", "type": "batchnorm"}, {"id": "c", "type": "batchnorm"}], "layer id 'c' is used twice"),
        ([{"id": "head", "type": "batchnorm"}], "reserved for the classifier head"),
        ([{"id": "a.b", "type": "batchnorm"}], "letters, digits and underscores"),
        ([{"id": "p", "type": "pool", "kind": "median"}], "pool kind must be one of"),
        ([{"id": "c", "type": "conv", "out_channels": 4, "stride": 2}], "unknown field(s) stride"),
    ],
)
def test_invalid_specs_are_rejected_naming_layer_and_reason(layers, message):
    with pytest.raises(SpecError) as info:
        infer_shapes(ArchSpec((1, 28, 28), 10, tuple(layers)))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_resolve_spec_from_file_string_and_unknown_name(tmp_path):
    layers = [{"id": "c1", "type": "conv", "out_channels": 4}, {"id": "p1", "type": "pool"}]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"layers": layers}))
    assert resolve_spec(str(path), (1, 28, 28), 10).layer_ids() == ["c1", "p1"]
    assert resolve_spec(json.dumps(layers), (1, 28, 28), 10).layer_ids() == ["c1", "p1"]
    with pytest.raises(SpecError, match="known spec .*default.*minimal"):
        resolve_spec("resnet9000", (1, 28, 28), 10)
    with pytest.raises(SpecError, match="not valid JSON"):
        resolve_spec("{oops", (1, 28, 28), 10)
    with pytest.raises(SpecError, match="input_shape"):
        resolve_spec(json.dumps({"layers": layers, "input_shape": [3, 32, 32]}), (1, 28, 28), 10)

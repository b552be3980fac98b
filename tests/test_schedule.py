"""The growth schedule (models/schedule.py): its forms, the named schedules, and validation."""

from __future__ import annotations

import json

import pytest

from models.schedule import (
    NAMED_SCHEDULES,
    GrowthError,
    GrowthEvent,
    final_spec,
    parse_schedule,
    schedule_to_json,
    spec_at_epoch,
    validate_schedule,
)
from models.spec import infer_shapes, resolve_spec

FASHION = ((1, 28, 28), 10)
SMALL = resolve_spec(  # conv1(32) pool1 fc1(128); fc1 reads 32x4x4
    '[{"id": "conv1", "type": "conv", "out_channels": 32}, {"id": "pool1", "type": "pool"}, '
    '{"id": "fc1", "type": "fc", "out_features": 128}]',
    (1, 8, 8),
    10,
)


def minimal():
    return resolve_spec("minimal", *FASHION)


@pytest.mark.parametrize("epochs", [2, 3, 5, 10, 12, 30, 100])
def test_named_schedules_are_valid_and_default_grows_minimal_into_default(epochs):
    start = resolve_spec("minimal", *FASHION)
    # the 3x32x32 schedules grow their own starts (tests/test_resnet.py, test_resnet_short.py,
    # test_short_convs.py)
    names = [name for name in NAMED_SCHEDULES if not name.startswith(("resnet", "short-convs"))]
    grown = {name: validate_schedule(start, parse_schedule(name, epochs), epochs) for name in names}
    resnet_start = resolve_spec("resnet-start", (3, 32, 32), 10)
    resnet_final = validate_schedule(resnet_start, parse_schedule("resnet", epochs), epochs)
    assert resnet_final.layers == resolve_spec("resnet", (3, 32, 32), 10).layers
    narrow = resolve_spec("resnet-narrow", (3, 32, 32), 10)
    assert (
        validate_schedule(narrow, parse_schedule("resnet-widen", epochs), epochs).layers
        == resnet_final.layers
    )
    short_final = resolve_spec("resnet-short", (3, 32, 32), 10).layers
    for start_name, schedule, final in (
        ("resnet-short-start", "resnet-short", short_final),
        ("resnet-short-narrow", "resnet-short-widen", short_final),
        (
            "resnet-short-whiten-narrow",
            "resnet-short-whiten-widen",
            resolve_spec("resnet-short-whiten", (3, 32, 32), 10).layers,
        ),
        ("short-convs-narrow", "short-convs-widen", resolve_spec("short-convs", (3, 32, 32), 10).layers),
    ):
        short_start = resolve_spec(start_name, (3, 32, 32), 10)
        assert validate_schedule(short_start, parse_schedule(schedule, epochs), epochs).layers == final
    assert grown["default"].layers == resolve_spec("default", *FASHION).layers
    assert grown["early"].layers == grown["default"].layers == grown["late"].layers
    assert len({json.dumps(grown[name].layers) for name in ("default", "deep", "wide-fc")}) == 3
    assert grown["none"].layers == start.layers
    if epochs >= 10:  # spread over the first 60% / the first third
        assert max(e.epoch for e in parse_schedule("default", epochs)) <= 0.6 * epochs + 0.5
        assert max(e.epoch for e in parse_schedule("early", epochs)) <= epochs / 3 + 0.5


def test_compact_string_parses_with_ids_defaults_and_keywords():
    events = parse_schedule("3:conv(64)@after:pool1; 5:pool;7:residual ;9:dropout(0.3)")
    assert events == [
        GrowthEvent(3, {"type": "conv", "out_channels": 64}, "after:pool1"),
        GrowthEvent(5, {"type": "pool"}),
        GrowthEvent(7, {"type": "residual"}),
        GrowthEvent(9, {"type": "dropout", "p": 0.3}),
    ]
    spec = final_spec(SMALL, events)
    assert spec.layer_ids() == ["conv1", "pool1", "conv2", "pool2", "res1", "fc1", "drop1"]
    assert parse_schedule("2:wide=conv(16,kernel_size=5)@head;4:pool(avg, size=1)") == [
        GrowthEvent(2, {"type": "conv", "out_channels": 16, "kernel_size": 5}, "head", "wide"),
        GrowthEvent(4, {"type": "pool", "kind": "avg", "size": 1}),
    ]


def test_schedules_round_trip_through_json_and_compact_form(tmp_path):
    events = parse_schedule("deep", 20) + parse_schedule("4:fc(10)@before:fc1;6:bn=batchnorm")
    assert parse_schedule(schedule_to_json(events)) == events
    assert parse_schedule(";".join(e.to_compact() for e in events)) == events
    path = tmp_path / "schedule.json"
    path.write_text(schedule_to_json(events))
    assert parse_schedule(str(path)) == events
    assert len(set(events)) == len(events)  # hashable despite the layer dict


def test_spec_at_epoch_applies_events_up_to_and_including_that_epoch():
    start = minimal()
    events = parse_schedule("2:conv2=conv(64)@after:pool1;5:res1=residual@after:pool2;5:dropout", 10)
    assert spec_at_epoch(start, events, 1).layers == start.layers
    assert spec_at_epoch(start, events, 2).layer_ids() == ["conv1", "pool1", "conv2", "pool2", "fc1"]
    assert spec_at_epoch(start, events, 4).layer_ids() == ["conv1", "pool1", "conv2", "pool2", "fc1"]
    assert spec_at_epoch(start, events, 9).layers == final_spec(start, events).layers


def test_default_schedule_grows_everything_at_once_a_quarter_of_the_way_in():
    assert [e.epoch for e in parse_schedule("default", 12)] == [3, 3, 3]
    assert [e.epoch for e in parse_schedule("default", 10)] == [3, 3, 3]  # floor(2.5 + 0.5)
    assert [e.epoch for e in parse_schedule("default", 2)] == [1, 1, 1]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("12:dropout", "growth epoch 12 is past --epochs 10"),
        ("10:dropout", "growth epoch 10 is past --epochs 10"),
        ("0:dropout", "growth epoch 0 of 0:dropout must be >= 1"),
        ("5:dropout;3:residual", "growth events out of order: 3:residual comes after an event at epoch 5"),
        ("3:pool;4:pool;5:pool;6:pool;7:pool", "pool of size 2 would shrink the 1x1 map below 1x1"),
        ("3:conv(8)@after:fc1", "conv cannot follow a fully connected layer"),
        (
            "3:residual@after:pool9",
            "position 'after:pool9' names no layer (layers: conv1, pool1, pool2, fc1, head)",
        ),
        ("3:residual@beside:pool1", "position 'beside:pool1' must be after:<id>, before:<id> or head"),
        ("3:dropout@after:head", "position 'after:head' must be after:<id>, before:<id> or head"),
        ("3:conv1=conv(8)", "layer id 'conv1' is already in use"),
        ("3:a=dropout;4:a=dropout", "layer id 'a' is already in use"),
    ],
)
def test_validate_schedule_names_the_problem_in_one_line(schedule, message):
    with pytest.raises(GrowthError) as err:
        validate_schedule(minimal(), parse_schedule(schedule), epochs=10)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_types_fields_and_names_fail_with_what_is_known():
    with pytest.raises(GrowthError, match=r"unknown layer type 'lstm' \(known: conv, pool"):
        validate_schedule(minimal(), [GrowthEvent(2, {"type": "lstm"})], epochs=10)
    with pytest.raises(GrowthError, match="unknown layer type 'lstm'"):
        parse_schedule("2:lstm(4)")
    with pytest.raises(GrowthError, match="unknown field"):
        parse_schedule('[{"epoch": 2, "type": "conv", "out_channels": 8, "stride": 2}]')
    with pytest.raises(GrowthError, match="conv needs out_channels"):
        parse_schedule("2:conv")
    with pytest.raises(GrowthError, match="at most 1 positional"):
        parse_schedule("2:dropout(0.1,0.2)")
    with pytest.raises(GrowthError, match=r"unknown schedule 'defualt' \(known: default, early, late, deep"):
        parse_schedule("defualt", 10)
    with pytest.raises(GrowthError, match="depends on the number of epochs"):
        parse_schedule("default")
    with pytest.raises(GrowthError, match="needs --epochs >= 2"):
        parse_schedule("default", 1)
    assert parse_schedule("") == parse_schedule("none", 5) == []


def test_a_sepconv_event_joins_the_feature_maps_with_a_generated_id_and_a_conv_shape():
    spec = final_spec(SMALL, parse_schedule("1:sepconv(24,5)"))
    assert spec.layer_ids() == ["conv1", "pool1", "sep1", "fc1"]
    assert infer_shapes(spec)[3] == (24, 4, 4)  # fc1 reads sep1's 24 channels at pool1's 4x4

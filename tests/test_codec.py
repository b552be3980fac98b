"""The codec between config dataclasses and text: every config survives parameters and the
command line unchanged, and reads back what MLflow logged."""

from __future__ import annotations

import dataclasses

import click
import mlflow
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.cli import SEED_MAX, build_config, config_options
from pipeline.codec import (
    default_params,
    entry_configs,
    flat_params,
    from_params,
    non_default_params,
    param_text,
    same_param,
    to_argv,
)
from pipeline.data.config import DataConfig
from pipeline.training.config import TrainConfig
from tests.conftest import REPO

ENTRY_POINTS = tuple(yaml.safe_load((REPO / "MLproject").read_text())["entry_points"])
CONFIG_CLASSES = tuple(dict.fromkeys(cls for e in ENTRY_POINTS for cls in entry_configs(e)))

# Text as an option or parameter may hold it; a value wrapped in single quotes is taken for
# `mlflow run`'s shell-quoting and unwrapped, so it is left out.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")).filter(
    lambda s: not (len(s) >= 2 and s[0] == s[-1] == "'")
)
BY_TYPE = {
    bool: st.booleans(),
    int: st.integers(-(2**63), 2**63),
    float: st.floats(allow_nan=False),
    str: TEXT,
}


def _values(f: dataclasses.Field):
    """Any value of the field's type; a seed within the range its option takes."""
    if f.name == "seed" or f.name.endswith("_seed"):
        return st.integers(-1 if f.default == -1 else 0, SEED_MAX)
    return BY_TYPE[type(f.default)]


def configs_of(classes: tuple[type, ...]):
    """Instances of ``classes`` with any value of each field's type."""

    def one(cls):
        fields = {f.name: _values(f) for f in dataclasses.fields(cls)}
        return st.fixed_dictionaries(fields).map(lambda values: cls(**values))

    return st.tuples(*(one(cls) for cls in classes))


def test_every_entry_point_has_configs():
    assert len(ENTRY_POINTS) == 7 and all(entry_configs(e) for e in ENTRY_POINTS)
    assert DataConfig in CONFIG_CLASSES and TrainConfig in CONFIG_CLASSES


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_params_read_back_the_config_they_came_from(cls, data):
    (cfg,) = data.draw(configs_of((cls,)))
    params = flat_params(cfg)
    assert all(isinstance(v, str) for v in params.values())
    assert from_params(cls, params) == cfg


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_argv_parses_back_to_the_same_configs(entry_point, data):
    classes = entry_configs(entry_point)
    configs = data.draw(configs_of(classes))
    parsed = []

    @click.command()
    @config_options(*classes)
    def command(**values):
        parsed.extend(build_config(cls, values) for cls in classes)

    command.main(to_argv(*configs), standalone_mode=False)
    assert tuple(parsed) == configs


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_default_params_are_what_mlproject_passes(entry_point):
    declared = yaml.safe_load((REPO / "MLproject").read_text())["entry_points"][entry_point]["parameters"]
    assert default_params(entry_point) == {k: str(v["default"]) for k, v in declared.items()}


def test_a_run_logged_through_mlflow_run_reads_back():
    # `mlflow run` types integers as floats and shell-quotes an empty string.
    params = {"dataset": "mnist", "data_dir": "''", "val_size": "5000.0", "label_noise": "0.2", "x": "y"}
    cfg = from_params(DataConfig, params)
    assert cfg == DataConfig(dataset="mnist", data_dir="", val_size=5000, label_noise=0.2)
    assert from_params(TrainConfig, {"deterministic": "True", "compile": "false"}).deterministic is True


def test_a_parameter_of_the_wrong_type_is_named():
    with pytest.raises(ValueError, match="val_size '5000.5'"):
        from_params(DataConfig, {"val_size": "5000.5"})
    with pytest.raises(ValueError, match="deterministic 'maybe'"):
        from_params(TrainConfig, {"deterministic": "maybe"})


def test_non_default_params_are_the_changed_fields_only():
    train = dataclasses.replace(TrainConfig(), lr=0.2, deterministic=not TrainConfig().deterministic)
    assert non_default_params(DataConfig(), train) == {
        "lr": "0.2",
        "deterministic": str(train.deterministic).lower(),
    }


def test_argv_spells_options_as_the_cli_does():
    argv = to_argv(DataConfig(subset=300), dataclasses.replace(TrainConfig(), deterministic=True))
    assert argv[argv.index("--subset") + 1] == "300"
    assert argv[argv.index("--deterministic") + 1] == "true"
    assert argv[argv.index("--data-dir") + 1] == ""


def test_evaluate_reads_a_training_run_s_data_back(tracking):
    from pipeline.evaluate import data_config_of
    from pipeline.tracking.errors import UpstreamError

    with mlflow.start_run() as run:  # as `mlflow run` logged it, before label noise existed
        mlflow.log_params({"dataset": "mnist", "data_dir": "''", "val_size": "500.0", "split_seed": "1"})
    with pytest.raises(UpstreamError, match="lacks the data parameter 'subset'"):
        data_config_of(mlflow.get_run(run.info.run_id))
    with mlflow.start_run(run_id=run.info.run_id):
        mlflow.log_param("subset", "300")
    cfg = data_config_of(mlflow.get_run(run.info.run_id))
    assert cfg == DataConfig(dataset="mnist", val_size=500, split_seed=1, subset=300)


@settings(max_examples=60, deadline=None)
@example(value=" padded ")
@given(value=st.one_of(st.booleans(), st.integers(-(2**52), 2**52), st.floats(allow_nan=False), TEXT))
def test_a_value_is_the_same_parameter_however_mlflow_spelled_it(value):
    text = param_text(value)
    assert same_param(text, f"'{text}'")  # `mlflow run` quoting
    if isinstance(value, int) and not isinstance(value, bool):
        assert same_param(text, str(float(value)))  # `mlflow run` types integers as floats
    if isinstance(value, bool):
        assert same_param(text, str(value)) and not same_param(text, str(not value).lower())


def test_different_values_are_different_parameters():
    assert not same_param("12", "12.5") and not same_param("", "0") and not same_param("tiers", "Tiers")

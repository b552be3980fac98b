"""What a user sees in the MLflow UI: readable, unique run names, a model-training experiment
of its own, and parameters as plain values (long ones a digest, their text one click away)."""

from __future__ import annotations

import mlflow
import pytest

from pipeline.codec import flat_params
from pipeline.curriculum.diet import curriculum_label
from pipeline.tracking.params import LONG_PARAM, shown_param
from pipeline.tracking.runs import DEFAULT_EXPERIMENT, EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, tracked_run


def _open(name: str, params: dict | None = None, **kwargs) -> mlflow.entities.Run:
    with tracked_run("train_static", params or {}, run_name=name, **kwargs) as run:
        pass
    return mlflow.get_run(run.info.run_id)


def test_a_taken_name_gets_the_next_free_suffix(tracking):
    names = [_open("static-s0").info.run_name for _ in range(3)] + [_open("static-s1").info.run_name]
    assert names == ["static-s0", "static-s0-2", "static-s0-3", "static-s1"]


def test_runs_go_to_a_model_training_experiment_named_growing_cnn_by_default(tracking, monkeypatch):
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID")
    run = _open("static-s0")
    experiment = mlflow.get_experiment(run.info.experiment_id)
    assert experiment.name == DEFAULT_EXPERIMENT
    # MLflow 3 opens an experiment without this tag in its GenAI ("Traces") view.
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    other = _open("static-s0", experiment_name="elsewhere")
    assert mlflow.get_experiment(other.info.experiment_id).name == "elsewhere"
    assert other.info.run_name == "static-s0"  # unique within its experiment


def test_params_are_plain_values_and_long_ones_a_digest_with_the_text_as_an_artifact(tracking):
    spec = '{"name": "x", "layers": [' + ", ".join(['{"type": "conv", "out": 32}'] * 8) + "]}"
    params = flat_params({"data_dir": "", "seeds": [0, 1, 2], "deterministic": False, "spec": spec})
    assert params["seeds"] == "0,1,2" and params["deterministic"] == "false"
    run = _open("static-s0", params)
    logged = run.data.params
    assert logged["data_dir"] == "" and logged["seeds"] == "0,1,2"
    assert len(spec) > LONG_PARAM and logged["spec"] == shown_param("spec", spec)
    assert logged["spec"].startswith("sha256:") and logged["spec"].endswith("params/spec.txt")
    assert mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/params/spec.txt") == spec


@pytest.mark.parametrize(
    ("pacing", "order", "prune", "label"),
    [
        ("none", "curriculum", 0.0, ""),
        ("none", "curriculum", 0.3, "+prune0.3"),
        ("tiers", "curriculum", 0.3, "+tiers+prune0.3"),
        ("tiers", "random", 0.0, "+tiers-random"),
    ],
)
def test_a_variant_name_says_its_curriculum_order_and_pruning(pacing, order, prune, label):
    assert curriculum_label(pacing, order, prune) == label
    assert f"dynamic-default{label}-s2".count("-s2") == 1


@pytest.mark.parametrize("module", ["main", "evaluate", "tune", "train_static", "train_dynamic"])
def test_help_keeps_each_usage_example_on_its_own_line(module):
    import importlib

    from click.testing import CliRunner

    command = importlib.import_module(f"pipeline.{module}").main
    shown = CliRunner().invoke(command, ["--help"], terminal_width=100).output
    examples = [
        line.strip() for line in shown.splitlines() if line.strip().startswith(("mlflow run", "python -m"))
    ]
    assert len(examples) >= 2, shown
    for line in examples:  # one command per line, never two run together
        assert line.count("mlflow run") + line.count("python -m") == 1, line


def test_a_run_name_leaves_out_the_pruning_that_goes_with_its_pacing():
    from pipeline.curriculum.diet import name_label
    from pipeline.run.session import default_run_name

    tiers = {"seed": "2", "pacing": "tiers", "prune": "0.3"}
    assert default_run_name("dynamic-default+tiers+prune0.3", tiers) == "dynamic-default+tiers-s2"
    assert default_run_name("static+prune0.3", {"seed": "0", "pacing": "none", "prune": "0.3"}) == (
        "static+prune0.3-s0"  # pruning without a curriculum is not the default: it stays
    )
    identity = {**tiers, "growth_init": "preserve"}  # not the default start: the name says so
    assert default_run_name("dynamic-default+tiers+prune0.3", identity) == (
        "dynamic-default+tiers+preserve-init-s2"
    )
    assert default_run_name("dynamic-default+tiers+prune0.3", {**tiers, "growth_init": "random"}) == (
        "dynamic-default+tiers-s2"
    )
    assert name_label("tiers", "random", 0.3) == "+tiers-random" and name_label(
        "tiers", "curriculum", 0.5
    ) == ("+tiers+prune0.5")

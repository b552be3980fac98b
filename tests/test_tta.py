"""Test-time augmentation (``--tta flip``): the logits of each image and its mirror averaged, in
validation, in evaluate and in the served model alike; refused with exits and as a bad name."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import mlflow
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from models.builder import build_model
from models.io import load_model
from models.spec import resolve_spec
from models.tta import FlipAveraged, FlipShiftAveraged, with_tta
from pipeline import evaluate, score_difficulty, train_static
from pipeline.cli import ConfigError
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.exits import ExitError, refuse_tta_with_exits, with_exits
from pipeline.run.logged_model import MODEL_ID_TAG, raw_images
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import evaluate_split
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import REPO, fresh_state, subprocess_env


def _network(data) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(resolve_spec("tiny", data.input_shape, data.num_classes)).eval()


def test_flip_averages_the_logits_of_each_image_and_its_mirror(small_data):
    net, x = _network(small_data), small_data.val.x[:64]
    with torch.no_grad():
        expected = (net(x) + net(torch.flip(x, dims=[3]))) / 2
        got = with_tta(net, "flip")(x)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, net(x).detach())  # the mirror changes the answer
    assert with_tta(net, "none") is net
    with pytest.raises(ValueError, match="unknown test-time augmentation 'mirror'"):
        with_tta(net, "mirror")


class _Counted(torch.nn.Module):
    """A network that counts its calls."""

    def __init__(self, net):
        super().__init__()
        self.net, self.calls = net, 0

    def forward(self, x):
        self.calls += 1
        return self.net(x)


def test_flip_shift_weighs_airbenchs_six_views_in_one_pass(small_data):
    net, x = _network(small_data), small_data.val.x[:16]
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
    down_right, up_left = padded[:, :, :28, :28], padded[:, :, 2:, 2:]
    assert torch.equal(down_right[:, :, 1:, 1:], x[:, :, :-1, :-1])  # the content moved by one pixel
    with torch.no_grad():
        mirrored = [net(v) + net(v.flip(-1)) for v in (x, down_right, up_left)]
        expected = mirrored[0] / 4 + (mirrored[1] + mirrored[2]) / 8
        counted = _Counted(net)
        got = with_tta(counted, "flip+shift")(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert counted.calls == 1  # one pass over all six views, as CUDA graphs need
    assert not torch.allclose(got, FlipAveraged(net)(x))


def test_a_mirror_symmetric_image_reads_the_same_either_way(small_data):
    net = _network(small_data)
    x = small_data.val.x[:32]
    symmetric = (x + x.flip(-1)) / 2  # each image its own mirror
    with torch.no_grad():
        torch.testing.assert_close(FlipAveraged(net)(symmetric), net(symmetric), rtol=1e-5, atol=1e-5)


def test_validation_reads_the_network_as_tta_says(small_data):
    """A run trained with --tta flip validates on the averaged logits: its last val/acc is the
    flip-averaged accuracy of its final weights, not the plain one."""
    # fp32, as evaluate_split reads it: `auto` is bf16 on a CPU with AMX, and validation follows it
    cfg = TrainConfig(
        epochs=2, batch_size=100, deterministic=True, seed=3, tta="flip", monitor_share=0, precision="fp32"
    )
    state = fit(fresh_state(small_data, cfg), small_data, cfg, TrainingPlan())
    model = state.model.eval()
    flipped = evaluate_split(FlipAveraged(model), small_data.val)
    plain = evaluate_split(model, small_data.val)
    assert state.history[-1]["val/acc"] == pytest.approx(flipped.acc, abs=1e-6)
    assert state.history[-1]["val/loss"] == pytest.approx(flipped.loss, rel=1e-5)
    assert abs(flipped.loss - plain.loss) > 1e-3 and not torch.equal(flipped.predictions, plain.predictions)


def test_exits_and_tta_are_refused_together(small_data):
    spec = with_exits(resolve_spec("tiny", small_data.input_shape, small_data.num_classes), "stages", 4)
    assert spec.exits
    with pytest.raises(ExitError, match="--tta flip with --exits"):
        refuse_tta_with_exits(spec, "flip")
    refuse_tta_with_exits(spec, "none")


def test_a_tta_that_does_not_exist_is_refused():
    with pytest.raises(ConfigError, match="--tta 'mirror': use one of none, flip, flip\\+shift"):
        dataclasses.replace(TrainConfig(), tta="mirror").validate()


@pytest.mark.slow
def test_evaluate_and_the_served_model_read_the_run_as_it_trained(tracking, tmp_path):
    """train_static --tta flip, then evaluate: test/acc is the flip-averaged accuracy of the
    logged weights (tag test_tta flip), and the logged MLflow Model answers with the averaged
    logits' probabilities; scripts/tta_gain.py reads its validation split both ways."""
    runner = CliRunner()
    data_args = ["--subset", "300"]
    scoring = [*data_args, "--folds", "2", "--epochs", "1", "--scorers", "loss"]
    result = runner.invoke(score_difficulty.main, scoring)
    assert result.exit_code == 0, result.output[-2000:]
    args = [*data_args, "--spec", "tiny", "--epochs", "2", "--progress", "false", "--tta", "flip"]
    result = runner.invoke(train_static.main, args)
    assert result.exit_code == 0, result.output[-2000:]
    (run,) = mlflow.search_runs(filter_string="tags.entry_point = 'train_static'", output_format="list")
    assert run.data.params["tta"] == "flip"
    result = runner.invoke(evaluate.main, ["--runs", run.info.run_id])
    assert result.exit_code == 0, result.output[-2000:]
    evaluated = mlflow.get_run(run.info.run_id)
    assert evaluated.data.tags["test_tta"] == "flip"
    path = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="model/model.safetensors", dst_path=str(tmp_path)
    )
    model = load_model(path).eval()
    data = load_data(DataConfig(subset=300), include_test=True)
    expected = evaluate_split(FlipAveraged(model), data.test)
    assert evaluated.data.metrics["test/acc"] == pytest.approx(expected.acc, abs=1e-6)
    assert evaluated.data.metrics["test/loss"] == pytest.approx(expected.loss, rel=1e-5)
    served = mlflow.pyfunc.load_model(f"models:/{evaluated.data.tags[MODEL_ID_TAG]}")
    with torch.no_grad():
        probabilities = torch.softmax(FlipAveraged(model)(data.val.x[:32]), dim=1).numpy()
    np.testing.assert_allclose(served.predict(raw_images(data, data.val.x[:32])), probabilities, atol=1e-5)
    table = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tta_gain.py"), "--runs", run.info.run_id],
        env=subprocess_env(tracking),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    plain, flipped = evaluate_split(model, data.val).acc, evaluate_split(FlipAveraged(model), data.val).acc
    shifted = evaluate_split(FlipShiftAveraged(model), data.val).acc
    accs = f"| {100 * plain:.2f}% | {100 * flipped:.2f}% | {100 * shifted:.2f}% |"
    assert f"{accs} {100 * (flipped - plain):+.2f} | {100 * (shifted - plain):+.2f} |" in table

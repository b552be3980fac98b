"""Mixed precision: what auto means, what is refused, and that bf16 training is the run it says.

bf16 cases need a CPU with bf16 instructions (AVX512-BF16 or AMX), as the machines this
project's CI runs on have; elsewhere they are skipped, and the refusal test runs instead.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.spec import resolve_spec
from pipeline.cli import ConfigError
from pipeline.device import seed_everything
from pipeline.precision import PrecisionError, autocast, cpu_bf16_fast, cpu_bf16_native, resolve_precision
from pipeline.training.checkpoints import CheckpointError, load_checkpoint
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import evaluate_split
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import fresh_state, interrupted_then_resumed

CPU = torch.device("cpu")
BF16 = TrainConfig(epochs=3, batch_size=64, deterministic=True, seed=3, precision="bf16")
needs_bf16 = pytest.mark.skipif(not cpu_bf16_native(), reason="this CPU has no bf16 instructions")


def test_auto_on_cpu_is_bf16_only_where_it_is_faster():
    assert resolve_precision("auto", CPU) == ("bf16" if cpu_bf16_fast() else "fp32")
    assert resolve_precision("fp32", CPU) == "fp32"


def test_fp16_on_cpu_is_refused_naming_what_to_use():
    with pytest.raises(PrecisionError, match=r"fp16 runs only on CUDA.*use --precision bf16 or fp32"):
        resolve_precision("fp16", CPU)


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="--precision 'fp8'"):
        dataclasses.replace(TrainConfig(), precision="fp8").validate()


@pytest.mark.skipif(cpu_bf16_native(), reason="this CPU runs bf16 natively")
def test_bf16_without_bf16_instructions_is_refused():
    with pytest.raises(PrecisionError, match="use --precision fp32"):
        resolve_precision("bf16", CPU)


@needs_bf16
def test_bf16_computes_in_bf16_and_keeps_fp32_weights(small_data):
    state = fit(fresh_state(small_data, BF16), small_data, BF16, TrainingPlan())
    assert state.precision == "bf16"
    assert all(p.dtype == torch.float32 for p in state.model.parameters())
    for buffer in state.optimizer.state.values():
        assert buffer["momentum_buffer"].dtype == torch.float32
    with autocast("bf16", CPU):
        assert state.model(small_data.val.x[:8]).dtype == torch.bfloat16
    # The logged accuracy is the bf16 evaluation's, and close to the same weights at fp32.
    at_bf16 = evaluate_split(state.model, small_data.val, precision="bf16").acc
    at_fp32 = evaluate_split(state.model, small_data.val, precision="fp32").acc
    assert state.history[-1]["val/acc"] == at_bf16
    assert abs(at_bf16 - at_fp32) < 0.02
    assert at_bf16 > 0.5  # learns: well above chance (0.1)


@needs_bf16
def test_bf16_differs_from_fp32_so_the_option_reaches_the_step(small_data):
    fp32 = dataclasses.replace(BF16, precision="fp32", epochs=1)
    bf16 = dataclasses.replace(BF16, epochs=1)
    a = fit(fresh_state(small_data, fp32), small_data, fp32, TrainingPlan())
    b = fit(fresh_state(small_data, bf16), small_data, bf16, TrainingPlan())
    assert a.history[-1]["train/loss"] != b.history[-1]["train/loss"]


@needs_bf16
def test_bf16_resume_is_bit_identical_and_keeps_its_precision(small_data, tmp_path):
    whole = fit(fresh_state(small_data, BF16), small_data, BF16, TrainingPlan())
    # The resumed half runs with --precision auto (fp32 on this CPU): it must stay bf16.
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, BF16),
        small_data,
        BF16,
        TrainingPlan,
        tmp_path / "c.pt",
        crash_after=1,
        resume_cfg=dataclasses.replace(BF16, precision="auto"),
    )
    assert resumed.precision == "bf16"
    keys = ("train/loss", "val/loss", "val/acc")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@needs_bf16
def test_resume_with_another_explicit_precision_is_refused(small_data, tmp_path):
    from pipeline.training.checkpoints import save_checkpoint

    cfg = dataclasses.replace(BF16, epochs=1)
    state = fit(fresh_state(small_data, cfg), small_data, cfg, TrainingPlan())
    path = save_checkpoint(tmp_path / "c.pt", state, TrainingPlan(), cfg)
    with pytest.raises(CheckpointError, match="trained at bf16; resume with --precision bf16 or auto"):
        load_checkpoint(path, dataclasses.replace(cfg, precision="fp32"), TrainingPlan(), CPU)


def test_fp16s_gradient_scale_survives_the_checkpoint(small_data, tmp_path, monkeypatch):
    # fp16 trains only on CUDA; on this CPU the scaler is a CPU one and fp16 is let through.
    from pipeline.training import checkpoints

    monkeypatch.setattr(checkpoints, "resolve_precision", lambda precision, _device: precision)
    cfg = TrainConfig(epochs=1)
    state = fresh_state(small_data, cfg)
    state.precision, state.scaler = "fp16", torch.amp.GradScaler("cpu")
    found = {"scale": 256.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    state.scaler.load_state_dict({**found, "_growth_tracker": 37})  # as training leaves it
    path = checkpoints.save_checkpoint(tmp_path / "c.pt", state, TrainingPlan(), cfg)
    resumed = load_checkpoint(path, cfg, TrainingPlan(), CPU)
    assert resumed.precision == "fp16" and resumed.scaler.state_dict() == state.scaler.state_dict()
    assert torch.amp.GradScaler("cpu").get_scale() != 256.0  # what a resumed run had before
    assert checkpoints.restored_scaler({}, "fp16", CPU).get_scale() == torch.amp.GradScaler("cpu").get_scale()
    assert checkpoints.restored_scaler(dict(found), "fp32", CPU) is None


@needs_bf16
def test_growth_joins_in_fp32_and_its_probe_runs_at_the_runs_precision(small_data):
    from models.schedule import named_schedule
    from pipeline.run.plan import ExperimentPlan

    cfg = dataclasses.replace(BF16, epochs=4)
    seed_everything(cfg.seed, cfg.deterministic)
    start = resolve_spec("minimal", small_data.input_shape, small_data.num_classes)
    state = new_state(start, cfg, CPU)
    plan = ExperimentPlan(cfg, small_data, named_schedule("default", 4))
    state = fit(state, small_data, cfg, plan)
    assert state.trace.events and all(e["probe_precision"] == "bf16" for e in state.trace.events)
    assert all(p.dtype == torch.float32 for p in state.model.parameters())
    # Function-preserving growth still preserves the function: the probe's loss does not jump.
    assert any(event["preserved"] for event in state.trace.events)
    for event in state.trace.events:
        if event["preserved"]:
            assert abs(event["probe_loss_after"] - event["probe_loss_before"]) < 0.05


@needs_bf16
def test_evaluate_infers_at_the_precision_it_is_given(small_data):
    """evaluate's test pass runs under its --precision: bf16 logits differ from fp32 ones, and
    the accuracies computed from each match a by-hand pass at that precision."""
    from pipeline.evaluation import compute_test_metrics

    state = fit(
        fresh_state(small_data, BF16), small_data, dataclasses.replace(BF16, epochs=1), TrainingPlan()
    )
    model, split = state.model.eval(), small_data.val
    classes = [str(c) for c in range(small_data.num_classes)]
    for precision in ("fp32", "bf16"):
        metrics, _, _ = compute_test_metrics(model, split, None, classes, 256, precision)
        with torch.no_grad(), autocast(precision, CPU):
            expected = (model(split.x).argmax(1) == split.y).float().mean()
        assert metrics["test/acc"] == pytest.approx(float(expected), abs=1 / len(split))
    with torch.no_grad():
        fp32_logits = model(split.x[:64])
        with autocast("bf16", CPU):
            bf16_logits = model(split.x[:64])
    assert bf16_logits.dtype == torch.bfloat16 and not torch.equal(fp32_logits, bf16_logits.float())

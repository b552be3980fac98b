"""The CUDA path (issue 34, item 5): a short train_static, a train_dynamic that grows at bf16 and
evaluate, on the GPU, when one is present; skipped otherwise. Run them with `-m cuda`."""

from __future__ import annotations

import mlflow
import pytest
import torch
from click.testing import CliRunner

from pipeline import evaluate, train_dynamic, train_static

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

DATA = ["--subset", "1000", "--val-size", "200", "--scores-run", "none", "--progress", "false"]


def _ok(command, args: list[str]) -> str:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output[-3000:]
    return mlflow.last_active_run().info.run_id


def test_static_dynamic_and_evaluate_run_on_the_gpu(tracking):
    static = _ok(train_static.main, [*DATA, "--spec", "tiny", "--epochs", "2", "--device", "cuda"])
    dynamic = _ok(
        train_dynamic.main,
        [
            *DATA,
            "--epochs",
            "4",
            "--device",
            "cuda",
            "--precision",
            "bf16",
            "--pacing",
            "none",
            "--prune",
            "0",
        ],
    )
    for run_id, precision in ((static, None), (dynamic, "bf16")):
        run = mlflow.get_run(run_id)
        assert run.data.tags["device"].startswith("cuda")
        assert run.data.tags["health"] in ("ok", "dipped")
        if precision:
            assert run.data.tags["precision_resolved"] == precision
    trace = mlflow.artifacts.load_dict(f"runs:/{dynamic}/architecture_trace.json")
    assert trace["events"], "the dynamic run grew on the GPU"
    _ok(evaluate.main, ["--runs", f"{static},{dynamic}", "--device", "cuda"])
    for run_id in (static, dynamic):
        assert 0.1 < mlflow.get_run(run_id).data.metrics["test/acc"] <= 1.0


def test_a_seconds_budget_on_the_gpu_is_never_overrun(tracking):
    """The host's clock runs ahead of CUDA's queue: near the end of the budget a step is allowed
    by the device's clock (``CUDA_EXACT_SHARE``)."""
    for seed in (1, 2):
        args = [*DATA, "--device", "cuda", "--pacing", "none", "--prune", "0", "--seed", str(seed)]
        run_id = _ok(train_dynamic.main, [*args, "--budget", "4s"])
        used = mlflow.get_run(run_id).data.metrics["budget/used_fraction"]
        assert 0.9 <= used <= 1.0, used


def test_a_growing_run_compiles_with_cuda_graphs(tracking):
    args = [*DATA, "--device", "cuda", "--pacing", "none", "--prune", "0", "--epochs", "4"]
    run_id = _ok(train_dynamic.main, [*args, "--compile", "true", "--compile-mode", "reduce-overhead"])
    run = mlflow.get_run(run_id)
    assert run.data.tags["health"] in ("ok", "dipped")
    assert mlflow.artifacts.load_dict(f"runs:/{run_id}/architecture_trace.json")["events"]


def test_flip_tta_reads_a_network_compiled_with_cuda_graphs(tracking):
    """Validation reads the compiled network once per batch for both halves (models/tta.py): a
    second call would overwrite the first call's CUDA-graph output before the two are averaged."""
    args = [*DATA, "--device", "cuda", "--spec", "tiny", "--epochs", "2", "--tta", "flip"]
    run_id = _ok(train_static.main, [*args, "--compile", "true", "--compile-mode", "reduce-overhead"])
    run = mlflow.get_run(run_id)
    assert run.data.params["tta"] == "flip" and run.data.metrics["val/acc"] > 0.5


def test_a_whitening_stem_fits_and_trains_on_the_gpu(tracking):
    """The fit runs on the CPU in float64 whatever the device (MPS has none), and the fitted
    filters then train in bf16 under CUDA graphs."""
    from models.layers.whiten import WhitenLayer

    images = torch.randn(300, 3, 32, 32)
    on_cpu, on_gpu = WhitenLayer(3, 2, 5e-4), WhitenLayer(3, 2, 5e-4).cuda()
    on_cpu.fit(images)
    on_gpu.fit(images.cuda())
    torch.testing.assert_close(on_gpu.weight.cpu(), on_cpu.weight)
    spec = (
        '{"layers": [{"id": "stem", "type": "whiten"}, {"id": "c1", "type": "convbn", "out_channels": 16}, '
    )
    spec += '{"id": "p1", "type": "pool"}, {"id": "gap", "type": "gap"}]}'
    args = [*DATA, "--device", "cuda", "--spec", spec, "--epochs", "2", "--precision", "bf16"]
    run_id = _ok(train_static.main, [*args, "--compile", "true", "--compile-mode", "reduce-overhead"])
    assert mlflow.get_run(run_id).data.metrics["val/acc"] > 0.5

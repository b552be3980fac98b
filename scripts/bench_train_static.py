"""Benchmark: train_static's throughput against a bare PyTorch loop, and achieved FLOP/s.

    .venv/bin/python scripts/bench_train_static.py --repeats 3

Runs, alternating so that machine noise hits both alike, R trials of (a) a bare loop (model,
SGD, batches by index, nothing else) and (b) the pipeline's ``train_static.run`` with everything
on (MLflow logging into a temporary store, validation, checkpoints, FLOP counting, progress
bar), each for the same epochs on the same model, data and batch size. Prints medians and the
pipeline/bare throughput ratio, and the training step's FLOP/s against this machine's fp32
matrix-multiply peak measured with a large ``torch.mm`` in the same process.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import mlflow
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.builder import build_model
from models.flops import flops_per_example
from models.spec import resolve_spec
from pipeline.data import DataConfig, load_data
from pipeline.loop import seed_everything
from pipeline.session import RunConfig
from pipeline.train_static import StaticConfig, run
from pipeline.training import TrainConfig


def bare_loop(data, spec, cfg: TrainConfig) -> float:
    """Training samples per second of the plainest loop over the same tensors."""
    seed_everything(cfg.seed, False)
    model = build_model(spec)
    opt = torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, nesterov=True
    )
    x, y = data.train.x, data.train.y
    start = time.perf_counter()
    for _ in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(y))
        for b in range(0, len(order), cfg.batch_size):
            idx = order[b : b + cfg.batch_size]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return cfg.epochs * len(y) / (time.perf_counter() - start)


def pipeline_run(data_cfg: DataConfig, cfg: TrainConfig, tmp: Path) -> float:
    """Training samples per second of train_static, counting all of its epoch wall-clock."""
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")
    mlflow.set_experiment("bench")
    outcome = run(data_cfg, cfg, StaticConfig(spec="default"), run_cfg=RunConfig(progress=True))
    examples = sum(h["train/examples"] for h in outcome.state.history)
    return examples / outcome.state.cumulative_s


def matmul_peak(n: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times)


@click.command()
@click.option("--repeats", default=3, show_default=True, help="alternating trials of each")
@click.option("--epochs", default=1, show_default=True, help="epochs per trial")
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--output", default="reports/bench_train_static.json", show_default=True)
def main(repeats: int, epochs: int, subset: int, output: str) -> None:
    data_cfg = DataConfig(subset=subset)
    data = load_data(data_cfg)
    spec = resolve_spec("default", data.input_shape, data.num_classes)
    cfg = TrainConfig(epochs=epochs)
    bare, piped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.pop("MLFLOW_RUN_ID", None)
        for r in range(repeats):
            bare.append(bare_loop(data, spec, cfg))
            piped.append(pipeline_run(data_cfg, cfg, Path(tmp)))
            print(f"trial {r + 1}: bare {bare[-1]:.0f}/s, pipeline {piped[-1]:.0f}/s", flush=True)
    train_flops = flops_per_example(build_model(spec), data.input_shape)["train"]
    peak = matmul_peak()
    ratios = [p / b for p, b in zip(piped, bare)]
    result = {
        "threads": torch.get_num_threads(),
        "train_examples": len(data.train),
        "epochs_per_trial": epochs,
        "bare_samples_per_s_median": statistics.median(bare),
        "pipeline_samples_per_s_median": statistics.median(piped),
        "ratio_per_trial": ratios,
        "ratio_median": statistics.median(ratios),
        "train_flops_per_example": train_flops,
        "achieved_gflops_bare": train_flops * statistics.median(bare) / 1e9,
        "achieved_gflops_pipeline": train_flops * statistics.median(piped) / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "fraction_of_peak_pipeline": train_flops * statistics.median(piped) / peak,
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

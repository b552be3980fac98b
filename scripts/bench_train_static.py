"""Benchmark: training throughput per precision, train_static against a bare loop, and FLOP/s.

    .venv/bin/python scripts/bench_train_static.py --repeats 3

For each architecture (``--specs``, default: the final ``default`` network and the ``minimal``
one every growing run starts from) and each precision (``--precisions``, default fp32 and
bf16), runs R trials, alternating every arm within a trial so that machine noise hits all alike:

- ``bare``: the plainest loop over the same in-memory tensors (model, SGD, batches by index),
  in the same memory format as the pipeline (channels_last) and under the same autocast, on
  ``--device`` (the CPU by default; on CUDA every clock read waits for the device);
- ``pipeline``: ``train_static.run`` with everything on (MLflow logging into a temporary store,
  validation, checkpoints, FLOP counting), for the same epochs, model, data and batch size;
- with ``--compile``, also ``compiled``: the pipeline with ``--compile true``, whose first
  epoch carries the compilation; its steady-state epoch time is reported apart.

Prints and writes (``--output``) medians, the pipeline/bare ratio per precision, the speed-up of
each precision over fp32 (measured side by side), and the achieved training FLOP/s against this
machine's ``torch.mm`` peak in the same dtype, measured in the same process.
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
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.device import memory_format_for, pick_device, seed_everything, synchronize
from pipeline.precision import DTYPES, autocast, resolve_precision
from pipeline.run.session import RunConfig
from pipeline.train_static import StaticConfig, run
from pipeline.training.config import TrainConfig


def bare_loop(data, spec, cfg: TrainConfig, precision: str, device: torch.device) -> float:
    """Training samples per second of the plainest loop over the same tensors and layout."""
    seed_everything(cfg.seed, False)
    layout = memory_format_for(device)
    model = build_model(spec).to(device=device, memory_format=layout)
    opt = torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, nesterov=True
    )
    x, y = data.train.x.to(device).contiguous(memory_format=layout), data.train.y.to(device)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(y)).to(device)
        for b in range(0, len(order), cfg.batch_size):
            idx = order[b : b + cfg.batch_size]
            with autocast(precision, device):
                loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    synchronize(device)
    return cfg.epochs * len(y) / (time.perf_counter() - start)


def pipeline_run(data_cfg: DataConfig, cfg: TrainConfig, spec: str, tmp: Path) -> tuple[float, list[float]]:
    """train_static's training samples per second over all its epoch wall-clock, and each
    epoch's seconds."""
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")
    mlflow.set_experiment("bench")
    outcome = run(data_cfg, cfg, StaticConfig(spec=spec), run_cfg=RunConfig(progress=False))
    examples = sum(h["train/examples"] for h in outcome.state.history)
    return examples / outcome.state.cumulative_s, [h["time/epoch_s"] for h in outcome.state.history]


def matmul_peak(dtype: torch.dtype, device: torch.device, n: int = 2048, repeats: int = 10) -> float:
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times)


@click.command()
@click.option("--repeats", default=3, show_default=True, help="alternating trials of each arm")
@click.option("--epochs", default=1, show_default=True, help="epochs per trial")
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--specs", default="default,minimal", show_default=True)
@click.option("--precisions", default="fp32,bf16", show_default=True)
@click.option("--compile", "with_compile", is_flag=True, help="add the --compile true pipeline arm")
@click.option("--compile-mode", default="default", show_default=True, help="reduce-overhead: CUDA graphs")
@click.option("--device", "device_name", default="cpu", show_default=True, help="cpu, cuda, auto...")
@click.option("--output", default="reports/bench_train_static.json", show_default=True)
def main(
    repeats: int,
    epochs: int,
    subset: int,
    specs: str,
    precisions: str,
    with_compile: bool,
    compile_mode: str,
    device_name: str,
    output: str,
) -> None:
    data_cfg = DataConfig(subset=subset)
    data = load_data(data_cfg)
    device = pick_device(device_name)
    precs = [resolve_precision(p, device) for p in precisions.split(",")]
    arms = [(s, p, kind) for s in specs.split(",") for p in precs for kind in ("bare", "pipeline")]
    if with_compile:
        arms += [(s, p, "compiled") for s in specs.split(",") for p in precs]
    samples: dict[tuple, list[float]] = {arm: [] for arm in arms}
    epoch_s: dict[tuple, list[list[float]]] = {arm: [] for arm in arms}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.pop("MLFLOW_RUN_ID", None)
        for r in range(repeats):
            for arm in arms:
                name, precision, kind = arm
                compiled = kind == "compiled"
                cfg = TrainConfig(
                    epochs=epochs,
                    precision=precision,
                    device=str(device),
                    compile=compiled,
                    compile_mode=compile_mode if compiled else "default",
                )
                if kind == "bare":
                    spec = resolve_spec(name, data.input_shape, data.num_classes)
                    samples[arm].append(bare_loop(data, spec, cfg, precision, device))
                else:
                    rate, per_epoch = pipeline_run(data_cfg, cfg, name, Path(tmp))
                    samples[arm].append(rate)
                    epoch_s[arm].append(per_epoch)
                rate = samples[arm][-1]
                print(f"trial {r + 1} {name} {precision} {kind}: {rate:.0f} samples/s", flush=True)
            load.append(os.getloadavg()[0])
    peaks = {p: matmul_peak(DTYPES.get(p, torch.float32), device) for p in precs}
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "compile_mode": compile_mode if with_compile else None,
        "threads": torch.get_num_threads(),
        "load_average_1min": load,
        "train_examples": len(data.train),
        "epochs_per_trial": epochs,
        "matmul_peak_gflops": {p: v / 1e9 for p, v in peaks.items()},
        "arms": {},
    }
    for name in specs.split(","):
        spec = resolve_spec(name, data.input_shape, data.num_classes)
        train_flops = flops_per_example(build_model(spec), data.input_shape)["train"]
        per = {"train_flops_per_example": train_flops}
        for p in precs:
            bare, piped = samples[(name, p, "bare")], samples[(name, p, "pipeline")]
            ratios = [a / b for a, b in zip(piped, bare)]
            entry = {
                "bare_samples_per_s": bare,
                "pipeline_samples_per_s": piped,
                "bare_median": statistics.median(bare),
                "pipeline_median": statistics.median(piped),
                "pipeline_over_bare_median": statistics.median(ratios),
                "achieved_gflops_pipeline": train_flops * statistics.median(piped) / 1e9,
                "fraction_of_same_dtype_mm_peak": train_flops * statistics.median(piped) / peaks[p],
            }
            if p != "fp32" and (name, "fp32", "pipeline") in samples:
                fp32 = samples[(name, "fp32", "pipeline")]
                entry["speedup_over_fp32_median"] = statistics.median(a / b for a, b in zip(piped, fp32))
            if with_compile:
                compiled = epoch_s[(name, p, "compiled")]
                eager = epoch_s[(name, p, "pipeline")]
                entry["compiled_first_epoch_s"] = [e[0] for e in compiled]
                entry["eager_first_epoch_s"] = [e[0] for e in eager]
                if epochs > 1:
                    later = lambda runs: statistics.median(t for e in runs for t in e[1:])
                    entry["compiled_later_epoch_s_median"] = later(compiled)
                    entry["eager_later_epoch_s_median"] = later(eager)
            per[p] = entry
        result["arms"][name] = per
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

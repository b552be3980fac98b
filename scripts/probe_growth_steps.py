"""Probe: what the first training steps after a growth event do (issue 35).

    .venv/bin/python scripts/probe_growth_steps.py --dataset folder:cifar10-jpeg.tar.xz \\
        --lever base --seed 600 --precision bf16 --scores-run RUN --output steps.jsonl

Trains ``train_dynamic`` as ``bench_collapse.py`` does (a lever's options, one seed) and records,
at every optimizer step, the gradient's global norm and the share of fc units that are dead
(zero for every example of the batch), through global hooks, so the pipeline runs unchanged.
It stops ``--steps-after`` steps after the first growth event (the run is then FAILED: it is a
probe, not a result) and appends one JSON line: the median and 99th percentile of the norm over
the 300 steps before growth, the first ten norms after it, the largest, and the dead share just
before growth and at the end. The per-step gradient of each parameter tensor, for the first
steps after growth, names which layer takes the jolt. Validation only: choose nothing here
that you then report.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import click
import mlflow
import torch
import torch.optim.optimizer as optim_hooks
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.layers.fc import LinearLayer
from pipeline.data.config import DataConfig
from scripts.bench_collapse import one_run
from scripts.bench_levers import LEVERS

BEFORE = 300  # steps before growth that set the baseline
DETAILED = 5  # steps after growth whose per-tensor gradient norms are kept


class StepsDone(Exception):
    """Raised from the step hook once the probe has seen enough steps after growth."""


class Recorder:
    """Global hooks: fc dead share from forward passes, gradient norms before each step."""

    def __init__(self, steps_after: int):
        self.steps_after = steps_after
        self.steps: list[dict] = []
        self.dead = float("nan")
        self.grown_at: int | None = None

    def forward(self, module: nn.Module, inputs, output) -> None:
        if isinstance(module, LinearLayer) and module.relu and module.training:  # fc, not the head
            self.dead = float((output.detach() <= 0).all(dim=0).float().mean())

    def before_step(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        size = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
        if self.steps and self.grown_at is None and size != self.steps[-1]["params"]:
            self.grown_at = len(self.steps)
        step = {"norm": float(torch.stack([g.float().norm() for g in grads]).norm()), "params": size}
        step["dead"] = self.dead
        if self.grown_at is not None and len(self.steps) < self.grown_at + DETAILED:
            shapes = ["x".join(map(str, g.shape)) for g in grads]
            step["per_tensor"] = {s: round(float(g.float().norm()), 3) for s, g in zip(shapes, grads)}
        self.steps.append(step)
        if self.grown_at is not None and len(self.steps) >= self.grown_at + self.steps_after:
            raise StepsDone

    def summary(self) -> dict:
        if self.grown_at is None:
            return {"grown_at_step": None}
        g, steps = self.grown_at, self.steps
        before = [s["norm"] for s in steps[max(0, g - BEFORE) : g]]
        after = [s["norm"] for s in steps[g:]]
        return {
            "grown_at_step": g,
            "norm_before_median": statistics.median(before),
            "norm_before_p99": sorted(before)[int(0.99 * (len(before) - 1))],
            "norm_after_first10": [round(v, 2) for v in after[:10]],
            "norm_after_max": max(after),
            "fc_dead_before": steps[g - 1]["dead"],
            "fc_dead_after": steps[-1]["dead"],
            "per_tensor_after": [s.get("per_tensor", {}) for s in steps[g : g + DETAILED]],
        }


@click.command()
@click.option("--dataset", default="fashion-mnist", show_default=True, help="or folder:PATH")
@click.option("--seed", default=600, show_default=True)
@click.option("--precision", default="fp32", show_default=True, help="fp32, bf16 or fp16")
@click.option("--lever", default="base", show_default=True, help="options from bench_levers.py")
@click.option("--scores-run", default="auto", show_default=True, help="score_difficulty run for the diet")
@click.option("--steps-after", default=300, show_default=True, help="steps after growth to record")
@click.option("--output", default="reports/growth_steps.jsonl", show_default=True)
def main(dataset, seed, precision, lever, scores_run, steps_after, output) -> None:
    if lever not in LEVERS:
        raise click.UsageError(f"--lever {lever!r}: use one of {', '.join(LEVERS)}")
    recorder = Recorder(steps_after)
    forward_hook = nn.modules.module.register_module_forward_hook(recorder.forward)
    step_hook = optim_hooks.register_optimizer_step_pre_hook(recorder.before_step)
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("probe_growth_steps")
    try:
        one_run(DataConfig(dataset=dataset), lever, seed, precision, scores_run)
    except StepsDone:
        pass
    finally:
        forward_hook.remove()
        step_hook.remove()
    row = {"lever": lever, "dataset": dataset, "seed": seed, "precision": precision, **recorder.summary()}
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k != "per_tensor_after"}))


if __name__ == "__main__":
    main()

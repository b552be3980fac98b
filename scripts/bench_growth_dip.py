"""Benchmark: what a growth event costs the training that follows it, per lever (issue 35).

    .venv/bin/python scripts/bench_growth_dip.py --dataset folder:DIR --seeds 402,404 \\
        --levers base,clip1 --output reports/growth_dip/cifar.jsonl

Growth alone (no curriculum, no pruning): the minimal network grows by the default schedule of a
12-epoch run (every layer at epoch 3), and training stops ``--after`` epochs past the event,
which is where the dip shows (0.63 -> 0.10 at bf16 and 0.63 -> 0.33 at fp32 on CIFAR-10 before
any fix). The growth dip is validation accuracy at the end of the epoch after the event minus the
one before it; a collapse is the health verdict's (pipeline/training/health.py). No MLflow, no
test split: a screen reads validation only, so choose levers on seeds you will not report.
Each run appends one JSON line (lever, seed, precision, per-epoch val/acc, dip, verdict).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.schedule import parse_schedule
from models.spec import resolve_spec
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.device import seed_everything
from pipeline.run.plan import ExperimentPlan, GrowthConfig
from pipeline.training import health
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import DivergenceError
from pipeline.training.state import new_state
from scripts.bench_common import REFERENCE_EPOCHS

# name -> (TrainConfig options, GrowthConfig options, start spec)
LEVERS: dict[str, tuple[dict, dict, str]] = {
    "base": ({}, {}, "minimal"),
    "rewarm0.1": ({"growth_rewarm": 0.1}, {}, "minimal"),
    "clip1": ({"clip_grad": 1.0}, {}, "minimal"),
    "clip5": ({"clip_grad": 5.0}, {}, "minimal"),
    "bn": ({}, {}, "minimal-bn"),
    "bn+clip1": ({"clip_grad": 1.0}, {}, "minimal-bn"),
}


class StopScreen(Exception):
    """Enough epochs past the growth event: the screen has what it measures."""


def screen(data, lever: str, seed: int, precision: str, after: int) -> dict:
    train_opts, growth_opts, start = LEVERS[lever]
    cfg = TrainConfig(epochs=REFERENCE_EPOCHS, seed=seed, precision=precision, **train_opts).validate()
    schedule = "default-bn" if start.endswith("-bn") else "default"
    events = parse_schedule(schedule, cfg.epochs)
    grown_at = min(e.epoch for e in events)
    plan = ExperimentPlan(cfg, data, events, GrowthConfig(**growth_opts))
    seed_everything(seed, False)
    state = new_state(resolve_spec(start, data.input_shape, data.num_classes), cfg, torch.device("cpu"))

    def stop_after(epoch: int, metrics: dict, _state) -> None:
        click.echo(f"  {lever} seed {seed} epoch {epoch}: val/acc {metrics['val/acc']:.4f}", err=True)
        if epoch >= grown_at + after - 1:
            raise StopScreen

    start_s, diverged = time.perf_counter(), ""
    try:
        fit(state, data, cfg, plan, on_epoch=stop_after)
    except StopScreen:
        pass
    except DivergenceError as err:
        diverged = str(err)
    verdict = health.judge(state, data.val.y, cfg.dip_margin)
    accs = [row["val/acc"] for row in state.history]
    return {
        "lever": lever,
        "seed": seed,
        "precision": state.precision,
        "grown_at": grown_at,
        "val_acc": accs,
        "dip": verdict.growth_dips.get(grown_at),
        "verdict": "diverged" if diverged else verdict.verdict,
        "detail": diverged or verdict.describe(),
        "seconds": time.perf_counter() - start_s,
    }


@click.command()
@click.option("--dataset", default="fashion-mnist", show_default=True)
@click.option("--seeds", default="402,404", show_default=True, help="comma-separated training seeds")
@click.option("--levers", default="base", show_default=True, help=f"comma-separated: {', '.join(LEVERS)}")
@click.option("--precision", default="fp32", show_default=True)
@click.option("--after", default=2, show_default=True, help="epochs trained past the growth event")
@click.option("--output", type=click.Path(dir_okay=False), required=True)
def main(dataset: str, seeds: str, levers: str, precision: str, after: int, output: str) -> None:
    unknown = [name for name in levers.split(",") if name not in LEVERS]
    if unknown:
        raise click.BadParameter(f"unknown lever(s) {', '.join(unknown)}; known: {', '.join(LEVERS)}")
    data = load_data(DataConfig(dataset=dataset))
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    for lever in levers.split(","):
        for seed in (int(s) for s in seeds.split(",")):
            row = screen(data, lever, seed, precision, after)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            dip = "n/a" if row["dip"] is None else f"{100 * row['dip']:+.1f} points"
            click.echo(f"{lever} seed {seed} ({row['precision']}): dip {dip}, {row['verdict']}")


if __name__ == "__main__":
    main()

"""Benchmark: is a grown network's training step slower than the same network built static?

    OMP_NUM_THREADS=2 .venv/bin/python scripts/bench_grown_step.py --repeats 5

The growth comparison against the 90% baseline matches cells on the seconds that trained, and
the growing runs' widened epochs trained fewer examples a second than static's identical
network did hours earlier (docs/results/resnet/README.md). This times, side by side in one
process and alternating every arm within a trial so the machine's drift hits all alike, the
training loop (``train_one_epoch``: augmentation, step, lookahead) at the study's ``--recipe
airbench`` on:

- ``static``: ``--spec`` (default ``short-convs``) built as static builds it;
- ``grown``: ``--start-spec`` grown by ``--schedule`` (growth's own code, the optimizer
  rebuilt as growth rebuilds it), the same final network;
- ``grown+diet``: the grown network with the loss terms a growing arm's pruning asks for
  (each example's loss kept, its weight applied);
- ``static+diet``: static with the same terms, to tell the network from the terms.

Inputs are random tensors of CIFAR-10's shape (a step's cost does not depend on the pixels).
Prints and writes (``--output``) each arm's median seconds per example over the trials and
its ratio to ``static``'s, trial by trial.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.builder import build_model
from models.growth import grow
from models.schedule import named_schedule
from models.spec import resolve_spec
from pipeline.data.dataset import Split
from pipeline.device import place_model
from pipeline.study.recipes import recipe
from pipeline.training.config import TrainConfig, make_optimizer
from pipeline.training.lookahead import Lookahead
from pipeline.training.loop import EpochClock, LossTerms, StepRecipe, train_one_epoch

SHAPE, CLASSES = (3, 32, 32), 10


def networks(spec: str, start_spec: str, schedule: str, epochs: int) -> dict[str, torch.nn.Module]:
    """The static network and the same network grown from the start by the schedule."""
    cpu = torch.device("cpu")
    static = place_model(build_model(resolve_spec(spec, SHAPE, CLASSES)), cpu)
    grown = place_model(build_model(resolve_spec(start_spec, SHAPE, CLASSES)), cpu)
    for event in named_schedule(schedule, epochs):
        grown, _ = grow(grown, event, "random")
    place_model(grown, cpu)
    shapes = lambda model: [(name, p.shape) for name, p in model.named_parameters()]
    if shapes(grown) != shapes(static):
        raise click.UsageError(f"{start_spec} grown by {schedule} is not {spec}")
    return {"static": static, "grown": grown}


def seconds_per_example(model, cfg: TrainConfig, split: Split, diet: bool, seed: int) -> float:
    """One pass of the training loop over ``split`` at rate 0 (the weights stay), lookahead on."""
    optimizer = make_optimizer(model, cfg)
    lookahead = Lookahead(model, cfg.lookahead)
    terms = LossTerms(weights=torch.ones(len(split)), example_losses=True) if diet else LossTerms()
    clock = EpochClock(lambda _progress: 0.0, 0, 1, 0, torch.Generator().manual_seed(seed))
    start = time.perf_counter()
    stats = train_one_epoch(
        model,
        optimizer,
        split,
        torch.arange(len(split)),
        StepRecipe.of(cfg),
        clock,
        terms,
        after_step=lambda share: lookahead.step(share),
    )
    return (time.perf_counter() - start) / stats.examples


def emit(table: str, output: str) -> None:
    """Print a benchmark's table, and write it to ``output`` too where one is given."""
    click.echo(table)
    if output:
        Path(output).write_text(table + "\n")


@click.command()
@click.option("--spec", default="short-convs")
@click.option("--start-spec", default="short-convs-narrow")
@click.option("--schedule", default="short-convs-widen")
@click.option("--batches", default=6, help="batches of the recipe's size per arm and trial")
@click.option("--repeats", default=5, help="trials, every arm once in each")
@click.option("--output", default="", help="write the table here too (markdown)")
def main(spec: str, start_spec: str, schedule: str, batches: int, repeats: int, output: str) -> None:
    cfg = TrainConfig(**recipe("airbench").both)
    nets = networks(spec, start_spec, schedule, 22)
    n = batches * cfg.batch_size
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, *SHAPE, generator=generator).contiguous(memory_format=torch.channels_last)
    split = Split(x, torch.randint(CLASSES, (n,), generator=generator), torch.arange(n))
    arms = {"static": ("static", False), "grown": ("grown", False)}
    arms |= {"grown+diet": ("grown", True), "static+diet": ("static", True)}
    for net, diet in arms.values():  # untimed: the allocator and the kernels warm up
        seconds_per_example(nets[net], cfg, split, diet, 0)
    times: dict[str, list[float]] = {name: [] for name in arms}
    for trial in range(repeats):
        order = list(arms) if trial % 2 == 0 else list(reversed(arms))
        for name in order:
            net, diet = arms[name]
            times[name].append(seconds_per_example(nets[net], cfg, split, diet, trial))
    lines = [
        f"{spec} against {start_spec} grown by {schedule}, --recipe airbench, batch {cfg.batch_size}, "
        f"{batches} batches an arm, {repeats} trials, {torch.get_num_threads()} threads",
        "",
        "| arm | examples a second (median) | x static's time, per trial (median) |",
        "|---|---|---|",
    ]
    for name in arms:
        ratios = [t / s for t, s in zip(times[name], times["static"])]
        lines.append(
            f"| {name} | {1 / statistics.median(times[name]):.0f} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f} to {max(ratios):.3f}) |"
        )
    emit("\n".join(lines), output)


if __name__ == "__main__":
    main()

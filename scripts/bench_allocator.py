"""Benchmark: how much faster does the CPU train with freed memory kept in the heap?

    OMP_NUM_THREADS=2 .venv/bin/python scripts/bench_allocator.py --repeats 3

``pipeline.allocator`` tells glibc to keep a process's freed memory in its heap instead of
handing each large tensor back to the kernel and faulting it in again. This times the training
loop (``train_one_epoch`` at the study's ``--recipe airbench``, static ``short-convs``, random
inputs of CIFAR-10's shape) in fresh processes, alternately with the setting
(``PIPELINE_KEEP_FREED_MEMORY=1``, the default) and without it (``=0``: glibc's own way), the
order flipped every trial so the machine's drift hits both alike. Each process warms up on one
pass, then times the next; it reports examples a second, its kernel time and its page faults
over the timed pass. Prints (and writes, ``--output``) the medians and the per-trial ratio.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from bench_grown_step import CLASSES, SHAPE, emit, seconds_per_example

from models.builder import build_model
from models.spec import resolve_spec
from pipeline.allocator import user_set_malloc
from pipeline.data.dataset import Split
from pipeline.device import place_model
from pipeline.study.recipes import recipe
from pipeline.training.config import TrainConfig

SETTINGS = {"kept in the heap": "1", "glibc's default": "0"}


def timed_pass(spec: str, batches: int) -> dict[str, float]:
    """One warm-up pass and one timed pass of the training loop, in this process."""
    cfg = TrainConfig(**recipe("airbench").both)
    model = place_model(build_model(resolve_spec(spec, SHAPE, CLASSES)), torch.device("cpu"))
    n = batches * cfg.batch_size
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, *SHAPE, generator=generator).contiguous(memory_format=torch.channels_last)
    split = Split(x, torch.randint(CLASSES, (n,), generator=generator), torch.arange(n))
    seconds_per_example(model, cfg, split, False, 0)
    start = resource.getrusage(resource.RUSAGE_SELF)
    seconds = seconds_per_example(model, cfg, split, False, 1) * n
    end = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "examples_per_s": n / seconds,
        "kernel_share": (end.ru_stime - start.ru_stime)
        / (end.ru_stime - start.ru_stime + end.ru_utime - start.ru_utime),
        "faults_per_s": (end.ru_minflt - start.ru_minflt) / seconds,
    }


def in_child(spec: str, batches: int, keep: str) -> dict[str, float]:
    env = {**os.environ, "PIPELINE_KEEP_FREED_MEMORY": keep}
    command = [sys.executable, __file__, "--child", "--spec", spec, "--batches", str(batches)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


@click.command()
@click.option("--spec", default="short-convs")
@click.option("--batches", default=6, help="batches of the recipe's size a pass")
@click.option("--repeats", default=3, help="trials, each setting once in each")
@click.option("--output", default="", help="write the table here too (markdown)")
@click.option("--child", is_flag=True, hidden=True, help="time one pass here and print it")
def main(spec: str, batches: int, repeats: int, output: str, child: bool) -> None:
    if child:
        click.echo(json.dumps(timed_pass(spec, batches)))
        return
    if user_set_malloc(os.environ):
        raise click.UsageError("unset glibc's malloc settings (MALLOC_*_, GLIBC_TUNABLES) to compare")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    for trial in range(repeats):
        order = list(SETTINGS) if trial % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            runs[name].append(in_child(spec, batches, SETTINGS[name]))
    median = lambda name, key: statistics.median(run[key] for run in runs[name])
    base = "glibc's default"
    lines = [
        f"{spec}, --recipe airbench, {batches} batches a pass, {repeats} trials, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "",
        "| freed memory | examples a second (median) | x glibc's default, per trial (median) "
        "| kernel share of CPU time | page faults a second |",
        "|---|---|---|---|---|",
    ]
    for name in SETTINGS:
        ratios = [a["examples_per_s"] / b["examples_per_s"] for a, b in zip(runs[name], runs[base])]
        lines.append(
            f"| {name} | {median(name, 'examples_per_s'):.0f} | {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f} to {max(ratios):.2f}) | {median(name, 'kernel_share'):.0%} "
            f"| {median(name, 'faults_per_s'):,.0f} |"
        )
    emit("\n".join(lines), output)


if __name__ == "__main__":
    main()

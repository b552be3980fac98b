"""The finished training runs of one experiment as a table of where their seconds went.

    python3 scripts/bench_gpu_runs.py --experiment gpu --output reports/gpu/runs.md

One row per run, oldest first: its name, device, precision and compile mode, epochs, the epoch
loop's seconds (``time/total_*_s`` summed: everything accounted), the seconds that trained and
their share, the first epoch's seconds (which carry a compilation) against the median of the
later ones, the last validation accuracy, and the epoch loop's seconds when validation accuracy
first reached ``--target`` (0.90: the issue's bar; an epoch's validation reads a fixed sample of
the split, the last epoch all of it). What ``scripts/bench_gpu.sh step`` prints after its
eager and compiled runs, and for ``--study PREFIX`` the cells of those studies (test accuracy
where a confirmation's evaluate read it); it reads the store only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import click
import mlflow
from mlflow import MlflowClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline.budget.timing import PARTS

COLUMNS = (
    "run",
    "device",
    "precision",
    "compile",
    "epochs",
    "accounted s",
    "trained s",
    "trained share",
    "first epoch s",
    "later epochs s (median)",
    "val acc",
    "test acc",
    "s to target val",
)


def seconds_to(client: MlflowClient, run_id: str, target: float) -> str:
    """The epoch loop's seconds (``time/cumulative_s``) at the end of the first epoch whose
    validation accuracy reached ``target``."""
    seconds = {m.step: m.value for m in client.get_metric_history(run_id, "time/cumulative_s")}
    for m in sorted(client.get_metric_history(run_id, "val/acc"), key=lambda m: m.step):
        if m.value >= target and m.step in seconds:
            return f"{seconds[m.step]:.1f}"
    return "not reached"


def row(client: MlflowClient, run, target: float) -> list[str]:
    """One run's cells; epochs' seconds from its ``time/epoch_s`` history."""
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    epochs = [m.value for m in client.get_metric_history(run.info.run_id, "time/epoch_s")]
    accounted = sum(metrics.get(f"time/total_{p}_s", 0.0) for p in PARTS)
    compiled = params.get("compile", "false").lower() == "true"
    return [
        run.info.run_name,
        tags.get("device", params.get("device", "")),
        tags.get("precision_resolved", ""),
        params.get("compile_mode", "default") if compiled else "eager",
        str(len(epochs)),
        f"{accounted:.1f}",
        f"{metrics.get('time/trained_s', float('nan')):.1f}",
        f"{metrics.get('time/trained_share', float('nan')):.0%}",
        f"{epochs[0]:.2f}" if epochs else "",
        f"{statistics.median(epochs[1:]):.2f}" if len(epochs) > 1 else "",
        f"{metrics.get('val/acc', float('nan')):.4f}",
        f"{metrics['test/acc']:.4f}" if "test/acc" in metrics else "",
        seconds_to(client, run.info.run_id, target),
    ]


@click.command()
@click.option("--experiment", default="gpu", show_default=True)
@click.option("--output", default="", help="also write the table here (markdown)")
@click.option("--study", default="", help="only the cells of studies whose name starts with this")
@click.option("--target", default=0.9, show_default=True, help="the validation accuracy timed")
def main(experiment: str, output: str, study: str, target: float) -> None:
    client = MlflowClient()
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        raise click.UsageError(f"no experiment {experiment!r} in {mlflow.get_tracking_uri()}")
    query = "attributes.status = 'FINISHED'"
    if study:
        query += f" and tags.study_name LIKE '{study}%'"
    runs = client.search_runs([found.experiment_id], query, order_by=["attributes.start_time ASC"])
    trained = [r for r in runs if "time/trained_s" in r.data.metrics]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(client, r, target)) + " |" for r in trained]
    text = "\n".join(lines) + "\n"
    print(text)
    if output:
        Path(output).write_text(text)


if __name__ == "__main__":
    main()

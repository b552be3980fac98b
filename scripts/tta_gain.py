"""What test-time augmentation would give finished training runs, on their validation split.

    python3 scripts/tta_gain.py --runs RUN_ID,RUN_ID --output reports/tta.md

For each run: its logged weights (``model/model.safetensors``), the data it trained on (from its
parameters, checked against its data digest), and its validation accuracy read each way
``--tta`` offers, with the difference to the plain reading in points. Validation only: the test
split is ``evaluate``'s, and a choice made on this table is made on validation. It reads the
store and writes nothing to it.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import click
import mlflow
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.io import load_model
from models.tta import TTAS, with_tta
from pipeline.evaluate import data_of, logged_weights
from pipeline.tracking.errors import UpstreamError
from pipeline.training.loop import evaluate_split


def run_row(run_id: str, data_cache: dict, tmp: Path) -> dict:
    run = mlflow.get_run(run_id)
    data = data_of(run, data_cache, include_test=False)  # validation only: test is evaluate's
    model = load_model(logged_weights(run_id, tmp / run_id), torch.device("cpu"))
    accs = {tta: evaluate_split(with_tta(model, tta), data.val).acc for tta in TTAS}
    return {"run": run.info.run_name, "seed": run.data.params.get("seed", ""), **accs}


@click.command()
@click.option("--runs", required=True, help="comma-separated ids of finished training runs")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def main(runs: str, output: Path | None) -> None:
    ids = [r.strip() for r in runs.split(",") if r.strip()]
    if not ids:
        raise click.UsageError("--runs names no run: give run ids, comma-separated")
    rows, cache = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for run_id in ids:
            try:
                rows.append(run_row(run_id, cache, Path(tmp)))
            except UpstreamError as err:  # data or model the run no longer matches: one line
                raise click.ClickException(str(err)) from None
    others = [tta for tta in TTAS if tta != "none"]
    head = ["run", "seed", "val acc, plain", *(f"val acc, {t}" for t in others)]
    head += [f"{t} − plain, points" for t in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        gains = [f"{100 * (row[t] - row['none']):+.2f}" for t in others]
        accs = [f"{100 * row[t]:.2f}%" for t in TTAS]
        lines.append("| " + " | ".join([row["run"], row["seed"], *accs, *gains]) + " |")
    for t in others:
        gains = [100 * (row[t] - row["none"]) for row in rows]
        lines.append(f"\n{t}: median {statistics.median(gains):+.2f} points over {len(gains)} run(s)")
    text = "\n".join(lines) + "\n"
    click.echo(text)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)


if __name__ == "__main__":
    main()

"""What main records and says once its steps have run: the steps table, the champion model in the
registry, the tags that point at the report, and the report's Conclusion printed.
"""

from __future__ import annotations

from pathlib import Path

import click
import mlflow
import pandas as pd

from pipeline.run.logged_model import register_champion
from pipeline.tracking.artifacts import scratch_dir
from pipeline.workflow.steps import StepRunner


def record_outcome(
    step: StepRunner,
    training: list[str],
    scores: dict[float, str],
    evaluation: str,
    model_name: str,
    caveat: str = "",
) -> None:
    """Log onto main's active run the steps it ran or reused (``steps.csv``, ``steps/*``), the
    best training run's model registered as ``model_name``'s champion, and tags naming the
    scores, evaluate run and report; then print the report's Conclusion, and ``caveat`` (what
    the preset is too small to tell) after it."""
    with scratch_dir() as tmp:
        steps = pd.DataFrame(step.log)
        steps.to_csv(tmp / "steps.csv", index=False)
        mlflow.log_artifact(str(tmp / "steps.csv"))
    reused = [s["run_id"] for s in step.log if s["reused"]]
    champion = register_champion(training, model_name)
    click.echo(
        f"main: the best model by validation accuracy is {champion}"
        if champion
        else "main: no training run logged an MLflow Model, so none is registered",
        err=True,
    )
    mlflow.set_tags(
        {
            "champion": champion,
            "evaluate_run_id": evaluation,
            "scores_run_id": ",".join(scores.values()),
            "report": f"runs:/{evaluation}/report/report.html",
            "reused_runs": ",".join(reused)[:5000],
            "caveat": caveat,
        }
    )
    mlflow.log_metrics({"steps/total": len(step.log), "steps/reused": len(reused)})
    click.echo(f"main: {len(reused)} of {len(step.log)} steps reused", err=True)
    print_conclusion(evaluation)
    if caveat:
        click.echo(f"\n{caveat}")


def print_conclusion(evaluate_run_id: str) -> None:
    with scratch_dir() as tmp:
        path = mlflow.artifacts.download_artifacts(
            run_id=evaluate_run_id, artifact_path="report/report.md", dst_path=str(tmp)
        )
        text = Path(path).read_text()
    # The title and the Conclusion section; the per-variant details stay in the report.
    click.echo("\n## ".join(text.split("\n## ")[:2]).split("\n### ")[0].strip())
    click.echo(f"\nfull report: runs:/{evaluate_run_id}/report/report.html (MLflow UI, evaluate run)")

"""evaluate: test-split results per difficulty tier for training runs, and the comparison report.

    python -m pipeline.evaluate --runs RUN_ID,RUN_ID
    mlflow run . -e evaluate --env-manager local            # every finished training run

This is the only step that measures the models on the test split (score_difficulty scores it
only to cut its tiers; training steps and tune never load it). For each training run it rebuilds the model
from its logged safetensors file and spec (nothing is unpickled), reloads exactly the data the
run trained on (checked by digest), takes test tiers from the run's score_difficulty run, and
measures accuracy overall and per tier, per-class accuracy, the confusion matrix and inference
time per example by tier (``pipeline/evaluation.py``), reading the network as the run's
validation did (its ``--tta``).

Where results go: the test metrics (``test/acc``, ``test/acc_hard``, ...) are logged on the
training run itself, so that the MLflow UI's compare view shows them in the same row as the
run's parameters and validation curves; a separate child run would split one model's story
over two rows. The evaluate run records which runs it evaluated (tag ``evaluated_by`` on each)
and holds the comparison report across them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import click
import mlflow
import numpy as np
import torch

from models.io import load_model
from models.tta import TTAS, with_tta
from pipeline import exits, report
from pipeline.cli import build_config, config_options, help_text, opt
from pipeline.codec import flat_params, from_params
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.splits import load_data
from pipeline.device import pick_device
from pipeline.difficulty.scores_table import find_scores_run, load_scores
from pipeline.evaluation import adaptive_test_metrics, compute_test_metrics
from pipeline.precision import resolve_precision
from pipeline.run import plots
from pipeline.run.logged_model import MODEL_ID_TAG
from pipeline.run.session import MODEL_ARTIFACT_DIR, MODEL_FILE
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.filters import clause
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.params import full_param
from pipeline.tracking.runs import tracked_run

ENTRY_POINT = "evaluate"
TRAINING_ENTRY_POINTS = ("train_static", "train_dynamic")


@dataclass(frozen=True)
class EvaluateConfig:
    runs: str = opt("", "comma-separated training run ids; empty: every finished training run")
    experiment_name: str = opt(
        "",
        "experiment of this run, and with --runs empty the one to take runs from; empty: "
        "growing-cnn, runs taken from every experiment",
    )
    tag_filter: str = opt("", "with --runs empty: only runs with this tag, as key=value")
    target_acc: float = opt(
        0.0, "validation accuracy for time-to-target; 0: 95% of the matched static's final"
    )
    device: str = opt("cpu", "device for inference (timings are per device)")
    precision: str = opt(
        "fp32",
        "autocast precision of inference: fp32 (the reported accuracy's default), bf16, fp16 (CUDA) "
        "or auto (bf16 where this hardware runs it fast); accuracy and timings are per precision",
    )
    batch_size: int = opt(512, "inference batch size")
    exit_threshold: str = opt(
        "",
        "for models with exits: confidence to leave at each exit (one value or one per exit); "
        "empty: the thresholds calibrated on the validation split and saved with the model",
    )
    exit_confidence: str = opt(
        "",
        "for models with exits: confidence measure (maxprob or entropy); empty: the one saved with "
        "the model (another needs --exit-threshold, as the saved thresholds are on the saved one)",
    )
    run_name: str = opt("", "MLflow run name; empty: evaluate")


CONFIGS = (EvaluateConfig,)


# --- runs --------------------------------------------------------------------------------


def select_runs(cfg: EvaluateConfig) -> list[str]:
    """The training runs to evaluate: given ids (checked), or every finished one that matches."""
    client = mlflow.MlflowClient()
    if cfg.runs.strip():
        ids = [r.strip() for r in cfg.runs.split(",") if r.strip()]
        twice = next((r for i, r in enumerate(ids) if r in ids[:i]), None)
        if twice is not None:  # each run reads the test split once
            raise UpstreamError(f"--runs names run {twice} twice; name each run once")
        for run_id in ids:
            try:
                run = client.get_run(run_id)
            except mlflow.exceptions.MlflowException:
                raise UpstreamError(f"--runs: run {run_id} does not exist in this tracking store") from None
            kind = run.data.tags.get("entry_point")
            if kind not in TRAINING_ENTRY_POINTS:
                raise UpstreamError(f"--runs: run {run_id} is a {kind or 'untagged'} run, not a training run")
            if run.info.status != "FINISHED":
                raise UpstreamError(f"--runs: run {run_id} is {run.info.status}, not FINISHED")
            if run.info.lifecycle_stage == "deleted":  # evaluating it would write into a deleted run
                raise UpstreamError(
                    f"--runs: run {run_id} is deleted; restore it (mlflow runs restore) first"
                )
        return ids
    filters = ["attributes.status = 'FINISHED'"]
    wanted: tuple[str, str] | None = None  # a tag the filter cannot quote: matched below
    if cfg.tag_filter.strip():
        key, sep, value = cfg.tag_filter.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or "`" in key:
            raise UpstreamError(
                f"--tag-filter {cfg.tag_filter!r} must look like key=value (no backquote in key)"
            )
        tag = clause(f"tags.`{key}`", "=", value)
        if tag is None:
            wanted = (key, value)
        else:
            filters.append(tag)
    kwargs = {"search_all_experiments": True}
    if cfg.experiment_name:
        if mlflow.get_experiment_by_name(cfg.experiment_name) is None:
            raise UpstreamError(f"--experiment-name {cfg.experiment_name!r} does not exist")
        kwargs = {"experiment_names": [cfg.experiment_name]}
    runs = [
        r
        for kind in TRAINING_ENTRY_POINTS  # MLflow's search has no IN for tags
        for r in mlflow.search_runs(
            filter_string=" and ".join([*filters, f"tags.entry_point = '{kind}'"]),
            output_format="list",
            **kwargs,
        )
        if wanted is None or r.data.tags.get(wanted[0]) == wanted[1]
    ]
    if not runs:
        raise UpstreamError("no finished train_static or train_dynamic runs to evaluate; train some first")
    return [r.info.run_id for r in runs]


def inference_device(name: str) -> torch.device:
    """``--device`` as a device this machine has (``auto`` as training resolves it)."""
    device = pick_device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UpstreamError(
            f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s); "
            "use cuda:0 .. cuda:N-1, or cpu"
        )
    return device


# Every training run has logged these; the data options added since default to the data
# runs had before them (clean labels).
LOGGED_DATA_PARAMS = ("dataset", "val_size", "split_seed", "subset")


def data_config_of(run: mlflow.entities.Run) -> DataConfig:
    missing = [key for key in LOGGED_DATA_PARAMS if key not in run.data.params]
    if missing:
        raise UpstreamError(f"run {run.info.run_id} lacks the data parameter {missing[0]!r}")
    # A long value (a data folder's path) was logged as a digest: read back its full text.
    fields = {f.name for f in dataclasses.fields(DataConfig)}
    params = {k: full_param(run.info.run_id, k, v) for k, v in run.data.params.items() if k in fields}
    try:
        return from_params(DataConfig, params)
    except ValueError as err:
        raise UpstreamError(f"run {run.info.run_id}: {err}") from None


def data_of(run: mlflow.entities.Run, data_cache: dict, include_test: bool) -> Data:
    """The data ``run`` trained on, rebuilt from its parameters (``data_cache``: one load per
    set of data options) and checked against its logged digest."""
    data_cfg = data_config_of(run)
    if data_cfg not in data_cache:
        data_cache[data_cfg] = load_data(data_cfg, include_test=include_test)
    data: Data = data_cache[data_cfg]
    if run.data.params.get("data_digest") != data.digest:
        raise UpstreamError(
            f"run {run.info.run_id} trained on data digest {run.data.params.get('data_digest')}, "
            f"but its data options now give {data.digest}: the data changed"
        )
    return data


def logged_weights(run_id: str, dest: Path) -> str:
    """The local path of ``run_id``'s logged safetensors file, downloaded under ``dest``."""
    try:
        return mlflow.MlflowClient().download_artifacts(
            run_id, f"{MODEL_ARTIFACT_DIR}/{MODEL_FILE}", str(dest)
        )
    except (mlflow.exceptions.MlflowException, OSError):
        raise UpstreamError(f"run {run_id} has no {MODEL_ARTIFACT_DIR}/{MODEL_FILE} artifact") from None


def evaluate_run(run_id: str, cfg: EvaluateConfig, data_cache: dict, tmp: Path) -> dict[str, float]:
    """Evaluate one training run and log the results onto it; returns its test metrics."""
    client = mlflow.MlflowClient()
    run = client.get_run(run_id)
    data = data_of(run, data_cache, include_test=True)
    scores_ref = run.data.tags.get("scores_run_id") or find_scores_run(data)
    tiers = load_scores(scores_ref, data).tiers_for(data.test, "test") if scores_ref else None
    dest = tmp / run_id
    path = logged_weights(run_id, dest)
    tta = run.data.params.get("tta", "none")  # a run from before --tta existed read it plainly
    if tta not in TTAS:
        raise UpstreamError(f"run {run_id} logged tta {tta!r}; this version reads {', '.join(TTAS)}")
    device = inference_device(cfg.device)
    model = load_model(path, device)
    test = data.test.to(device)
    precision = resolve_precision(cfg.precision, device)
    metrics, per_class, confusion = compute_test_metrics(
        with_tta(model, tta), test, tiers, data.classes, cfg.batch_size, precision
    )
    per_class.to_csv(dest / "per_class.csv", index=False)
    confusion.to_csv(dest / "confusion_matrix.csv")
    names = ["per_class.csv", "confusion_matrix.csv", "test_metrics.json"]
    if model.spec.exits:
        model.exit_confidence = exits.eval_confidence(
            cfg.exit_confidence, model, bool(cfg.exit_threshold.strip())
        )
        thresholds = exits.eval_thresholds(cfg.exit_threshold, model, f"run {run_id}")
        exit_metrics, curve = adaptive_test_metrics(model, thresholds, test, tiers, cfg.batch_size)
        metrics.update(exit_metrics)
        (dest / "exit_curve.json").write_text(json.dumps(curve, indent=2))
        plots.exit_examples(
            model,
            test,
            tiers,
            data,
            dest / "exit_examples.png",
            f"{run.info.run_name}: where test examples leave",
        )
        names += ["exit_curve.json", "exit_examples.png"]
        client.set_tag(run_id, "test_exit_thresholds", json.dumps(list(thresholds)))
        client.set_tag(run_id, "test_exit_confidence", model.exit_confidence)
    (dest / "test_metrics.json").write_text(json.dumps(metrics, indent=2))
    for name in names:
        client.log_artifact(run_id, str(dest / name), "evaluation")
    # On the run and, where the run logged an MLflow Model, linked to that model too.
    mlflow.log_metrics(
        {k: v for k, v in metrics.items() if np.isfinite(v)},
        step=0,
        run_id=run_id,
        model_id=run.data.tags.get(MODEL_ID_TAG) or None,
        synchronous=True,
    )
    client.set_tag(run_id, "test_scores_run_id", scores_ref or "")
    client.set_tag(run_id, "test_precision", precision)  # the test metrics' arithmetic
    client.set_tag(run_id, "test_tta", tta)  # and how they read the network
    return metrics


def run(cfg: EvaluateConfig) -> str:
    if cfg.batch_size < 1:
        raise UpstreamError(f"--batch-size must be positive, got {cfg.batch_size}")
    resolve_precision(cfg.precision, inference_device(cfg.device))  # before any run is opened
    exits.parse_values(cfg.exit_threshold, "--exit-threshold", upper=1.0)
    if cfg.exit_confidence.strip():
        exits.check_confidence(cfg.exit_confidence.strip())
    run_ids = select_runs(cfg)
    params = flat_params(cfg)
    params["runs"] = ",".join(run_ids)  # what was evaluated; its full text in params/runs.txt
    with tracked_run(
        ENTRY_POINT,
        params,
        run_name=cfg.run_name or "evaluate",
        experiment_name=cfg.experiment_name,
    ) as active:
        data_cache: dict = {}
        with scratch_dir() as tmp:
            for i, run_id in enumerate(run_ids):
                metrics = evaluate_run(run_id, cfg, data_cache, tmp)
                click.echo(f"[{i + 1}/{len(run_ids)}] {run_id}: test/acc {metrics['test/acc']:.4f}", err=True)
            runs_df, histories, events = report.collect_runs(run_ids)
            curves = {
                r: json.loads(p.read_text()) for r in run_ids if (p := tmp / r / "exit_curve.json").is_file()
            }
            paths = report.build_report(
                runs_df,
                histories,
                events,
                tmp / "report",
                target_acc=cfg.target_acc or None,
                exit_curves=curves,
            )
            for path in paths.files():
                mlflow.log_artifact(str(path), "report")
            runs_df.to_csv(tmp / "runs.csv", index=False)
            mlflow.log_artifact(str(tmp / "runs.csv"), "report")
        # Only once the report is logged: an interrupted evaluate leaves no tag pointing at it.
        for run_id in run_ids:
            mlflow.MlflowClient().set_tag(run_id, "evaluated_by", active.info.run_id)
        return active.info.run_id


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    run_id = run(build_config(EvaluateConfig, values))
    click.echo(f"evaluate run {run_id}: report in its artifacts under report/report.html")


if __name__ == "__main__":
    main()

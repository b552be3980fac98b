"""The report of a tune study: a function of the Optuna study alone, no MLflow inside.

``build_report(study, folder)`` writes

- ``trials.csv``: one row per trial (state, objective values, epochs trained, schedule, final
  architecture, MLflow run id, the reason a trial was pruned as invalid or failed, every param);
- ``best_trials.json``: the best trial, or the Pareto front with two objectives, each with its
  growth schedule and the ``train_dynamic`` options that retrain it;
- figures as PNG: optimisation history, intermediate values (pruning), parameter importances,
  parallel coordinates, and the Pareto front with two objectives;
- ``report.html``: all of the above in one self-contained page (figures embedded as base64,
  no scripts), so it renders offline.

It reads the user attributes that tune sets on each trial (names below).
"""

from __future__ import annotations

import html
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

matplotlib.use("Agg")  # figures are files only, as in pipeline/run/plots.py
import matplotlib.pyplot as plt
from optuna.visualization import matplotlib as optuna_plots

from pipeline.report.render import png_img

# Trial user attributes written by tune (pipeline/tune/worker.py) and read here.
ATTR_RUN_ID = "mlflow_run_id"
ATTR_SCHEDULE = "schedule"
ATTR_ARCH = "final_arch"
ATTR_EPOCHS = "epochs_trained"
ATTR_TRAIN_S = "train_s"
ATTR_INVALID = "invalid_reason"  # pruned before training: the candidate cannot be built
ATTR_FAIL = "fail_reason"  # failed or diverged while training (a diverged trial is pruned)
ATTR_PRUNED_AT = "pruned_at_epoch"
ATTR_WORKER = "worker"
ATTR_RETRY_OF = "retry_of"
ATTR_TRAIN_OPTIONS = "train_dynamic_options"  # -P options that retrain the trial


@dataclass
class Figure:
    name: str
    title: str
    path: Path | None  # None: not drawn
    note: str = ""  # why it was not drawn


def metric_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    if names:
        return list(names)
    return ["value"] if len(study.directions) == 1 else [f"value_{i}" for i in range(len(study.directions))]


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial, named columns first, then ``param:<name>`` for every parameter."""
    names = metric_names(study)
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        values = trial.values or [math.nan] * len(names)
        row = {
            "number": trial.number,
            "state": trial.state.name,
            **dict(zip(names, values)),
            ATTR_EPOCHS: attrs.get(ATTR_EPOCHS, 0),
            ATTR_TRAIN_S: attrs.get(ATTR_TRAIN_S, 0.0),
            "duration_s": trial.duration.total_seconds() if trial.duration else math.nan,
            ATTR_SCHEDULE: attrs.get(ATTR_SCHEDULE, ""),
            ATTR_ARCH: attrs.get(ATTR_ARCH, ""),
            "reason": attrs.get(ATTR_INVALID) or attrs.get(ATTR_FAIL) or "",
            ATTR_PRUNED_AT: attrs.get(ATTR_PRUNED_AT, ""),
            ATTR_RUN_ID: attrs.get(ATTR_RUN_ID, ""),
            ATTR_WORKER: attrs.get(ATTR_WORKER, ""),
            ATTR_RETRY_OF: attrs.get(ATTR_RETRY_OF, ""),
        }
        row.update({f"param:{k}": v for k, v in sorted(trial.params.items())})
        rows.append(row)
    return pd.DataFrame(rows)


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (one objective) or the Pareto front (two), best first; [] before any finishes."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: tuple(-v for v in t.values[:1]))


def summary(study: optuna.Study) -> dict[str, float]:
    """Counts and compute of the study, for the parent run's metrics."""
    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    out = {
        "study/trials": float(len(trials)),
        "study/complete": float(states.count(TrialState.COMPLETE)),
        "study/pruned": float(states.count(TrialState.PRUNED)),
        "study/failed": float(states.count(TrialState.FAIL)),
        "study/invalid": float(sum(ATTR_INVALID in t.user_attrs for t in trials)),
        "study/epochs_trained": float(sum(t.user_attrs.get(ATTR_EPOCHS, 0) for t in trials)),
        "study/train_s": float(sum(t.user_attrs.get(ATTR_TRAIN_S, 0.0) for t in trials)),
    }
    best = best_trials(study)
    if best:
        out["best/val_acc"] = float(max(t.values[0] for t in best))
        if len(study.directions) == 1:
            out["best/trial"] = float(best[0].number)
        else:
            out["best/pareto_size"] = float(len(best))
    return out


def best_records(study: optuna.Study) -> list[dict]:
    names = metric_names(study)
    return [
        {
            "number": t.number,
            "values": dict(zip(names, t.values)),
            "schedule": t.user_attrs.get(ATTR_SCHEDULE, ""),
            "final_arch": t.user_attrs.get(ATTR_ARCH, ""),
            "params": t.params,
            "mlflow_run_id": t.user_attrs.get(ATTR_RUN_ID, ""),
            "train_dynamic_options": t.user_attrs.get(ATTR_TRAIN_OPTIONS, {}),
        }
        for t in best_trials(study)
    ]


def importances(study: optuna.Study, objective: int = 0) -> tuple[dict[str, float], str]:
    """fANOVA importances of the parameters for one objective; ({}, why) when there are too few trials."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}, f"needs at least 2 complete trials, the study has {len(complete)}"
    target = None if len(study.directions) == 1 else (lambda t: t.values[objective])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # seeded: fANOVA's forest is random, and the same study should give the same report
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
            return optuna.importance.get_param_importances(study, evaluator=evaluator, target=target), ""
    except (RuntimeError, ValueError, ZeroDivisionError) as err:
        return {}, f"not computable: {err}"


# --- figures -----------------------------------------------------------------------------


def _save(draw: Callable[[], object], path: Path, size: tuple[float, float] = (8, 4.5)) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's matplotlib plots are experimental
        result = draw()
    axes = result.flat[0] if hasattr(result, "flat") else result
    fig = axes.figure
    fig.set_size_inches(max(fig.get_size_inches()[0], size[0]), max(fig.get_size_inches()[1], size[1]))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _importance_figure(values: dict[str, float], title: str, path: Path) -> Path:
    names = list(values)[::-1]  # most important on top
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.35 * len(names) + 1)))
    ax.barh(names, [values[n] for n in names], color="#4c72b0")
    ax.set(xlabel="fANOVA importance (share of variance)", title=title)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figures(study: optuna.Study, folder: Path, values: dict[str, float], why: str) -> list[Figure]:
    """The report's figures; ``values`` and ``why`` are ``importances(study)``."""
    names = metric_names(study)
    multi = len(study.directions) > 1
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    first = {} if not multi else {"target": lambda t: t.values[0], "target_name": names[0]}
    out: list[Figure] = []

    def add(name: str, title: str, draw: Callable[[], object], needs: int = 1, size=(8, 4.5)) -> None:
        if len(complete) < needs:
            out.append(Figure(name, title, None, f"needs {needs} complete trial(s), has {len(complete)}"))
            return
        try:
            out.append(Figure(name, title, _save(draw, folder / f"{name}.png", size)))
        except (ValueError, RuntimeError, IndexError) as err:
            plt.close("all")
            out.append(Figure(name, title, None, f"not drawn: {err}"))

    add(
        "optimization_history",
        f"optimisation history ({names[0]})",
        lambda: optuna_plots.plot_optimization_history(study, **first),
    )
    if multi:
        add(
            "pareto_front",
            f"Pareto front ({names[0]} against {names[1]})",
            lambda: optuna_plots.plot_pareto_front(study, target_names=names[:2]),
        )
    else:
        add(
            "intermediate_values",
            "validation accuracy per epoch (pruned trials stop early)",
            lambda: optuna_plots.plot_intermediate_values(study),
        )
    if values:
        path = _importance_figure(
            values, f"parameter importances ({names[0]})", folder / "param_importances.png"
        )
        out.append(Figure("param_importances", f"parameter importances ({names[0]})", path))
    else:
        out.append(Figure("param_importances", f"parameter importances ({names[0]})", None, why))
    # Readable with a few axes, each wide enough for its labels: the most important five, or
    # (importances unknown) the first five by name.
    searched = sorted({k for t in complete for k in t.params})
    top = list(values)[:PARALLEL_AXES] or searched[:PARALLEL_AXES]
    add(
        "parallel_coordinate",
        f"parallel coordinates ({names[0]}; {len(top)} of {len(searched)} parameters"
        + (", the most important)" if values else ")"),
        lambda: optuna_plots.plot_parallel_coordinate(study, params=top or None, **first),
        needs=2,
        size=(max(10, 2.2 * len(top) + 2), 6),
    )
    return out


# --- the report --------------------------------------------------------------------------


PARALLEL_AXES = 5
# Below this many complete trials fANOVA importances are mostly noise; the report says so.
FEW_TRIALS_FOR_IMPORTANCE = 10
# Columns of the HTML trials table (all of them are in trials.csv); wide ones wrap.
HTML_TRIAL_COLUMNS = (
    "number",
    "state",
    ATTR_EPOCHS,
    ATTR_TRAIN_S,
    ATTR_SCHEDULE,
    ATTR_ARCH,
    "reason",
    ATTR_PRUNED_AT,
)


def _plain(value) -> str:
    """A parameter as a person writes it: 1 rather than 1.0, 0.0123 rather than 0.012345678."""
    if isinstance(value, float):
        if value != value:  # NaN: not searched in this trial
            return ""
        return str(int(value)) if value.is_integer() else f"{value:.4g}"
    return str(value)


def retrain_command(options: dict) -> str:
    """The command that trains a trial's choices as a standalone train_dynamic run."""
    args = " ".join(f"-P {k}={_plain(v)}" for k, v in options.items())
    return f"mlflow run . -e train_dynamic --env-manager local {args}".strip()


def render_html(
    study: optuna.Study,
    frame: pd.DataFrame,
    best: list[dict],
    figs: list[Figure],
    importance: dict[str, float],
    importance_note: str,
) -> str:
    names = metric_names(study)
    directions = ", ".join(f"{n} ({d.name.lower()})" for n, d in zip(names, study.directions))
    counts = frame["state"].value_counts().to_dict() if len(frame) else {}
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Optuna study {esc(study.study_name)}: growth and curriculum search</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1300px}"
        "table{border-collapse:collapse;font-size:12px;max-width:100%}"
        "td,th{border:1px solid #ccc;padding:2px 6px;max-width:22em;overflow-wrap:anywhere}"
        "th{background:#eee}img{max-width:100%;margin:.5em 0}code{background:#f4f4f4}</style>",
        "</head><body>",
        f"<h1>Optuna study <code>{esc(study.study_name)}</code>: growth schedule, curriculum and "
        "learning rate</h1>",
        f"<p>Objectives: {esc(directions)}. Trials: {len(frame)} "
        f"({esc(', '.join(f'{v} {k.lower()}' for k, v in counts.items()))}). "
        f"Epochs trained in all: {int(frame[ATTR_EPOCHS].sum()) if len(frame) else 0}.</p>",
        "<h2>Best trial" + ("s (Pareto front)" if len(names) > 1 else "") + "</h2>",
    ]
    parts.append(_best_table(best))
    parts.append("<h2>Parameter importances</h2>")
    parts += _importance_section(importance, importance_note, counts.get("COMPLETE", 0))
    parts.append("<h2>Figures</h2>")
    for fig in figs:
        parts.append(f"<h3>{esc(fig.title)}</h3>")
        parts.append(png_img(fig.path, fig.path.stem) if fig.path else f"<p>Not drawn: {esc(fig.note)}</p>")
    parts.append("<h2>All trials</h2>")
    parts += _trials_table(frame, names)
    parts.append("</body></html>")
    return "\n".join(parts)


def _best_table(best: list[dict]) -> str:
    """The best trials (the Pareto front), each with the command that retrains it."""
    if not best:
        return "<p>No trial has completed yet.</p>"
    rows = [
        {
            "trial": b["number"],
            **{n: f"{v:.4f}" for n, v in b["values"].items()},
            "schedule": b["schedule"] or "(no growth)",
            "final architecture": b["final_arch"],
            "pacing": b["params"].get("pacing", b["train_dynamic_options"].get("pacing", "")),
            "lr": f"{float(b['train_dynamic_options'].get('lr', b['params'].get('lr', math.nan))):.4g}",
            "retrain with": retrain_command(b["train_dynamic_options"]),
        }
        for b in best
    ]
    return pd.DataFrame(rows).to_html(index=False, escape=True)


def _importance_section(importance: dict[str, float], note: str, n_complete: int) -> list[str]:
    """fANOVA's parameter importances, with a caveat when few trials completed."""
    if not importance:
        return [f"<p>Not available: {html.escape(note)}</p>"]
    parts = []
    if n_complete < FEW_TRIALS_FOR_IMPORTANCE:
        parts.append(
            f"<p><b>Caveat:</b> computed from {n_complete} complete trial(s); fANOVA needs many "
            f"more (tens) to separate a parameter's effect from noise, so below "
            f"{FEW_TRIALS_FOR_IMPORTANCE} read these numbers as hints, not findings.</p>"
        )
    parts.append(
        pd.DataFrame(
            {"parameter": list(importance), "importance": [f"{v:.3f}" for v in importance.values()]}
        ).to_html(index=False, escape=True)
    )
    return parts


def _trials_table(frame: pd.DataFrame, names: list[str]) -> list[str]:
    """Every trial, its objectives, state and parameters (trials.csv has every column)."""
    if not len(frame):
        return ["<p>None.</p>"]
    shown = [c for c in (*HTML_TRIAL_COLUMNS[:2], *names, *HTML_TRIAL_COLUMNS[2:]) if c in frame.columns]
    shown += [c for c in frame.columns if c.startswith("param:")]
    table = frame[shown].copy()
    for column in table.columns:
        if column.startswith("param:") or column == ATTR_PRUNED_AT:
            table[column] = table[column].map(_plain)
    for column in (*names, ATTR_TRAIN_S):
        if column in table.columns:
            table[column] = table[column].map(lambda v: "" if v != v else f"{v:.4g}")
    table.columns = [c.removeprefix("param:") for c in table.columns]
    return [
        "<p>Every column, run ids and workers included, is in <code>trials.csv</code>.</p>",
        table.to_html(index=False, escape=True, na_rep=""),
    ]


def build_report(study: optuna.Study, folder: Path) -> dict[str, Path]:
    """Write the study's report files into ``folder``; returns name -> path of each file written."""
    folder.mkdir(parents=True, exist_ok=True)
    frame = trials_frame(study)
    written = {"trials.csv": folder / "trials.csv"}
    frame.to_csv(written["trials.csv"], index=False)
    best = best_records(study)
    written["best_trials.json"] = folder / "best_trials.json"
    written["best_trials.json"].write_text(json.dumps(best, indent=2, sort_keys=True, default=str))
    importance, note = importances(study)
    figs = figures(study, folder, importance, note)
    for fig in figs:
        if fig.path is not None:
            written[fig.path.name] = fig.path
    page = render_html(study, frame, best, figs, importance, note)
    written["report.html"] = folder / "report.html"
    written["report.html"].write_text(page)
    return written

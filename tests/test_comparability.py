"""evaluate's report never mixes runs that cannot be compared (issue #17, item 1).

Runs recorded in a real temporary MLflow store, as training logs them: a Fashion-MNIST static
run and a digits static run must not be averaged into one "static" row, a variant is paired only
with the static runs of its own setting, and the report says why a variant stays unpaired.
"""

from __future__ import annotations

import json
import time

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric, Param

from pipeline import codec
from pipeline.report import build_report, collect_runs
from pipeline.report.runs import COMPARABILITY_KEYS, setting_of

SPEC = json.dumps({"input_shape": [1, 28, 28], "num_classes": 10, "layers": [{"id": "f1", "type": "fc"}]})
FASHION = {"dataset": "fashion-mnist", "data_digest": "aaaa", "subset": "0", "val_size": "5000",
           "split_seed": "0", "epochs": "12"}  # fmt: skip
DIGITS = {**FASHION, "dataset": "folder:/data/digits", "data_digest": "bbbb"}


def _record(variant: str, seed: int, acc: float, params: dict[str, str]) -> str:
    entry_point = "train_static" if variant == "static" else "train_dynamic"
    tags = {"entry_point": entry_point, "variant": variant, "final_spec": SPEC}
    now = int(time.time() * 1000)
    with mlflow.start_run(tags=tags) as run:
        mlflow.MlflowClient().log_batch(
            run.info.run_id,
            metrics=[Metric("test/acc", acc, now, 0), Metric("time/total_s", 10.0 + seed, now, 0)],
            params=[Param(k, v) for k, v in {**params, "seed": str(seed)}.items()],
        )
    return run.info.run_id


def test_setting_treats_missing_params_as_empty_and_numbers_as_numbers():
    old = setting_of({"dataset": "fashion-mnist", "epochs": "6"})  # a run from before `budget`
    assert json.loads(old)["budget"] == "" and json.loads(old)["precision"] == ""
    assert setting_of({"epochs": "6.0", "val_size": "5000"}) == setting_of({"epochs": "6", "val_size": "5e3"})
    assert setting_of({"epochs": "6"}) != setting_of({"epochs": "12"})
    assert {"data_digest", "subset", "val_size", "split_seed", "epochs", "budget", "precision"} <= set(
        COMPARABILITY_KEYS
    )


# Two spellings of one parameter: (a, b, one setting?, codec.same_param?). The rows after the
# first four are where the report's rule and the codec's part; None is a parameter not logged,
# which a setting reads as "" and the codec as the text "None".
SPELLINGS = [
    ("0.1", str(0.1), True, True),
    ("1e-3", str(0.001), True, True),
    ("''", "", True, True),
    ("6.0", "6", True, True),
    ("", None, True, False),
    ("true", str(True), False, True),
    ("1E-3", "0.001", False, True),
    ("1_000", "1000", False, True),
    ("'x", "x", True, False),
]


@pytest.mark.parametrize(("a", "b", "one_setting", "same_param"), SPELLINGS)
def test_setting_groups_spellings_as_pinned(a, b, one_setting, same_param):
    def setting(value):
        return setting_of({} if value is None else {"dataset": value})

    assert (setting(a) == setting(b)) is one_setting
    assert codec.same_param(a, b) is same_param


def test_runs_of_other_data_or_epochs_are_never_mixed(tracking, tmp_path):
    ids = [
        _record("static", 0, 0.640, FASHION),
        _record("static", 0, 0.990, DIGITS),  # the example: once averaged to 81.50%
        _record("dynamic-default", 0, 0.650, FASHION),
        _record("dynamic-default", 1, 0.970, DIGITS),  # paired with nothing: no digits seed 1
        _record("dynamic-late", 0, 0.600, {**FASHION, "epochs": "6"}),  # static only at 12 epochs
    ]
    runs_df, histories, events = collect_runs(ids)
    paths = build_report(runs_df, histories, events, tmp_path / "report")
    comp = pd.read_csv(paths.comparison_csv, keep_default_na=False).set_index(["group", "metric"])
    acc = comp.xs("test/acc", level="metric")

    # Two static rows, each its own run: nothing averaged across datasets.
    static = acc[acc["variant"] == "static"]
    assert sorted(static["mean"].astype(float)) == pytest.approx([0.640, 0.990])
    assert set(static["n"].astype(int)) == {1}
    assert len(set(acc["setting"])) == 3  # fashion 12 epochs, digits, fashion 6 epochs

    # Each variant is paired with the static run of its own setting only.
    fashion = acc[(acc["variant"] == "dynamic-default") & acc["setting"].str.contains("fashion")].iloc[0]
    assert fashion["baseline"] == next(g for g in static.index if "fashion-mnist" in g and "epochs 12" in g)
    assert float(fashion["mean_diff"]) == pytest.approx(0.010)
    digits = acc[(acc["variant"] == "dynamic-default") & acc["setting"].str.contains("digits")].iloc[0]
    assert "digits" in digits["baseline"] and int(digits["n_pairs"]) == 0  # other seed: no pair

    # Unpaired, and the report says which parameter differs from the static runs that exist.
    late = acc[acc["variant"] == "dynamic-late"].iloc[0]
    assert late["baseline"] == "" and "epochs 6 vs 12" in late["note"]

    md = paths.report_md.read_text(encoding="utf-8")
    assert "81.50" not in md
    assert "fall into 3 settings that cannot be compared" in md
    assert "## Settings" in md and "folder:/data/digits" in md
    lines = [line for line in md.splitlines() if line.startswith("- **all")]
    assert len(lines) == 3  # one conclusion per setting, never a best across datasets


def test_one_setting_keeps_plain_labels(tracking, tmp_path):
    ids = [_record("static", s, 0.8 + s / 100, FASHION) for s in range(2)]
    ids += [_record("dynamic-default", s, 0.81 + s / 100, FASHION) for s in range(2)]
    paths = build_report(*collect_runs(ids), tmp_path / "report")
    comp = pd.read_csv(paths.comparison_csv, keep_default_na=False)
    assert set(comp["group"]) == {"static", "dynamic-default"}
    assert set(comp.loc[comp["group"] == "dynamic-default", "baseline"]) == {"static"}


def _record_costs(variant: str, seed: int, acc: float, seconds: float, flops: float) -> str:
    entry_point = "train_static" if variant == "static" else "train_dynamic"
    tags = {"entry_point": entry_point, "variant": variant, "final_spec": SPEC}
    now = int(time.time() * 1000)
    metrics = {"test/acc": acc, "time/total_s": seconds, "train/flops_cumulative": flops}
    with mlflow.start_run(tags=tags) as run:
        mlflow.MlflowClient().log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in {**FASHION, "seed": str(seed)}.items()],
        )
    return run.info.run_id


def test_the_conclusion_opens_with_the_answer_on_both_axes(tracking, tmp_path):
    """#13: cost ratios and the accuracy difference at equal epochs, each with CI and verdict."""
    ids = []
    seeds = [(0.90, 0.905, 100, 48), (0.91, 0.905, 110, 56), (0.92, 0.93, 90, 45)]
    for seed, (acc, dyn_acc, s, dyn_s) in enumerate(seeds):
        ids.append(_record_costs("static", seed, acc, s, 1e12))
        ids.append(_record_costs("dynamic-default", seed, dyn_acc, dyn_s, 4e11 * (1 + seed / 100)))
    paths = build_report(*collect_runs(ids), tmp_path / "report")
    md = paths.report_md.read_text(encoding="utf-8")
    first = md.split("## Conclusion\n", 1)[1].split("\n- ", 1)[1].splitlines()[0]
    assert first.startswith("**dynamic-default** vs static (3 seeds paired): training wall-clock 0.50×")
    assert "(95% CI 0.4" in first and "): faster; training FLOPs 0.40× (95% CI" in first
    assert "cheaper; test accuracy +0.33 pp (95% CI -1.56 pp to +2.23 pp)" in first
    assert first.endswith("within noise at equal training length.")
    assert md.index(first) < md.index("- **all**")  # detail follows the answer

    comp = pd.read_csv(paths.comparison_csv).set_index(["group", "metric"])
    row = comp.loc[("dynamic-default", "time/total_s")]
    ratios = np.array([48 / 100, 56 / 110, 45 / 90])
    assert row["paired_ratio"] == pytest.approx(np.exp(np.log(ratios).mean()))
    assert row["ratio_ci_low"] < row["paired_ratio"] < row["ratio_ci_high"] < 1


def test_each_recipe_default_is_the_option_default_as_a_run_logs_it():
    # a run from before an option existed groups with a new run that left it at its default
    import dataclasses

    from pipeline.report.runs import RECIPE_DEFAULTS, _canonical
    from pipeline.training.config import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for key, before in RECIPE_DEFAULTS.items():
        assert _canonical(before) == _canonical(codec.param_text(defaults[key])), key


def test_a_spec_logged_before_convbn_had_an_activation_keys_as_one_logged_after():
    from models.spec import resolve_spec
    from pipeline.report.groups import spec_key

    now = resolve_spec("resnet-short", (3, 32, 32), 10).to_dict()
    before = json.loads(json.dumps(now))
    for layer in before["layers"]:
        layer.pop("activation", None)
    assert any(layer["type"] == "convbn" for layer in before["layers"])
    assert spec_key(json.dumps(before)) == spec_key(json.dumps(now))
    gelu = json.loads(json.dumps(now))
    gelu["layers"][0]["activation"] = "gelu"
    assert spec_key(json.dumps(gelu)) != spec_key(json.dumps(now))
    assert spec_key('{"not": "a spec"}') == '{"not": "a spec"}'  # kept as logged

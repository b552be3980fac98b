"""User text that reaches an MLflow filter string: run names, study names and tag filters with
apostrophes, double quotes, backslashes and LIKE's wildcards, through the real entry points on a
small subset. MLflow's filter grammar has no escape; a name it cannot quote is matched in Python."""

from __future__ import annotations

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import evaluate, score_difficulty, study, train_dynamic, train_static, tune
from pipeline.tracking.filters import literal

pytestmark = pytest.mark.slow

NAMES = ["bob's run", 'say "hi"', "back\\slash", "both ' and \"", "100%_x"]
TINY = ["--subset", "200", "--epochs", "2"]


def test_literal_quotes_what_can_be_quoted():
    assert literal("plain") == "'plain'"
    assert literal("bob's") == '"bob\'s"'
    assert literal('say "hi"') == "'say \"hi\"'"
    assert literal("both ' and \"") is None


def _names(entry_point: str) -> list[str]:
    runs = mlflow.search_runs(
        search_all_experiments=True, filter_string=f"tags.entry_point = '{entry_point}'", output_format="list"
    )
    return sorted(r.info.run_name for r in runs)


@pytest.mark.parametrize(
    ("command", "entry_point", "extra"),
    [
        (train_static.main, "train_static", ["--spec", "tiny"]),
        (train_dynamic.main, "train_dynamic", ["--start-spec", "tiny", "--schedule", "1:dropout(0.1)"]),
        (score_difficulty.main, "score_difficulty", []),
    ],
)
def test_run_names_with_quotes_are_kept_and_made_unique(tracking, command, entry_point, extra):
    runner = CliRunner()
    if entry_point == "train_dynamic":
        assert runner.invoke(score_difficulty.main, ["--subset", "200", "--epochs", "1"]).exit_code == 0
    for name in [*NAMES, NAMES[0]]:
        args = [*TINY, *extra, "--run-name", name] if entry_point != "score_difficulty" else [
            "--subset", "200", "--epochs", "1", "--run-name", name
        ]  # fmt: skip
        result = runner.invoke(command, args)
        assert result.exit_code == 0, result.output
    assert _names(entry_point) == sorted([*NAMES, f"{NAMES[0]}-2"])


def test_a_tag_filter_with_quotes_picks_exactly_its_runs(tracking):
    runner = CliRunner()
    assert runner.invoke(score_difficulty.main, ["--subset", "200", "--epochs", "1"]).exit_code == 0
    ids = {}
    for name in NAMES:
        result = runner.invoke(train_static.main, [*TINY, "--spec", "tiny", "--run-name", name])
        assert result.exit_code == 0, result.output
        (run,) = mlflow.search_runs(
            search_all_experiments=True,
            order_by=["attributes.start_time DESC"],
            max_results=1,
            output_format="list",
        )
        mlflow.MlflowClient().set_tag(run.info.run_id, "variant_note", name)
        ids[name] = run.info.run_id
    for name in NAMES:
        result = runner.invoke(evaluate.main, ["--tag-filter", f"variant_note={name}"])
        assert result.exit_code == 0, result.output
        evaluated = [r for r in ids.values() if "test/acc" in mlflow.get_run(r).data.metrics]
        assert ids[name] in evaluated
    bad = runner.invoke(evaluate.main, ["--tag-filter", "a`b=c"])
    assert bad.exit_code == 2 and "key=value" in bad.output


def test_tune_takes_names_with_quotes(tracking):
    runner = CliRunner()
    for name in NAMES[:4]:
        args = [*TINY, "--n-trials", "1", "--pruner", "none", "--study-name", name, "--run-name", name]
        result = runner.invoke(tune.main, [*args, "--start-spec", "tiny", "--pacings", "none"])
        assert result.exit_code == 0, result.output
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    parents = sorted(r.info.run_name for r in runs if r.data.tags.get("tune_role") == "study")
    trials = {r.info.run_name for r in runs if r.data.tags.get("tune_role") == "trial"}
    assert parents == sorted(NAMES[:4]) and trials == {f"tune-{name}-trial-0" for name in NAMES[:4]}


def test_a_study_name_with_quotes_works(tracking):
    runner = CliRunner()
    name = 'bob\'s "study"'
    args = [*TINY, "--seeds", "5", "--budgets", "epochs", "--study-name", name]
    args += ["--start-spec", "tiny", "--schedule", "1:dropout(0.1)"]
    result = runner.invoke(study.main, args)
    assert result.exit_code == 0, result.output
    again = runner.invoke(study.main, args)
    assert again.exit_code == 0 and "2 finished, 0 under way, 0 queued" in again.output

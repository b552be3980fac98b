"""Benchmark: test accuracy against training cost, static against the default dynamic variant.

    .venv/bin/python scripts/bench_frontier.py                    # seeds 100-104, full data

Growth papers state their gains at equal compute: the time a growing network saves can buy
more training. This trains, per seed and side by side (arms in a random order per seed):

- ``static``: train_static on the default spec at budgets of ``--fractions`` (1/4, 1/2, 3/4, 1,
  3/2) of the static 12-epoch run's training FLOPs (so 3, 6, 9, 12 and 18 epochs);
- ``dynamic``: train_dynamic (default schedule and curriculum) at the same FLOPs budgets: its
  cheaper epochs buy more of them, and its schedule, curriculum and learning rate scale with
  the epochs the budget buys (``--budget``);
- ``dynamic-12ep``: train_dynamic at the static run's 12 epochs (the equal-epochs comparison);
- ``dynamic-same-time``: train_dynamic given the seconds that trained of the same seed's static-12
  run (``--budget run:ID:s``): the comparison at equal seconds, on this machine.

``--reuse a.json,b.json`` takes the runs of earlier outputs as they are and trains only the
missing arms, so one frontier can be trained in parts (two processes with one thread each) and
joined: with nothing missing, only the summary and the plot are written. ``--dynamic-fractions``
gives the dynamic arm its own budgets; ``--lever`` names a set of options from
``scripts/bench_levers.py`` (a recipe for both arms, curriculum and growth options for the
dynamic one), chosen there on the tuning seeds.

Every run is evaluated on the test split through ``evaluate`` (the pipeline's own step). The
output (``--output-dir``: ``frontier.json``, ``frontier.png``) holds per arm and budget the mean
test accuracy with its 95% interval over seeds, mean seconds that trained (``train_s``: the step,
growth and the diet, what ``--budget Ns`` counts; rows from before then, the epoch loop with its
validation) and training FLOPs, and prints

(a) the wall-clock ratio at which dynamic first reaches static-12's mean test accuracy (linear
    interpolation along dynamic's mean frontier; the FLOPs ratio beside it);
(b) the paired test-accuracy difference dynamic - static-12 at static-12's wall-clock, with its
    CI: the same-time arm's; without it, the largest dynamic FLOPs budget whose mean training
    time is no more than static-12's (the minimal network's epochs cost more time per FLOP on
    CPU, so equal FLOPs is not equal time); every dynamic budget's difference and time ratio is in the JSON;
(c) the same at equal epochs (dynamic-12ep against static-12), with the wall-clock ratio;
(d) at each budget both arms trained at, dynamic against static given the same FLOPs;
(e) per difficulty tier of the test split, each arm and budget against static-12, with its test
    loss: where a budget moves accuracy between tiers while the whole stays flat;
(f) the equal-epochs dynamic run against static given the smallest budget below static-12's
    whose FLOPs are no fewer than the grown network spent (with ``--fractions 0.5,1``, static at 6
    epochs): the 12-epoch run's accuracy at about its own cost, static not short-changed.

``frontier.json`` is rewritten as each run finishes, marked ``"complete": false`` until the
summary is in: if the benchmark stops part-way, ``--reuse`` of that file keeps every run that
finished (those not yet evaluated are evaluated then) and trains only the rest.

score_difficulty's cost (which the dynamic arms' curriculum needs) is reported beside, charged
to one run and amortised over the benchmark's dynamic runs. Seeds 0-2 chose the defaults and
are refused. Wall-clock comparisons hold only within one machine: the JSON records which.
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import sys
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.spec import resolve_spec
from pipeline import evaluate, train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.device import pick_device
from pipeline.report.stats import paired_test, summary
from pipeline.run.length import static_training_flops
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig
from pipeline.training.timing import trained_s
from scripts.bench_common import (
    REFERENCE_EPOCHS,
    REPORT_SEEDS,
    TUNING_SEEDS,
    machine,
    points,
    scores_with_cost,
    warm_up,
    write_json,
)
from scripts.bench_frontier_figure import plot
from scripts.bench_frontier_findings import health_counts, print_findings
from scripts.bench_frontier_tiers import by_tier, test_by_tier
from scripts.bench_levers import LEVERS, before, dynamic_recipe, grown_into


def run_one(call) -> dict:
    outcome = call()
    run = mlflow.get_run(mlflow.last_active_run().info.run_id)  # with the tags logged at its end
    return {
        "run_id": run.info.run_id,
        "health": run.data.tags.get("health", ""),
        "growth_dip": run.data.metrics.get("growth/dip_worst"),
        "epochs": outcome.state.epoch,
        "val_acc": outcome.state.history[-1]["val/acc"],
        "train_s": trained_s(outcome.state.time_parts),  # what a seconds budget counts
        "wall_s": outcome.state.cumulative_s,  # the epoch loop with its validation passes
        "trained_share": run.data.metrics.get("time/trained_share"),
        "budget_used_fraction": run.data.metrics.get("budget/used_fraction"),
        "flops": outcome.state.cumulative_train_flops,
        "stop_reason": outcome.state.stop_reason,
        "loadavg_before": list(os.getloadavg()),
    }


def reused_runs(
    paths: str, lever: str, subset: int, dataset: str = "fashion-mnist", static_spec: str = "default"
) -> tuple[dict[tuple, dict], list[dict]]:
    """(seed, arm, fraction) -> the row of earlier frontier.json files (comma-separated), each
    evaluated there already; and the files themselves. Two files holding one cell is an error.

    A file of another lever gives only its static runs, and only with this one's recipe (options of
    both arms) and static network (older files: default, on Fashion-MNIST): a lever that changes
    the dynamic run alone shares its static frontier with the default."""
    rows, files = {}, []
    for path in filter(None, paths.split(",")):
        earlier = json.loads(Path(path).read_text())
        name = earlier["lever"]["name"]
        same_static = earlier["lever"]["options"][0] == LEVERS[lever][0]
        same_static &= earlier.get("static_spec", "default") == static_spec
        data = earlier.get("dataset", "fashion-mnist")
        if (earlier["subset"], data) != (subset, dataset) or not (name == lever or same_static):
            raise click.UsageError(
                f"--reuse {path}: lever {name}, subset {earlier['subset']}, {data}; this run has lever "
                f"{lever}, subset {subset}, {dataset} (another lever's static runs need its recipe, network)"
            )
        same_dynamic = before(earlier["lever"]).items() >= dynamic_recipe(lever).items()
        for r in earlier["runs"]:
            if (name != lever or not same_dynamic) and r["arm"] != "static":
                continue
            key = (r["seed"], r["arm"], r["fraction"])
            if key in rows and rows[key]["run_id"] != r["run_id"]:
                raise click.UsageError(f"--reuse: seed {key[0]} {key[1]} at {key[2]:g} is in two files")
            rows[key] = r
        files.append(earlier)
    return rows, files


def cheapest_static_covering(static: list[dict], flops: float) -> float | None:
    """The smallest static budget below static-12 whose mean FLOPs are at least ``flops``: the
    cost at which static, given no less compute, is set against a dynamic run; None if none."""
    covering = [p["fraction"] for p in static if p["fraction"] < 1.0 and p["flops"]["mean"] >= flops]
    return min(covering, default=None)


def first_match(times: list[float], accs: list[float], target: float) -> float:
    """The first cost at which the piecewise-linear frontier (times ascending) reaches ``target``."""
    for i, (t, a) in enumerate(zip(times, accs)):
        if a >= target:
            if i == 0:
                return t
            t0, a0 = times[i - 1], accs[i - 1]
            return t0 + (t - t0) * (target - a0) / (a - a0)
    return float("nan")


@click.command()
@click.option("--seeds", default=REPORT_SEEDS, show_default=True, help="seeds to report (not 0-2)")
@click.option("--fractions", default="0.25,0.5,0.75,1,1.5", show_default=True, help="of static-12's FLOPs")
@click.option(
    "--dynamic-fractions", default="", help="the dynamic arm's, if not --fractions; 'none': no such arm"
)
@click.option(
    "--same-time/--no-same-time",
    default=True,
    show_default=True,
    help="also train dynamic for each seed's static-12 seconds (--budget run:ID:s)",
)
@click.option(
    "--lever",
    default="base",
    show_default=True,
    help=f"options of both arms (recipe) and of the dynamic one, from bench_levers: {', '.join(LEVERS)}",
)
@click.option(
    "--dataset", default="fashion-mnist", show_default=True, help="or folder:PATH (folder, archive)"
)
@click.option("--subset", default=0, show_default=True, help="0: the whole dataset")
@click.option("--data-dir", default="", help="where the dataset files are")
@click.option("--scores-run", default="", help="reuse this score_difficulty run")
@click.option("--output-dir", default="reports/frontier", show_default=True)
@click.option(
    "--reuse",
    default="",
    help="previous frontier.json files, comma-separated (same lever and data; another lever's with "
    "the same recipe lend their static runs): their runs are taken as they are and only the "
    "missing arms train; with none missing, only the summary and plot are rewritten",
)
def main(
    seeds: str,
    fractions: str,
    dynamic_fractions: str,
    same_time: bool,
    lever: str,
    dataset: str,
    subset: int,
    data_dir: str,
    scores_run: str,
    output_dir: str,
    reuse: str,
) -> None:
    seed_list = [int(s) for s in seeds.split(",")]
    if lever not in LEVERS:
        raise click.UsageError(f"--lever {lever!r}: use one of {', '.join(LEVERS)}")
    recipe, curriculum_options, growth_options, dynamic_only = LEVERS[lever]
    if set(seed_list) & set(TUNING_SEEDS):
        raise click.UsageError(f"--seeds {seeds}: seeds {TUNING_SEEDS} chose the defaults; report on others")
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_frontier")
    data_cfg = DataConfig(dataset=dataset, subset=subset, data_dir=data_dir)
    data = load_data(data_cfg)
    start = resolve_spec(growth_options.get("start_spec", "minimal"), data.input_shape, data.num_classes)
    final = grown_into(start, growth_options.get("schedule", "default"), data)
    static_12 = static_training_flops(final, data, REFERENCE_EPOCHS)
    shares = [float(f) for f in fractions.split(",")]
    text = dynamic_fractions or fractions
    dynamic_shares = [] if text == "none" else [float(f) for f in text.split(",")]
    if 1.0 not in shares:
        raise click.UsageError(f"--fractions {fractions}: include 1 (static-12, the reference)")
    previous, reused_files = reused_runs(reuse, lever, subset, dataset, final.name)
    arms = [("static", f) for f in shares] + [("dynamic", f) for f in dynamic_shares]
    arms += [("dynamic-12ep", 1.0)] + ([("dynamic-same-time", 1.0)] if same_time else [])
    to_train = [(seed, *arm) for seed in seed_list for arm in arms if (seed, *arm) not in previous]
    if to_train:
        warm_up(data, [start, final])
        scores_run, scoring = scores_with_cost(data_cfg, data, scores_run)
    else:  # a summary of earlier files: the scoring they charged is the one to report
        scoring = reused_files[0]["score_difficulty"]
    quiet = RunConfig(progress=False)
    static_cfg = train_static.StaticConfig(spec=final.to_json())
    runs, evaluate_runs = [], []
    # each reused file names its own evaluate runs and those it reused in turn
    reused_evaluations = [i for f in reused_files for i in re.findall(r"\b[0-9a-f]{32}\b", f["accuracy"])]
    lever_entry = {"name": lever, "options": LEVERS[lever], **dynamic_recipe(lever)}

    def accuracy() -> str:
        """Where the rows' test accuracy comes from: every evaluate run behind them."""
        named = ", ".join(dict.fromkeys(evaluate_runs + reused_evaluations))
        return f"test split through evaluate (runs {named})" if named else ""

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    where = {"device": str(pick_device("auto")), "platform": platform.platform(), "machine": machine()}
    where = where if to_train else {k: reused_files[0][k] for k in where}  # a summary's: its files'

    def save_partial() -> None:
        """What --reuse needs to resume from here, before the summary: the runs so far."""
        partial = {"complete": False, "lever": lever_entry, "subset": subset, **where}
        partial |= {"dataset": dataset, "static_spec": final.name} if dataset != "fashion-mnist" else {}
        partial |= {"score_difficulty": scoring, "accuracy": accuracy(), "runs": runs}
        write_json(out / "frontier.json", partial)

    for seed in seed_list:
        order = list(arms)
        random.Random(seed).shuffle(order)
        if same_time:  # it needs this seed's static-12 run: move it just after that one if before
            order.remove(("dynamic-same-time", 1.0))
            at = max(order.index(("static", 1.0)) + 1, random.Random(seed).randint(0, len(order)))
            order.insert(at, ("dynamic-same-time", 1.0))
        static_12_run = ""
        for arm, share in order:
            if (seed, arm, share) in previous:
                row = previous[(seed, arm, share)]
                static_12_run = row["run_id"] if (arm, share) == ("static", 1.0) else static_12_run
                runs.append(row)
                continue
            budget = {"dynamic-12ep": "", "dynamic-same-time": f"run:{static_12_run}:s"}.get(
                arm, f"{share * static_12:.17g}flops"
            )
            train = TrainConfig(
                epochs=REFERENCE_EPOCHS,
                seed=seed,
                budget=budget,
                **recipe,
                **({} if arm == "static" else dynamic_only),
            )
            if arm == "static":
                call = lambda train=train: train_static.run(
                    data_cfg, train, static_cfg, CurriculumConfig(scores_run=scores_run), quiet
                )
            else:
                call = lambda train=train: train_dynamic.run(
                    data_cfg,
                    train,
                    GrowthConfig(**growth_options),
                    DynamicCurriculumConfig(scores_run=scores_run, **curriculum_options),
                    quiet,
                )
            row = {"seed": seed, "arm": arm, "fraction": share, "budget": budget, **run_one(call)}
            if (arm, share) == ("static", 1.0):
                static_12_run = row["run_id"]
            runs.append(row)
            save_partial()  # before the line that says it finished
            print(json.dumps(row), flush=True)
    trained = [r for r in runs if "test_acc" not in r]
    if trained:
        evaluate_run = evaluate.run(evaluate.EvaluateConfig(runs=",".join(r["run_id"] for r in trained)))
        client = mlflow.MlflowClient()
        for row in trained:
            metrics = client.get_run(row["run_id"]).data.metrics
            row["test_acc"] = metrics["test/acc"]
            row["test_tiers"] = test_by_tier(metrics)
        evaluate_runs.append(evaluate_run)
        save_partial()

    def cell(arm: str, share: float) -> list[dict]:
        return sorted(
            (r for r in runs if r["arm"] == arm and r["fraction"] == share), key=lambda r: r["seed"]
        )

    frontier = {
        arm: [
            {
                "fraction": share,
                **{
                    k: summary([r[k] for r in cell(arm, share)])
                    for k in ("test_acc", "train_s", "flops", "epochs")
                },
            }
            for share in {"static": shares, "dynamic": dynamic_shares}.get(arm, [1.0])
        ]
        for arm in ("static", "dynamic", "dynamic-12ep", *(["dynamic-same-time"] if same_time else []))
    }
    reference = next(p for p in frontier["static"] if p["fraction"] == 1.0)
    target = reference["test_acc"]["mean"]
    # The equal-epochs run is one more point of dynamic's frontier (its cost is what it spent).
    dyn = sorted(
        frontier["dynamic"] + frontier["dynamic-12ep"] + frontier.get("dynamic-same-time", []),
        key=lambda p: p["train_s"]["mean"],
    )
    matched_s = first_match([p["train_s"]["mean"] for p in dyn], [p["test_acc"]["mean"] for p in dyn], target)
    dyn_f = sorted(dyn, key=lambda p: p["flops"]["mean"])
    matched_f = first_match(
        [p["flops"]["mean"] for p in dyn_f], [p["test_acc"]["mean"] for p in dyn_f], target
    )
    acc = lambda arm, share: [r["test_acc"] for r in cell(arm, share)]
    time_ratio = lambda arm, share: [
        d["train_s"] / s["train_s"] for d, s in zip(cell(arm, share), cell("static", 1.0))
    ]
    # Each dynamic budget against static-12, paired by seed: accuracy and wall-clock ratio.
    per_share = {
        share: {
            "test": paired_test(acc("dynamic", share), acc("static", 1.0)),
            "wallclock_ratio": summary(time_ratio("dynamic", share)),
        }
        for share in dynamic_shares
    }

    # (d) each budget both arms trained at: dynamic against static given the same FLOPs, paired
    # by seed; their time ratio compares runs trained in the same invocation, under one load.
    # Each arm plans whole epochs, so each spends a different share of the budget: the FLOPs
    # ratio says how much (at 1/8, one static epoch is two thirds of it).
    def ratio(share: float, key: str) -> dict:
        return summary([d[key] / s[key] for d, s in zip(cell("dynamic", share), cell("static", share))])

    at_budget = {
        share: {
            "test_points": points(paired_test(acc("dynamic", share), acc("static", share))),
            "wallclock_ratio": ratio(share, "train_s"),
            "flops_ratio": ratio(share, "flops"),
        }
        for share in dynamic_shares
        if share in shares
    }
    # (b) is stated at static-12's wall-clock: each seed's own seconds (the same-time arm), else
    # the largest FLOPs budget whose mean time is no more.
    if same_time:
        per_share["same-time"] = {
            "test": paired_test(acc("dynamic-same-time", 1.0), acc("static", 1.0)),
            "wallclock_ratio": summary(time_ratio("dynamic-same-time", 1.0)),
        }
        at_share = "same-time"
    elif dynamic_shares:
        within = [s for s in dynamic_shares if per_share[s]["wallclock_ratio"]["mean"] <= 1.0]
        at_share = max(within) if within else min(dynamic_shares)
    else:  # --no-same-time --dynamic-fractions none: no dynamic run near static-12's cost
        at_share = None
    at_cost = per_share[at_share]["test"] if at_share is not None else None
    at_epochs = paired_test(acc("dynamic-12ep", 1.0), acc("static", 1.0))
    time_12 = [d["train_s"] / s["train_s"] for d, s in zip(cell("dynamic-12ep", 1.0), cell("static", 1.0))]
    # (f) the 12-epoch grown network against static given about its cost, and no less.
    f_share = cheapest_static_covering(frontier["static"], frontier["dynamic-12ep"][0]["flops"]["mean"])
    against_cost = None
    if f_share is not None:
        pairs = list(zip(cell("dynamic-12ep", 1.0), cell("static", f_share)))
        against_cost = {
            "static_fraction": f_share,
            "test_points": points(paired_test(acc("dynamic-12ep", 1.0), acc("static", f_share))),
            "wallclock_ratio": summary([d["train_s"] / s["train_s"] for d, s in pairs]),
            "flops_ratio": summary([d["flops"] / s["flops"] for d, s in pairs]),
        }
    n_dynamic = sum(r["arm"] != "static" for r in runs)
    result = {
        "complete": True,
        "seeds": seed_list,
        "seeds_that_chose_the_defaults": list(TUNING_SEEDS),
        **where,
        "subset": subset,
        **({"dataset": dataset, "static_spec": final.name} if dataset != "fashion-mnist" else {}),
        "health": health_counts(runs),
        "static_12_flops": static_12,
        "accuracy": accuracy(),
        "clock": "seconds that trained (pipeline/training/timing.py); rows without wall_s: the epoch loop",
        "score_difficulty": scoring,
        "score_difficulty_amortised_per_dynamic_run": {
            "seconds": scoring["seconds"] / n_dynamic,
            "flops": scoring["flops"] / n_dynamic,
        },
        "frontier": frontier,
        "a_wallclock_ratio_to_match_static_12": matched_s / reference["train_s"]["mean"],
        "a_flops_ratio_to_match_static_12": matched_f / reference["flops"]["mean"],
        "lever": lever_entry,
        "b_dynamic_flops_share": at_share,
        "b_wallclock_ratio": None if at_share is None else per_share[at_share]["wallclock_ratio"],
        "b_test_points_at_static_12_wallclock": None if at_cost is None else points(at_cost),
        "b_test": at_cost,
        "per_dynamic_budget": {
            str(share): {
                "test_points": points(v["test"]),
                "wallclock_ratio": v["wallclock_ratio"],
            }
            for share, v in per_share.items()
        },
        "c_test_points_at_equal_epochs": points(at_epochs),
        "c_wallclock_ratio_at_equal_epochs": summary(time_12),
        "d_at_equal_budget": {str(share): v for share, v in at_budget.items()},
        "e_by_tier_against_static_12": by_tier(runs),
        "f_equal_epochs_against_static_at_its_cost": against_cost,
        "runs": runs,
    }
    write_json(out / "frontier.json", result)
    name = "Fashion-MNIST" if dataset == "fashion-mnist" else Path(dataset.partition(":")[2]).name
    title = f"{name} ({subset or 'full'}), lever {lever}, seeds {seeds}, {result['device']}"
    plot(frontier, reference, out / "frontier.png", title, runs)
    print_findings(result)


if __name__ == "__main__":
    main()

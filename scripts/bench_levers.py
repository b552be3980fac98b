"""Benchmark: screen the levers that might make growth end better, on the tuning seeds.

    .venv/bin/python scripts/bench_levers.py --levers base,aug --output reports/levers/a.jsonl

Each lever is a named set of options for the static control and the dynamic run. Per seed
(tuning seeds 0-2 by default: choosing a default is tuning, so it reads the validation split
only; the frontier benchmark reports on other seeds and the test split), it trains

- ``static``: train_static, default spec, 12 epochs, with the lever's recipe options (once per
  recipe: levers that change only the dynamic run share it);
- ``static-diet`` (only when asked): train_static, default spec, 12 epochs, with the lever's
  recipe, curriculum and pruning (tiers and pruning 0.3 unless the lever says otherwise): the
  diet without the growth;
- ``dynamic``: train_dynamic, default schedule and curriculum, with the lever's options, at a
  training-FLOPs budget of ``--share`` times the static 12-epoch run's (0.85: about its
  wall-clock on CPU, where the minimal network's epochs cost more time per FLOP);
- ``static-twin`` (only when asked): train_static on the network the lever's schedule grows
  into, from the start, at the dynamic run's budget: for a lever that grows past the default
  network, the control that says whether the growth or the bigger network wins.

FLOPs budgets make each run's length independent of the machine's load, so two screens may run
side by side (one thread each). Every run appends a JSON line (lever, arm, seed, val/acc,
seconds, FLOPs, epochs) to ``--output``; the summary prints each lever's paired val/acc
difference dynamic - static with its 95% CI.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.schedule import final_spec, parse_schedule
from models.spec import NAMED_SPECS, resolve_spec
from pipeline import train_dynamic, train_static
from pipeline.curriculum import diet
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.report.stats import paired_test
from pipeline.run.length import static_training_flops
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig
from scripts.bench_common import REFERENCE_EPOCHS, TUNING_SEEDS, machine, scores_with_cost

ARMS = ("static", "static-diet", "static-twin", "dynamic")

# The default schedule (everything at a quarter of 12 epochs) plus a second residual block at 7x7.
BIGGER_SCHEDULE = (
    "3:conv(64)@after:pool1;3:res1=residual@after:pool2;3:res2=residual@after:res1;3:dropout(0.3)"
)

BN_GROWTH = {"start_spec": "minimal-bn", "schedule": "default-bn"}

# name -> (recipe: TrainConfig options for both arms, DynamicCurriculumConfig options, GrowthConfig
# options, TrainConfig options for the dynamic arm only)
LEVERS: dict[str, tuple[dict, dict, dict, dict]] = {
    "base": ({}, {}, {}, {}),
    # The default diet until CIFAR-10 (issue 35): the easy examples retire at the first growth.
    # Rows of `base` measured before then trained this.
    "retire": ({}, {"retire_easy": True}, {}, {}),
    # Batchnorm in every conv layer, both arms (issue 35): static trains default-bn, the dynamic
    # run grows minimal-bn into it; growth inserts conv2 as a calibrated identity.
    "bn": ({}, {}, BN_GROWTH, {}),
    # The easy examples never retire (as `keep` below), with batchnorm.
    "bn+keep": ({}, {"tier_boundaries": "1,2", "prune_from": 3}, BN_GROWTH, {}),
    # Growth alone, with batchnorm: no curriculum, no pruning; on CIFAR-10 the default diet
    # (the easy tier retired at the growth epoch) took training accuracy to 0.14 (issue 35).
    "bn-growth": ({}, {"pacing": "none", "prune": 0.0}, BN_GROWTH, {}),
    "aug": ({"augment": "flip+shift"}, {}, {}, {}),
    "smooth": ({"label_smoothing": 0.1}, {}, {}, {}),
    "aug+smooth": ({"augment": "flip+shift", "label_smoothing": 0.1}, {}, {}, {}),
    "rejoin": ({}, {"rejoin": 0.25}, {}, {}),
    "rejoin0.5": ({}, {"rejoin": 0.5}, {}, {}),
    "aug+rejoin": ({"augment": "flip+shift"}, {"rejoin": 0.25}, {}, {}),
    "rewarm": ({}, {}, {}, {"growth_rewarm": 0.05}),
    "aug+rewarm": ({"augment": "flip+shift"}, {}, {}, {"growth_rewarm": 0.05}),
    "early": ({}, {}, {"schedule": "early"}, {}),
    # The easy examples never retire: medium and hard join on the tiers' way to the first
    # growth (as by default), and from it on the grown network trains on every example, with
    # loss-aware pruning from the growth (as by default) for the saving.
    "keep": ({}, {"tier_boundaries": "1,2", "prune_from": 3}, {}, {}),
    "keep+smooth": ({"label_smoothing": 0.1}, {"tier_boundaries": "1,2", "prune_from": 3}, {}, {}),
    # `keep`, growing within the first quarter (events at 1/12, 2/12 and 3/12 of training):
    # does the grown network lose to a fresh one because it starts from a network trained
    # too long on its own (warm starting, Ash & Adams 2020)?
    "keep+early": ({}, {"tier_boundaries": "1,2", "prune_from": 3}, {"schedule": "early"}, {}),
    # New layers start as random layers instead of as identities (function-preserving growth):
    # does the grown network's ceiling come from the start network's basin? (The default since
    # issue 35; `identity` is the start it replaced.)
    "random-init": ({}, {}, {"growth_init": "random"}, {}),
    "identity": ({}, {}, {"growth_init": "preserve"}, {}),
    "keep+random-init": ({}, {"tier_boundaries": "1,2", "prune_from": 3}, {"growth_init": "random"}, {}),
    # The new layers start near the identity, not on it: Net2Net's noise at one and three
    # times a fresh layer's init scale. Does an exact identity hold the grown network in the
    # small network's basin (half of conv2's channels copying conv1's)?
    "noise1": ({}, {}, {"growth_init": "preserve", "growth_noise": 1.0}, {}),
    "noise3": ({}, {}, {"growth_init": "preserve", "growth_noise": 3.0}, {}),
    "keep+aug+smooth": (
        {"augment": "flip+shift", "label_smoothing": 0.1},
        {"tier_boundaries": "1,2", "prune_from": 3},
        {},
        {},
    ),
    "aug+early": ({"augment": "flip+shift"}, {}, {"schedule": "early"}, {}),
    # Both arms validate and keep an average of their weights (--ema-decay 0.999: about the last
    # 1,000 steps, two to three epochs), which a run's late wandering between the medium and
    # hard examples might leave better than its last step. The dynamic run has twice static's
    # epochs to average over.
    "ema": ({"ema_decay": 0.999}, {}, {}, {}),
    "rejoin+ema": ({"ema_decay": 0.999}, {"rejoin": 0.25}, {}, {}),
    # Random erasing on both arms (Zhong et al. 2020). A regulariser that may keep longer
    # training useful: static-12 is saturated by 9 epochs without it, and the dynamic run's
    # cheap epochs buy it twice as many.
    "erase": ({"augment": "erase"}, {}, {}, {}),
    "erase+rejoin": ({"augment": "erase"}, {"rejoin": 0.25}, {}, {}),
    # Twice the default weight decay (5e-4) on both arms, the last recipe option the issue names:
    # past 9 epochs static-12's test loss climbs while its accuracy holds (it grows confident
    # on examples it gets wrong), and the dynamic run at static's cost trains twice the epochs.
    "wd1e-3": ({"weight_decay": 1e-3}, {}, {}, {}),
    # The two recipe options that lifted the dynamic run most, together: the strongest recipe,
    # the "a stronger recipe with more epochs may favour growth".
    "erase+wd1e-3": ({"augment": "erase", "weight_decay": 1e-3}, {}, {}, {}),
    # Stronger still: each step from plain to erasing to erasing with twice the decay narrowed
    # the gap at static-12's cost (-0.22, -0.15, -0.05 points on the report seeds), so the
    # decay again twice over, 2e-3 (four times the default), on both arms.
    "erase+wd2e-3": ({"augment": "erase", "weight_decay": 2e-3}, {}, {}, {}),
    # The grown layers' own rate (--growth-lr-scale): layers added at a quarter of training miss
    # the cosine schedule's largest part and get 0.26 of the 0.5 its whole integral holds (in
    # units of peak rate x training); twice the rate gives them about as much as the layers that
    # were there from the start. Static has no grown layers, so it is the base static arm.
    "growth-lr2": ({}, {}, {}, {"growth_lr_scale": 2.0}),
    "erase+growth-lr2": ({"augment": "erase"}, {}, {}, {"growth_lr_scale": 2.0}),
    # The other direction, since twice the rate cost accuracy: half. The grown layers start as
    # identities inside a trained network, and a gentler rate keeps them near that function
    # for longer while the rest adapts. With the best recipe so far.
    "erase+wd1e-3+growth-lr0.5": (
        {"augment": "erase", "weight_decay": 1e-3},
        {},
        {},
        {"growth_lr_scale": 0.5},
    ),
    # Mixup (alpha 0.2, the mild setting) on top of the best recipe, both arms. Erasing lifted
    # the dynamic run three times as much as static (+0.71 against +0.23 points), and the
    # reading was that a regulariser which pays only with more epochs favours the arm whose
    # cheap epochs buy twice as many at static's cost; mixup is the textbook such regulariser.
    "erase+wd1e-3+mixup": ({"augment": "erase", "weight_decay": 1e-3, "mixup": 0.2}, {}, {}, {}),
    # Grow past the default network: a second residual block at 7x7 (1.46x the default
    # network's FLOPs per example). Static-12 of the default network is saturated by 9 epochs,
    # so its last epochs buy nothing; at the same cost, growth may afford a bigger network
    # whose ceiling is higher. ``--arms static-twin`` trains that network statically at the
    # same budget, the control for the bigger network itself.
    "res2": ({}, {}, {"schedule": BIGGER_SCHEDULE}, {}),
    # Label noise (--label-noise): an easy-first linear pacing that never uses the hardest
    # third (mostly wrong labels), its random-order control, and the same without pruning
    # (InfoBatch leaves out low-loss examples, which under noise are the clean ones).
    "hold": ({}, {"pacing": "linear", "hold_back": 0.33}, {}, {}),
    "hold-random": ({}, {"pacing": "linear", "order": "random", "hold_back": 0.33}, {}, {}),
    "hold-noprune": ({}, {"pacing": "linear", "hold_back": 0.33, "prune": 0.0}, {}, {}),
    "hold-random-noprune": (
        {},
        {"pacing": "linear", "order": "random", "hold_back": 0.33, "prune": 0.0},
        {},
        {},
    ),
    # Issue 35, the collapses at the growth epoch. The default since then re-warms the rate after
    # growth and starts pruning the epoch after it; before, neither (`neither`, at 12 epochs,
    # where the first growth is epoch 3). Each of the two fixes alone, and what else was tried
    # on the default of that time: pruning off, the gradient's norm clipped.
    "neither": ({}, {"prune_from": 3}, {}, {"growth_rewarm": 0.0}),
    "no-rewarm": ({}, {}, {}, {"growth_rewarm": 0.0}),
    "prune-at-growth": ({}, {"prune_from": 3}, {}, {}),
    "prune-after": ({}, {"prune_from": 4}, {}, {"growth_rewarm": 0.0}),
    "noprune": ({}, {"prune": 0.0}, {}, {"growth_rewarm": 0.0}),
    "clip": ({"clip_grad": 1.0}, {"prune_from": 3}, {}, {"growth_rewarm": 0.0}),
    # Issue 35, the diet on CIFAR-10 with both fixes: growth alone (no curriculum, no pruning),
    # the default diet's random-order control (the same tiers and pruning, tiers drawn at
    # random), and the default diet without its pruning.
    "growth": ({}, {"pacing": "none", "prune": 0.0}, {}, {}),
    "random": ({}, {"order": "random"}, {}, {}),
    "tiers-noprune": ({}, {"prune": 0.0}, {}, {}),
    # Issue 35 item 3, the pacing functions of Wu et al. 2021 on CIFAR-10 with the random start
    # (their defaults: a fifth of the data at the start, all of it from 0.8 of training on),
    # each beside its random-order control (the same number of examples an epoch, drawn at random).
    "linear": ({}, {"pacing": "linear"}, {}, {}),
    "linear-random": ({}, {"pacing": "linear", "order": "random"}, {}, {}),
    "root": ({}, {"pacing": "root"}, {}, {}),
    "root-random": ({}, {"pacing": "root", "order": "random"}, {}, {}),
    # Issue 37: validation at the batch it had before the device's own (128 on the CPU) became
    # the default, to measure the seconds that train side by side.
    "eval1024": ({"eval_batch_size": 1024}, {}, {}, {}),
}


# What a dynamic run did before a default changed, for result files that lack its key: the easy
# tier retired at the first growth, and the rate did not re-warm after growth (the re-warm came
# with pruning's start moving to the epoch after the growth: runs with it prune from there); new
# layers started as identities unless the lever said otherwise (``before``).
DYNAMIC_BEFORE = {"retire_easy": True, "growth_rewarm": 0.0, "growth_init": "preserve"}


def dynamic_recipe(lever: str) -> dict:
    """The dynamic run's choices that older result files predate (``DYNAMIC_BEFORE``), for
    this lever: runs that differ in them are not the same arm."""
    return {
        "retire_easy": diet.retires_easy(DynamicCurriculumConfig(**LEVERS[lever][1])),
        "growth_rewarm": TrainConfig(**{**LEVERS[lever][0], **LEVERS[lever][3]}).growth_rewarm,
        "growth_init": GrowthConfig(**LEVERS[lever][2]).growth_init,
    }


def before(entry: dict) -> dict:
    """What an earlier result file's lever ``entry`` ran, its missing keys read as they were
    before the defaults changed (``DYNAMIC_BEFORE``; a lever that named a growth init ran it)."""
    init = entry["options"][2].get("growth_init", DYNAMIC_BEFORE["growth_init"])
    return {**DYNAMIC_BEFORE, "growth_init": init, **entry}


def grown_into(start, schedule: str, data):
    """The static arm's network: the one the lever's dynamic run grows into, as the named spec
    it equals (default for the default schedule, default-bn for default-bn), so that static
    runs keep their name."""
    grown = final_spec(start, parse_schedule(schedule, REFERENCE_EPOCHS))
    for name in NAMED_SPECS:
        named = resolve_spec(name, data.input_shape, data.num_classes)
        if named.layers == grown.layers:
            return named
    return grown


@click.command()
@click.option("--levers", default="base,aug", show_default=True, help=f"of {', '.join(LEVERS)}")
@click.option("--seeds", default=",".join(map(str, TUNING_SEEDS)), show_default=True)
@click.option("--share", default=0.85, show_default=True, help="dynamic budget, of static-12's FLOPs")
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--label-noise", default=0.0, show_default=True, help="symmetric label-noise rate")
@click.option("--output", default="reports/levers/levers.jsonl", show_default=True)
@click.option(
    "--arms",
    default="static,dynamic",
    show_default=True,
    help="of static, static-diet (the lever's diet without growth), static-twin (the lever's final "
    "network from the start, at the dynamic run's budget) and dynamic",
)
@click.option("--scores-run", default="", help="a finished score_difficulty run to reuse (empty: score here)")
def main(
    levers: str,
    seeds: str,
    share: float,
    subset: int,
    label_noise: float,
    output: str,
    arms: str,
    scores_run: str,
) -> None:
    names = [n.strip() for n in levers.split(",")]
    unknown = [n for n in names if n not in LEVERS]
    if unknown:
        raise click.UsageError(f"--levers: unknown {', '.join(unknown)} (known: {', '.join(LEVERS)})")
    chosen = {a.strip() for a in arms.split(",")}
    if chosen - set(ARMS):
        raise click.UsageError(
            f"--arms: unknown {', '.join(sorted(chosen - set(ARMS)))} (known: {', '.join(ARMS)})"
        )
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_levers")
    data_cfg = DataConfig(subset=subset, label_noise=label_noise)
    data = load_data(data_cfg)
    final = resolve_spec("default", data.input_shape, data.num_classes)
    budget = f"{share * static_training_flops(final, data, REFERENCE_EPOCHS):.17g}flops"
    scores_run, _ = scores_with_cost(data_cfg, data, scores_run)
    quiet = RunConfig(progress=False)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []

    def record(lever: str, arm: str, seed: int, outcome) -> dict:
        state = outcome.state
        row = {
            "lever": lever,
            "arm": arm,
            "seed": seed,
            "share": share,
            "subset": subset,
            "label_noise": label_noise,
            "val_acc": state.history[-1]["val/acc"],
            # under noise val/acc reads the noisy labels; this the original ones (not for choosing)
            "val_acc_original": state.history[-1].get("noise/val_acc_original"),
            "train_s": state.cumulative_s,
            "flops": state.cumulative_train_flops,
            "epochs": state.epoch,
            "machine": machine(),
        }
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        done.append(row)
        return row

    def static_network(lever: str):
        """The static arms' network: the one the lever's dynamic run grows into (default-bn for
        the bn levers, default for the others)."""
        growth = LEVERS[lever][2]
        start = resolve_spec(growth.get("start_spec", "minimal"), data.input_shape, data.num_classes)
        return grown_into(start, growth.get("schedule", "default"), data)

    def have(lever: str, arm: str, seed: int, recipe: dict) -> bool:
        return any(
            r["arm"] == arm
            and r["seed"] == seed
            and r["subset"] == subset
            and r.get("label_noise", 0.0) == label_noise
            and (
                LEVERS[r["lever"]][0] == recipe
                and static_network(r["lever"]).name == static_network(lever).name
                if arm == "static"
                else r["lever"] == lever and r["share"] == share
            )
            for r in done
        )

    for seed in (int(s) for s in seeds.split(",")):
        for name in names:
            recipe, curriculum, growth, dynamic_only = LEVERS[name]
            # static: no curriculum. static-diet: the dynamic run's data diet without its
            # growth (the lever's curriculum and pruning on the default network from the
            # start); against static-12 it prices the diet, against the dynamic run the growth.
            diet = {"pacing": "tiers", "prune": DynamicCurriculumConfig().prune, **curriculum}
            statics = {
                "static": CurriculumConfig(),
                "static-diet": CurriculumConfig(scores_run=scores_run, **diet),
            }
            for arm, curriculum_cfg in statics.items():
                if arm in chosen and not have(name, arm, seed, recipe):
                    train = TrainConfig(epochs=REFERENCE_EPOCHS, seed=seed, **recipe)
                    spec = train_static.StaticConfig(spec=static_network(name).to_json())
                    record(name, arm, seed, train_static.run(data_cfg, train, spec, curriculum_cfg, quiet))
            if "static-twin" in chosen and not have(name, "static-twin", seed, recipe):
                growth_cfg = GrowthConfig(**growth)
                start = resolve_spec(growth_cfg.start_spec, data.input_shape, data.num_classes)
                grown = final_spec(start, parse_schedule(growth_cfg.schedule, REFERENCE_EPOCHS))
                train = TrainConfig(epochs=REFERENCE_EPOCHS, seed=seed, budget=budget, **recipe)
                spec = train_static.StaticConfig(spec=grown.to_json())
                outcome = train_static.run(data_cfg, train, spec, CurriculumConfig(), quiet)
                record(name, "static-twin", seed, outcome)
            if "dynamic" in chosen and not have(name, "dynamic", seed, recipe):
                train = TrainConfig(
                    epochs=REFERENCE_EPOCHS, seed=seed, budget=budget, **recipe, **dynamic_only
                )
                record(
                    name,
                    "dynamic",
                    seed,
                    train_dynamic.run(
                        data_cfg,
                        train,
                        GrowthConfig(**growth),
                        DynamicCurriculumConfig(scores_run=scores_run, **curriculum),
                        quiet,
                    ),
                )
    summarise([r for r in done if r.get("label_noise", 0.0) == label_noise], share, subset)


def summarise(rows: list[dict], share: float, subset: int) -> None:
    for name in LEVERS:
        dyn = {
            r["seed"]: r
            for r in rows
            if r["lever"] == name and r["arm"] == "dynamic" and r["share"] == share and r["subset"] == subset
        }
        static = {
            r["seed"]: r
            for r in rows
            if r["arm"] == "static"
            and r["subset"] == subset
            and LEVERS[r["lever"]][0] == LEVERS[name][0]
            # the bn levers' static arm trains default-bn, the others' default
            and LEVERS[r["lever"]][2].get("start_spec") == LEVERS[name][2].get("start_spec")
        }
        seeds = sorted(set(dyn) & set(static))
        if not seeds:
            continue
        d = [dyn[s]["val_acc"] for s in seeds]
        s_ = [static[s]["val_acc"] for s in seeds]
        test = paired_test(d, s_)
        time_ratio = sum(dyn[s]["train_s"] for s in seeds) / sum(static[s]["train_s"] for s in seeds)
        print(
            f"{name:12s} seeds {seeds}: dynamic {' '.join(f'{v:.4f}' for v in d)} | static "
            f"{' '.join(f'{v:.4f}' for v in s_)} | diff {100 * test['mean_diff']:+.2f} pts "
            f"(CI {100 * test['ci_low']:+.2f} to {100 * test['ci_high']:+.2f}), time {time_ratio:.2f}x"
        )
        twin = {
            r["seed"]: r["val_acc"]
            for r in rows
            if (r["lever"], r["arm"], r["share"], r["subset"]) == (name, "static-twin", share, subset)
        }
        if set(seeds) <= set(twin):  # the lever's final network from the start, at the same budget
            against = paired_test(d, [twin[s] for s in seeds])
            print(
                f"{'':12s} static-twin {' '.join(f'{twin[s]:.4f}' for s in seeds)} | dynamic - twin "
                f"{100 * against['mean_diff']:+.2f} pts "
                f"(CI {100 * against['ci_low']:+.2f} to {100 * against['ci_high']:+.2f})"
            )


if __name__ == "__main__":
    main()

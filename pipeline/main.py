"""main: the whole study in one command: score, train static and dynamic variants, evaluate.

    mlflow run . --env-manager local                  # the quick preset (about 13 min on 2 cores)
    mlflow run . --env-manager local -P preset=full   # the full study

Each step is its own MLflow run started through ``mlflow run`` (so ``--env-manager`` reaches
it), and steps talk only through parameters and run ids. A step whose entry point, parameters
(compared as values, so 12, 12.0 and "12" agree), code version, upstream run ids and dataset
digest all match a FINISHED run is not run again: that run is reused, and main says so.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import click
import mlflow
import pandas as pd

from models.schedule import NAMED_SCHEDULES, final_spec, named_schedule
from models.spec import resolve_spec
from pipeline.cli import build_config, config_options, help_text, opt
from pipeline.codec import default_params, flat_params, same_param
from pipeline.curriculum.diet import curriculum_pruning, growth_boundaries, name_label
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.label_noise import check_noise
from pipeline.data.splits import load_data
from pipeline.logged_model import register_champion
from pipeline.precision import PRECISIONS
from pipeline.run_length import static_training_flops
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.errors import Terminated, UpstreamError
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.params import shown_param
from pipeline.tracking.runs import code_version, tracked_run, unique_run_name, wait_closed

ENTRY_POINT = "main"
REPO = Path(__file__).resolve().parents[1]
ENV_MANAGERS = ("local", "virtualenv", "uv", "conda")


class Diet(NamedTuple):
    """A run's data diet: pacing, order and the hardest share held back (``--hold-back``)."""

    pacing: str
    order: str
    hold_back: float = 0.0

    def dynamic_label(self) -> str:
        """The diet's part of a dynamic run's name, with the pruning its pacing goes with."""
        return name_label(self.pacing, self.order, curriculum_pruning(self.pacing), self.hold_back)


# The noise preset's curricula hold back the hardest third (the hard tier's size): the score
# step's loss finds 97% of wrong labels at 40% noise (AUC, 5,000-example probe), and 95% of its
# hard tier is flipped there; a third is a curriculum's choice, not the known noise rate.
NOISE_HOLD_BACK = 0.33


@dataclass(frozen=True)
class Preset:
    subset: int
    epochs: int
    seeds: tuple[int, ...]
    schedules: tuple[str, ...]
    # data diets of the dynamic runs; each schedule runs with every one of them
    curricula: tuple[Diet, ...]
    # diets of the static control; Diet("none", "curriculum") is the matched baseline
    static_curricula: tuple[Diet, ...]
    # diets of dynamic runs given the matched baseline's training seconds of the same seed
    # (--budget run:ID:s): the comparison at equal wall-clock, which the Conclusion states
    equal_cost: tuple[Diet, ...] = ()
    # label-noise rates (each its own data, scores and runs) and their kind
    label_noise: tuple[float, ...] = (0.0,)
    noise_kind: str = "symmetric"
    # besides equal epochs, every run again at the static run's training FLOPs (--budget)
    equal_flops: bool = False


PRESETS = {
    # What the full study finds, small enough for a laptop (12 min 36 s on 2 idle cores, timed
    # whole with scripts/run): the full study's 12 epochs and
    # schedule, so growth, the curriculum's stages and pruning fall where they do there, on
    # 10,000 training examples rather than on short runs (the old preset, 4,000 examples for 6
    # epochs, squeezed growth and the curriculum into too few epochs and showed every curriculum
    # variant 3 points below static). Static, the default dynamic variant, its random-order
    # control and the dynamic variant given static's seconds, three seeds. Its Conclusion points
    # the way the full-data five-seed benchmark does (README, "What we have measured").
    "quick": Preset(
        subset=10000,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=("default",),
        curricula=(Diet("tiers", "curriculum"), Diet("tiers", "random")),
        static_curricula=(Diet("none", "curriculum"),),
        equal_cost=(Diet("tiers", "curriculum"),),
    ),
    # The study: full data, every named schedule with and without the curriculum, both
    # controls, and the curriculum alone on the static network.
    "full": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2),
        schedules=tuple(s for s in NAMED_SCHEDULES if s != "none"),
        curricula=(
            Diet("none", "curriculum"),
            Diet("tiers", "curriculum"),
            Diet("tiers", "random"),
            Diet("tiers", "anti"),
        ),
        static_curricula=(Diet("none", "curriculum"), Diet("tiers", "curriculum")),
        equal_cost=(Diet("tiers", "curriculum"),),
    ),
    # Where curricula are said to shine (Wu et al., ICLR 2021: under 20-60% label noise the
    # easy-to-hard curriculum beat random order by a wide margin): at 0, 20 and 40% symmetric
    # noise, five seeds, at equal epochs and again at the static run's training FLOPs, static;
    # the dynamic run with an easy-first linear pacing that never uses the hardest third (the
    # tiers curriculum retires the easy examples, which under noise leaves a diet of mostly
    # wrong labels: 12 points below static at 40%); its random-order control, which holds
    # back a random third; and static holding back the same hardest third, which tells
    # holding back from ordering and growth. Full data: hours on 2 cores.
    "noise": Preset(
        subset=0,
        epochs=12,
        seeds=(0, 1, 2, 3, 4),
        schedules=("default",),
        curricula=(
            Diet("linear", "curriculum", NOISE_HOLD_BACK),
            Diet("linear", "random", NOISE_HOLD_BACK),
        ),
        static_curricula=(Diet("none", "curriculum"), Diet("none", "curriculum", NOISE_HOLD_BACK)),
        label_noise=(0.0, 0.2, 0.4),
        noise_kind="symmetric",
        equal_flops=True,
    ),
}


@dataclass(frozen=True)
class MainConfig:
    preset: str = opt("quick", "quick (minutes on a laptop), full (the whole study) or noise (label noise)")
    dataset: str = opt("fashion-mnist", "dataset of every step (see train_static --help)")
    data_dir: str = opt("", "where the dataset files are; empty: found automatically")
    seeds: str = opt("", "comma-separated seeds; empty: the preset's")
    epochs: int = opt(0, "training epochs; 0: the preset's")
    subset: int = opt(-1, "stratified examples per split; -1: the preset's, 0: all data")
    env_manager: str = opt("local", "environment manager for the steps: local, virtualenv, uv or conda")
    precision: str = opt("auto", "autocast precision of training and scoring steps: auto, fp32, bf16, fp16")
    experiment_name: str = opt("", "MLflow experiment of main and its steps; empty: growing-cnn")
    registered_model: str = opt(
        "",
        "Model Registry name for the best model (by validation accuracy), alias champion; "
        "empty: growing-cnn-<dataset>",
    )
    label_noise: str = opt("", "comma-separated label-noise rates in [0, 1); empty: the preset's")
    noise_kind: str = opt("", "symmetric or asymmetric label noise; empty: the preset's")
    equal_flops: str = opt(
        "", "true or false: every run again at the static run's training FLOPs; empty: the preset's"
    )


CONFIGS = (MainConfig,)


def resolve_preset(cfg: MainConfig) -> Preset:
    if cfg.preset not in PRESETS:
        raise UpstreamError(f"--preset {cfg.preset!r}: use one of {', '.join(PRESETS)}")
    if cfg.env_manager not in ENV_MANAGERS:
        raise UpstreamError(f"--env-manager {cfg.env_manager!r}: use one of {', '.join(ENV_MANAGERS)}")
    if cfg.precision not in PRECISIONS:
        raise UpstreamError(f"--precision {cfg.precision!r}: use one of {', '.join(PRECISIONS)}")
    preset = PRESETS[cfg.preset]
    try:
        seeds = tuple(int(s) for s in cfg.seeds.split(",")) if cfg.seeds.strip() else preset.seeds
    except ValueError:
        raise UpstreamError(f"--seeds {cfg.seeds!r} must be integers separated by commas") from None
    if cfg.epochs < 0 or cfg.subset < -1:
        raise UpstreamError("--epochs must be >= 0 and --subset >= -1")
    try:
        rates = tuple(float(r) for r in cfg.label_noise.split(",")) if cfg.label_noise.strip() else None
    except ValueError:
        raise UpstreamError(f"--label-noise {cfg.label_noise!r} must be rates separated by commas") from None
    if cfg.equal_flops not in ("", "true", "false"):
        raise UpstreamError(f"--equal-flops {cfg.equal_flops!r}: use true, false or leave it empty")
    preset = dataclasses.replace(
        preset,
        equal_flops=preset.equal_flops if not cfg.equal_flops else cfg.equal_flops == "true",
        seeds=seeds,
        epochs=cfg.epochs or preset.epochs,
        subset=preset.subset if cfg.subset == -1 else cfg.subset,
        label_noise=rates or preset.label_noise,
        noise_kind=cfg.noise_kind or preset.noise_kind,
    )
    for rate in preset.label_noise:  # every level's noise is refused before any step runs
        check_noise(noise_config(cfg, preset, rate))
    return preset


def noise_config(cfg: MainConfig, preset: Preset, rate: float) -> DataConfig:
    """The data of every step at one label-noise rate."""
    return DataConfig(
        dataset=cfg.dataset,
        data_dir=cfg.data_dir,
        subset=preset.subset,
        label_noise=rate,
        noise_kind=preset.noise_kind,
    )


# --- reuse -------------------------------------------------------------------------------


def same_params(wanted: dict, logged: dict) -> bool:
    """Whether a run logged these parameters (its name aside: a rerun may be ``static-s0-2``)."""
    return all(
        k in logged and same_param(shown_param(k, v), logged[k]) for k, v in wanted.items() if k != "run_name"
    )


def find_reusable(entry_point: str, params: dict, data_digest: str) -> str:
    """A FINISHED run of ``entry_point`` with these parameters, code and data, or ''."""
    version = code_version()
    if version == "unknown":
        return ""
    runs = mlflow.search_runs(
        search_all_experiments=True,
        output_format="list",
        order_by=["attributes.start_time DESC"],
        filter_string=(
            f"tags.entry_point = '{entry_point}' and attributes.status = 'FINISHED' "
            f"and tags.code_version = '{version}'"
        ),
    )
    for run in runs:
        if data_digest and run.data.params.get("data_digest") != data_digest:
            continue
        if same_params(params, run.data.params):
            return run.info.run_id
    return ""


class StepRunner:
    """Runs steps through ``mlflow run``, reusing finished runs with the same inputs."""

    def __init__(self, env_manager: str, experiment_id: str, parent_run_id: str, data_digest: str):
        self.env_manager, self.experiment_id = env_manager, experiment_id
        self.parent_run_id, self.data_digest = parent_run_id, data_digest
        self.log: list[dict] = []

    def __call__(self, entry_point: str, **overrides) -> str:
        params = {**default_params(entry_point), **flat_params(overrides)}
        digest = self.data_digest if entry_point != "evaluate" else ""
        run_id = find_reusable(entry_point, params, digest)
        reused = bool(run_id)
        if reused:
            click.echo(f"main: reusing {entry_point} run {run_id}", err=True)
        else:
            name = unique_run_name(self.experiment_id, params.get("run_name") or entry_point)
            params["run_name"] = name
            click.echo(f"main: running {entry_point} as {name}", err=True)
            # The step's run is made here, named and under main, rather than by `mlflow run`,
            # which would log every parameter shell-quoted ('' for an empty one, the spec JSON
            # in quotes) and refuse the step's plain values afterwards.
            step_run = mlflow.MlflowClient().create_run(
                self.experiment_id,
                run_name=name,
                tags={
                    "mlflow.parentRunId": self.parent_run_id,
                    "mlflow.project.entryPoint": entry_point,
                    "mlflow.source.type": "PROJECT",
                    "mlflow.source.name": str(REPO),
                },
            )
            submitted = mlflow.projects.run(
                str(REPO),
                entry_point=entry_point,
                parameters=params,
                env_manager=self.env_manager,
                experiment_id=self.experiment_id,
                synchronous=False,
                run_id=step_run.info.run_id,
            )
            try:
                succeeded = submitted.wait()
            except (KeyboardInterrupt, Terminated):
                # Pass the signal on and wait: the step ends KILLED with its checkpoint, then main.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                submitted.cancel()
                # `bash -c` may stand between: the step then sees its launcher gone, within a second.
                wait_closed(submitted.run_id)
                raise
            if not succeeded:
                raise UpstreamError(
                    f"step {entry_point} (run {submitted.run_id}) failed: "
                    "see that run's failure_reason tag and log"
                )
            run_id = submitted.run_id
        self.log.append(
            {
                "entry_point": entry_point,
                "run_id": run_id,
                "reused": reused,
                **flat_params(overrides),
                "run_name": mlflow.MlflowClient().get_run(run_id).info.run_name,
            }
        )
        return run_id


def static_curriculum(diet: Diet, epochs: int) -> dict:
    """Options that make a static run's curriculum the default dynamic run's: the same tier
    boundaries (tied to the default schedule's growth) and the same pruning, so the curriculum
    alone can be told apart from growth; and the diet's held-back share."""
    held = {"hold_back": diet.hold_back} if diet.hold_back else {}
    if diet.pacing == "none":
        return held
    boundaries = growth_boundaries(named_schedule("default", epochs)) or []
    return {
        "tier_boundaries": ",".join(str(e) for e in boundaries),
        "prune": curriculum_pruning(diet.pacing),
        **held,
    }


def dynamic_curriculum(diet: Diet) -> dict:
    """The curriculum options of a dynamic run on ``diet``."""
    held = {"hold_back": diet.hold_back} if diet.hold_back else {}
    return {"pacing": diet.pacing, "order": diet.order, "prune": curriculum_pruning(diet.pacing), **held}


def run(cfg: MainConfig) -> str:
    preset = resolve_preset(cfg)
    # Every level's data is validated before anything runs; its digest keys the steps' reuse.
    levels = {rate: load_data(noise_config(cfg, preset, rate)) for rate in preset.label_noise}
    with tracked_run(
        ENTRY_POINT,
        flat_params(
            cfg,
            {
                "resolved_seeds": list(preset.seeds),
                "resolved_epochs": preset.epochs,
                "resolved_subset": preset.subset,
                "resolved_label_noise": list(preset.label_noise),
                "resolved_noise_kind": preset.noise_kind,
            },
        ),
        run_name=f"main-{cfg.preset}",
        experiment_name=cfg.experiment_name,
    ) as active:
        step = StepRunner(cfg.env_manager, active.info.experiment_id, active.info.run_id, "")
        scores, training = {}, []
        for rate, data in levels.items():
            step.data_digest = data.digest
            data_params = {"dataset": cfg.dataset, "data_dir": cfg.data_dir, "subset": preset.subset}
            if rate or preset.noise_kind != "symmetric":
                data_params.update(label_noise=rate, noise_kind=preset.noise_kind)
            scores[rate] = step(
                "score_difficulty",
                **data_params,
                precision=cfg.precision,
                run_name=f"score-difficulty-{cfg.preset}{noise_label(rate, preset.noise_kind)}",
            )
            training += train_level(step, cfg, preset, data, data_params, scores[rate])
        evaluation = step("evaluate", runs=",".join(training), run_name=f"evaluate-{cfg.preset}")
        with scratch_dir() as tmp:
            steps = pd.DataFrame(step.log)
            steps.to_csv(tmp / "steps.csv", index=False)
            mlflow.log_artifact(str(tmp / "steps.csv"))
        reused = [s["run_id"] for s in step.log if s["reused"]]
        champion = register_champion(training, cfg.registered_model or f"growing-cnn-{data.name}")
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
            }
        )
        mlflow.log_metrics({"steps/total": len(step.log), "steps/reused": len(reused)})
        click.echo(f"main: {len(reused)} of {len(step.log)} steps reused", err=True)
        _print_conclusion(evaluation)
        return active.info.run_id


def noise_label(rate: float, kind: str) -> str:
    """What run names add for noisy data: '' when clean, else e.g. '-noise0.4' ('-asym0.4')."""
    return "" if not rate else f"-{'noise' if kind == 'symmetric' else 'asym'}{rate:g}"


def train_level(
    step: StepRunner, cfg: MainConfig, preset: Preset, data: Data, data_params: dict, scores: str
) -> list[str]:
    """The training runs of one data setting (one noise level): per seed the matched static
    control of each final architecture, then every dynamic variant, then the ``equal_cost``
    variants given the static run's seconds; with ``equal_flops`` all of them again at the
    static run's training FLOPs."""
    start = resolve_spec("minimal", data.input_shape, data.num_classes)
    finals = {s: final_spec(start, named_schedule(s, preset.epochs)) for s in preset.schedules}
    static_cost = {f.to_json(): static_training_flops(f, data, preset.epochs) for f in finals.values()}
    lengths = [("", lambda final: "")]
    if preset.equal_flops:
        lengths.append(("-eqflops", lambda final: f"{static_cost[final.to_json()]:.17g}flops"))
    # Named static-s0 when there is one final architecture; static@early-s0 etc. when they differ.
    distinct: dict[str, list[str]] = {}
    for schedule, final in finals.items():
        distinct.setdefault(final.to_json(), []).append(schedule)
    noisy = noise_label(data_params.get("label_noise", 0), preset.noise_kind)
    runs = []
    for seed in preset.seeds:
        common = {
            **data_params,
            "epochs": preset.epochs,
            "seed": seed,
            "scores_run": scores,
            "progress": "false",
            "precision": cfg.precision,
        }
        for length, budget_of in lengths:
            tail = f"{noisy}{length}-s{seed}"
            baseline = {}  # final spec -> this seed's static run without a curriculum
            for final_json, schedules in distinct.items():
                final = finals[schedules[0]]
                arch = "" if len(distinct) == 1 else "@" + "/".join(schedules)
                for diet in preset.static_curricula:
                    data_plan = static_curriculum(diet, preset.epochs)
                    label = name_label(diet.pacing, diet.order, data_plan.get("prune", 0), diet.hold_back)
                    run_id = step(
                        "train_static",
                        **common,
                        **_budget(budget_of(final)),
                        spec=final_json,
                        pacing=diet.pacing,
                        order=diet.order,
                        **data_plan,
                        run_name=f"static{arch}{label}{tail}",
                    )
                    runs.append(run_id)
                    if diet == Diet("none", "curriculum"):
                        baseline[final_json] = run_id
            for schedule in preset.schedules:
                for diet in preset.curricula:
                    label = diet.dynamic_label()
                    runs.append(
                        step(
                            "train_dynamic",
                            **common,
                            **_budget(budget_of(finals[schedule])),
                            schedule=schedule,
                            **dynamic_curriculum(diet),
                            run_name=f"dynamic-{schedule}{label}{tail}",
                        )
                    )
                twin = baseline.get(finals[schedule].to_json())
                for diet in preset.equal_cost if twin and not length else ():
                    label = diet.dynamic_label()
                    runs.append(
                        step(
                            "train_dynamic",
                            **common,
                            budget=f"run:{twin}:s",
                            schedule=schedule,
                            **dynamic_curriculum(diet),
                            run_name=f"dynamic-{schedule}{label}{noisy}-sametime-s{seed}",
                        )
                    )
    return runs


def _budget(budget: str) -> dict:
    """The budget option of a step: none at equal epochs, so those steps keep their parameters
    (and main's reuse of them) as they were."""
    return {"budget": budget} if budget else {}


def _print_conclusion(evaluate_run_id: str) -> None:
    with scratch_dir() as tmp:
        path = mlflow.artifacts.download_artifacts(
            run_id=evaluate_run_id, artifact_path="report/report.md", dst_path=str(tmp)
        )
        text = Path(path).read_text()
    # The title and the Conclusion section; the per-variant details stay in the report.
    click.echo("\n## ".join(text.split("\n## ")[:2]).split("\n### ")[0].strip())
    click.echo(f"\nfull report: runs:/{evaluate_run_id}/report/report.html (MLflow UI, evaluate run)")


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    run(build_config(MainConfig, values))


if __name__ == "__main__":
    main()

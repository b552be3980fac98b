"""The training runs main makes for one data setting: the static controls, the dynamic variants,
the equal-cost and equal-FLOPs runs, each with its options and its run name.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.schedule import final_spec, named_schedule
from models.spec import resolve_spec
from pipeline.curriculum.diet import curriculum_pruning, diet_of_growth, name_label
from pipeline.data.dataset import Data
from pipeline.run.length import static_training_flops
from pipeline.workflow.presets import BASELINE_DIET, Diet, Preset
from pipeline.workflow.steps import StepRunner


def static_curriculum(diet: Diet, epochs: int) -> dict:
    """Options that make a static run's curriculum the default dynamic run's: the same tier
    boundaries and pruning start (tied to the default schedule's growth) and the same pruning,
    so the curriculum alone can be told apart from growth; and the diet's held-back share."""
    held = {"hold_back": diet.hold_back} if diet.hold_back else {}
    if diet.pacing == "none":
        return held
    diet_options = diet_of_growth(named_schedule("default", epochs))
    return {**diet_options, "prune": curriculum_pruning(diet.pacing), **held}


def dynamic_curriculum(diet: Diet) -> dict:
    """The curriculum options of a dynamic run on ``diet``."""
    held = {"hold_back": diet.hold_back} if diet.hold_back else {}
    return {"pacing": diet.pacing, "order": diet.order, "prune": curriculum_pruning(diet.pacing), **held}


def noise_label(rate: float, kind: str) -> str:
    """What run names add for noisy data: '' when clean, else e.g. '-noise0.4' ('-asym0.4')."""
    return "" if not rate else f"-{'noise' if kind == 'symmetric' else 'asym'}{rate:g}"


def train_level(
    step: StepRunner, options: dict, preset: Preset, data: Data, data_params: dict, scores: str
) -> list[str]:
    """The training runs of one data setting (one noise level), each with ``options`` (precision
    and training recipe, the same for every run): per seed the matched static control of each
    final architecture, then every dynamic variant, then the ``equal_cost``
    variants given the static run's seconds; with ``equal_flops`` all of them again at the
    static run's training FLOPs; and at each of ``budget_fractions`` of those FLOPs the matched
    static control and the ``equal_cost`` variants, all given the same budget."""
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
        launch = _Launcher(
            step,
            {
                **data_params,
                "epochs": preset.epochs,
                "seed": seed,
                "scores_run": scores,
                "progress": "false",
                **options,
            },
            distinct,
        )
        for length, budget_of in lengths:
            tail = f"{noisy}{length}-s{seed}"
            baseline = {}  # final spec -> this seed's static run without a curriculum
            for final_json, schedules in distinct.items():
                for diet in preset.static_curricula:
                    run_id = launch.static(final_json, diet, budget_of(finals[schedules[0]]), tail)
                    runs.append(run_id)
                    if diet == BASELINE_DIET:
                        baseline[final_json] = run_id
            for schedule in preset.schedules:
                for diet in preset.curricula:
                    runs.append(launch.dynamic(schedule, diet, budget_of(finals[schedule]), tail))
                twin = baseline.get(finals[schedule].to_json())
                for diet in preset.equal_cost if twin and not length else ():
                    runs.append(launch.dynamic(schedule, diet, f"run:{twin}:s", f"{noisy}-sametime-s{seed}"))
        for fraction in preset.budget_fractions:
            tail = f"{noisy}-budget{fraction:g}x-s{seed}"
            for final_json in distinct:
                budget = f"{fraction * static_cost[final_json]:.17g}flops"
                runs.append(launch.static(final_json, BASELINE_DIET, budget, tail))
            for schedule in preset.schedules:
                budget = f"{fraction * static_cost[finals[schedule].to_json()]:.17g}flops"
                runs += [launch.dynamic(schedule, diet, budget, tail) for diet in preset.equal_cost]
    return runs


@dataclass(frozen=True)
class _Launcher:
    """Starts one seed's training steps: ``common`` holds the options they share, ``distinct``
    the final architectures (spec JSON -> the schedules that grow into it)."""

    step: StepRunner
    common: dict
    distinct: dict[str, list[str]]

    def static(self, final_json: str, diet: Diet, budget: str, tail: str) -> str:
        data_plan = static_curriculum(diet, self.common["epochs"])
        label = name_label(diet.pacing, diet.order, data_plan.get("prune", 0), diet.hold_back)
        arch = "" if len(self.distinct) == 1 else "@" + "/".join(self.distinct[final_json])
        return self.step(
            "train_static",
            **self.common,
            **_budget(budget),
            spec=final_json,
            pacing=diet.pacing,
            order=diet.order,
            **data_plan,
            run_name=f"static{arch}{label}{tail}",
        )

    def dynamic(self, schedule: str, diet: Diet, budget: str, tail: str) -> str:
        return self.step(
            "train_dynamic",
            **self.common,
            **_budget(budget),
            schedule=schedule,
            **dynamic_curriculum(diet),
            run_name=f"dynamic-{schedule}{diet.dynamic_label()}{tail}",
        )


def _budget(budget: str) -> dict:
    """The budget option of a step: none at equal epochs, so those steps keep their parameters
    (and main's reuse of them) as they were."""
    return {"budget": budget} if budget else {}

"""The training runs main makes for one data setting: the static controls, the dynamic variants,
the equal-cost and equal-FLOPs runs, each with its options and its run name.
"""

from __future__ import annotations

from models.schedule import final_spec, named_schedule
from models.spec import resolve_spec
from pipeline.curriculum.diet import curriculum_pruning, growth_boundaries, name_label
from pipeline.data.dataset import Data
from pipeline.run_length import static_training_flops
from pipeline.workflow.presets import Diet, Preset
from pipeline.workflow.steps import StepRunner


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


def noise_label(rate: float, kind: str) -> str:
    """What run names add for noisy data: '' when clean, else e.g. '-noise0.4' ('-asym0.4')."""
    return "" if not rate else f"-{'noise' if kind == 'symmetric' else 'asym'}{rate:g}"


def train_level(
    step: StepRunner, precision: str, preset: Preset, data: Data, data_params: dict, scores: str
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
            "precision": precision,
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

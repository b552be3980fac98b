"""main's presets as studies, without training: each preset's grid parses, every schedule of the
full preset grows its start network, and a study's name finds the same study again only for the
same inputs."""

from __future__ import annotations

import pytest

from models.schedule import parse_schedule, validate_schedule
from models.spec import resolve_spec
from pipeline.study import grid
from pipeline.workflow import studies
from pipeline.workflow.presets import PRESETS, start_of


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_a_grid_the_study_takes(name):
    preset = PRESETS[name]
    keys = studies.grid_cells(preset)
    assert len(keys) == len(set(keys)) > 0
    assert all(f"static@epochs#{seed}" in keys for seed in preset.seeds)  # each seed's reference
    arms = grid.parse_arms(preset.arms)
    budgets = tuple(grid.parse_budget(b) for b in preset.budgets.split(","))
    assert grid.comparisons(arms, budgets)  # something is compared with static


@pytest.mark.parametrize("schedule", PRESETS["full"].schedules)
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_every_schedule_of_the_full_preset_grows_its_start_network(schedule, shape):
    start = resolve_spec(start_of(schedule), shape, 10)
    validate_schedule(start, parse_schedule(schedule, 12), 12)


def test_a_study_name_is_the_same_for_the_same_inputs_only():
    params = {"seeds": "0,1,2", "arms": "static,dynamic", "epochs": 12}
    name = studies.study_name("main-quick-default", params)
    assert name.startswith("main-quick-default-") and len(name) == len("main-quick-default-") + 8
    assert studies.study_name("main-quick-default", dict(reversed(params.items()))) == name
    assert studies.study_name("main-quick-default", {**params, "epochs": 6}) != name

"""tune's definition check (pipeline/tune/study.py): a worker or a second command works on a
study only with the options it was created with; an option added to tune after the study was
created is the same study only at the value the study's trials trained with: its default, or
what ran before it where the default is not that (--precision, --monitor-share)."""

from __future__ import annotations

import optuna
import pytest

from pipeline.cli import ConfigError
from pipeline.data.config import DataConfig
from pipeline.training.config import TrainConfig
from pipeline.tune.config import SpaceConfig, StudyConfig, definition, definition_before_options
from pipeline.tune.study import STUDY_DEFINITION, check_definition


def created_with(tmp_path, record: dict) -> optuna.Study:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="tune", storage=storage, direction="maximize")
    study.set_user_attr(STUDY_DEFINITION, record)
    return study


def mine(**train) -> dict:
    return definition(DataConfig(), TrainConfig(**train), SpaceConfig(), StudyConfig())


@pytest.fixture
def before_lr_schedule(tmp_path) -> optuna.Study:
    """A study recorded by a tune that had no --lr-schedule yet."""
    record = {k: v for k, v in mine().items() if k != "lr_schedule"}
    return created_with(tmp_path, record)


def test_an_option_added_since_is_the_same_study_at_its_default(before_lr_schedule):
    check_definition(before_lr_schedule, mine())  # no error


def test_an_option_added_since_at_another_value_is_refused_naming_it(before_lr_schedule):
    assert TrainConfig().lr_schedule != "triangular"  # another value than the default
    with pytest.raises(ConfigError) as err:
        check_definition(before_lr_schedule, mine(lr_schedule="triangular"))
    said = str(err.value)
    assert "--lr-schedule triangular: study 'tune' was created before tune had --lr-schedule" in said
    assert f"so its trials trained with {TrainConfig().lr_schedule}: pass that" in said


def test_an_option_whose_default_is_not_what_ran_before_it_is_the_same_study_at_what_ran(tmp_path):
    # before --precision everything trained in fp32 (auto may be bf16), and before
    # --monitor-share every epoch read the whole validation split (0)
    record = {k: v for k, v in definition_before_options().items() if k not in ("precision", "monitor_share")}
    study = created_with(tmp_path, record)
    with pytest.raises(ConfigError, match="--monitor-share 0.15: .* trained with 0.0: pass that"):
        check_definition(study, mine())
    with pytest.raises(ConfigError, match="--precision auto: study 'tune' was created before tune had"):
        check_definition(study, mine(monitor_share=0.0))
    check_definition(study, mine(precision="fp32", monitor_share=0.0))  # what it trained with


def test_an_option_the_study_recorded_must_match(tmp_path):
    study = created_with(tmp_path, mine())
    epochs = TrainConfig().epochs + 1
    with pytest.raises(ConfigError, match=f"--epochs {epochs} differs from study 'tune'"):
        check_definition(study, mine(epochs=epochs))

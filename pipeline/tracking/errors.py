"""The run's errors: which ones are the user's to fix, and how a failure is worded.

Bad input (the project's own error types) gets one line and exit status 2; anything else is a
bug and keeps its traceback. A failed run says which in its ``failure_reason`` tag.
"""

from __future__ import annotations

FAILURE_TAG = "failure_reason"


class Terminated(BaseException):
    """SIGTERM, turned into an exception so the run is closed as KILLED like Ctrl-C."""


def raise_terminated(signum, frame):
    """A SIGTERM handler: stop the way Ctrl-C does, so what is open is closed."""
    raise Terminated()


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:500]


def failure_reason(err: BaseException) -> str:
    """A failed run's ``failure_reason``: the message of bad input, and for anything else (a
    bug) the exception's type too, so the two never read alike."""
    return one_line(err) if isinstance(err, user_errors()) else f"{type(err).__name__}: {one_line(err)}"


# Errors that are the user's to fix: they get one line and exit code 2, never a traceback.
# Only the project's own types, raised where input is checked: a ValueError from anywhere else
# is a bug and keeps its traceback (exit 1).
def user_errors() -> tuple[type[BaseException], ...]:
    from models.io import ModelFileError
    from models.schedule import GrowthError
    from models.spec import SpecError
    from pipeline.curriculum.checks import CurriculumError
    from pipeline.data.config import DataError
    from pipeline.logged_model import ServingRequirementError
    from pipeline.loop import DeviceError, DivergenceError
    from pipeline.precision import PrecisionError
    from pipeline.pruning import PruningError
    from pipeline.training.checkpoints import CheckpointError
    from pipeline.training.config import ConfigError

    return (
        DataError,
        SpecError,
        GrowthError,
        ConfigError,  # BudgetError too
        CurriculumError,
        PruningError,
        CheckpointError,
        ModelFileError,
        DivergenceError,
        DeviceError,
        PrecisionError,
        ServingRequirementError,  # a package the logged model must pin is not installed
        UpstreamError,
    )


class UpstreamError(ValueError):
    """An upstream run or artifact that is missing or does not fit this step's data."""


class TrackingStoreError(UpstreamError):
    """The tracking store cannot be reached or written; the message says what to do."""

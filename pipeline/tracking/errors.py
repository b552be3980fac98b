"""The run's errors: which ones are the user's to fix, and how a failure is worded.

Bad input (the project's own error types) gets one line and exit status 2; anything else is a
bug and keeps its traceback. A failed run says which in its ``failure_reason`` tag.
"""

from __future__ import annotations

from models.errors import UserError

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


# Errors that are the user's to fix get one line and exit code 2, never a traceback: the project's
# own types, all derived from models.errors.UserError and raised where input is checked. A
# ValueError from anywhere else is a bug and keeps its traceback (exit 1).
def user_errors() -> tuple[type[BaseException], ...]:
    return (UserError,)


class UpstreamError(UserError):
    """An upstream run or artifact that is missing or does not fit this step's data."""


class TrackingStoreError(UpstreamError):
    """The tracking store cannot be reached or written; the message says what to do."""

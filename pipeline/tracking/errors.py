"""The run's errors: which ones are the user's to fix, and how a failure is worded.

Bad input (the project's own error types) gets one line and exit status 2; anything else is a
bug and keeps its traceback. A failed run says which in its ``failure_reason`` tag.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from models.errors import UserError

FAILURE_TAG = "failure_reason"


class Terminated(BaseException):
    """SIGTERM, turned into an exception so the run is closed as KILLED like Ctrl-C."""


def raise_terminated(signum, frame):
    """A SIGTERM handler: stop the way Ctrl-C does, so what is open is closed."""
    raise Terminated()


@contextlib.contextmanager
def interruptions_held():
    """Steps that must happen together or not at all: a Ctrl-C or SIGTERM that comes during the
    block is held and acted on when the block ends. (A checkpoint logged without the metrics of
    the epochs it holds loses them: the resumed run starts after those epochs.)"""
    if threading.current_thread() is not threading.main_thread():  # only it receives signals
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:  # delivered again, to whatever handled it before the block
        signal.raise_signal(held[0])


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

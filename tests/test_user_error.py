"""Every error type of the project that is the user's to fix derives from one base,
models.errors.UserError, so the guard's one line and exit 2 cannot miss a new one."""

from __future__ import annotations

import importlib
import re

from models.errors import UserError
from pipeline.tracking.errors import failure_reason, user_errors
from tests.conftest import REPO

# Errors that mean a bug in the project, not bad input: they keep their traceback.
BUGS = {"CrossFitError"}


def _error_classes():
    for path in sorted([*REPO.glob("models/**/*.py"), *REPO.glob("pipeline/**/*.py")]):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for name in re.findall(r"^class (\w+(?:Error|Exception))\(", path.read_text(), re.MULTILINE):
            yield name, getattr(importlib.import_module(module), name)


def test_every_project_error_is_a_user_error_but_the_bugs():
    classes = dict(_error_classes())
    assert len(classes) > 15  # the scan found them
    assert {name for name, cls in classes.items() if not issubclass(cls, UserError)} == BUGS
    assert user_errors() == (UserError,)


def test_a_user_error_reads_as_its_message_and_a_bug_names_its_type():
    from pipeline.training.loop import DivergenceError

    diverged = DivergenceError(2, 30, float("nan"))
    assert failure_reason(diverged) == "loss became nan at epoch 2, global step 30; lower --lr"
    assert failure_reason(ValueError("x")) == "ValueError: x"

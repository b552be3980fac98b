"""The cells of a study handed out through Optuna's storage: each cell is an enqueued trial,
so any number of workers, on this machine or others that reach the same storage, take cells
one at a time with Optuna's own locking, heartbeats and retries (as tune's trials do). A
worker killed mid-cell stops its heartbeat; after the grace period another worker fails that
trial, closes its MLflow run FAILED and queues the cell again. A cell counts once: by its first
COMPLETE trial.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable

import click
import optuna
from optuna.trial import TrialState

from models.errors import UserError
from pipeline.study.grid import Cell
from pipeline.tracking.errors import one_line
from pipeline.tune.report import ATTR_RUN_ID
from pipeline.tune.study import make_storage

CELL_ATTR = "study_cell"
DEFERRED_ATTR = "deferred"  # a seconds cell whose reference had not finished: queued again
IDLE_ATTR = "idle"  # a worker found nothing left to take; the trial trained nothing
ERROR_ATTR = "cell_error"
OUTSIDE_ATTR = "outside_grid"  # queued by a version whose grid had a cell this one has not
LIVE = (TrialState.WAITING, TrialState.RUNNING)


def open_queue(url: str, cfg, create: bool) -> optuna.Study:
    """The study's trials in ``url`` (``cfg``: heartbeat_interval, grace_period, max_retry)."""
    storage = make_storage(url, cfg)
    kwargs = {"study_name": cfg.study_name, "storage": storage, "sampler": optuna.samplers.RandomSampler()}
    if not create:
        return optuna.load_study(**kwargs)
    return optuna.create_study(direction="maximize", load_if_exists=True, **kwargs)


def cell_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The trials that are cells (not idle, not deferred), in trial order."""
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if CELL_ATTR in t.user_attrs and not t.user_attrs.get(DEFERRED_ATTR)
    ]


def finished(study: optuna.Study, grid: list[Cell] | None = None) -> dict[str, str]:
    """cell key -> the MLflow run id of its first COMPLETE trial; with ``grid``, of its cells
    only (a study resumed under code whose grid changed keeps the earlier cells out)."""
    keys = None if grid is None else {c.key for c in grid}
    out: dict[str, str] = {}
    for t in cell_trials(study):
        if t.state == TrialState.COMPLETE and (keys is None or t.user_attrs[CELL_ATTR] in keys):
            out.setdefault(t.user_attrs[CELL_ATTR], t.user_attrs[ATTR_RUN_ID])
    return out


def queued(study: optuna.Study) -> set[str]:
    """The cells with a trial waiting to be taken."""
    return {t.user_attrs[CELL_ATTR] for t in cell_trials(study) if t.state == TrialState.WAITING}


def counted_twice(study: optuna.Study) -> list[str]:
    """Cells with more than one COMPLETE trial (a worker presumed dead that finished after
    all); the report counts only the first."""
    seen = Counter(t.user_attrs[CELL_ATTR] for t in cell_trials(study) if t.state == TrialState.COMPLETE)
    return sorted(k for k, n in seen.items() if n > 1)


def enqueue_missing(study: optuna.Study, cells: list[Cell]) -> list[Cell]:
    """Queue every cell with no COMPLETE, waiting or running trial (new cells, and cells that
    failed earlier: running the study again retries them); the cells queued."""
    taken = {
        t.user_attrs[CELL_ATTR]
        for t in cell_trials(study)
        if t.state == TrialState.COMPLETE or t.state in LIVE
    }
    missing = [c for c in cells if c.key not in taken]
    for cell in missing:
        study.enqueue_trial({}, user_attrs={CELL_ATTR: cell.key})
    return missing


class _Orphaned(Exception):
    """A cell trained after its trial was failed as stale elsewhere."""


def _state(study: optuna.Study, number: int) -> TrialState:
    return next(t.state for t in study.get_trials(deepcopy=False) if t.number == number)


class NotReady(Exception):
    """A seconds cell's reference run has not finished yet."""


def reference_run(study: optuna.Study, cell: Cell) -> str:
    """The finished reference run of ``cell``; NotReady while it is queued or training, a
    UserError once it failed for good."""
    key = cell.reference.key
    done = finished(study).get(key)
    if done:
        return done
    if any(t.user_attrs[CELL_ATTR] == key and t.state in LIVE for t in cell_trials(study)):
        raise NotReady(key)
    raise UserError(f"cell {cell.key} trains for the seconds of {key}, which failed: run the study again")


def _cell_of(trial: optuna.Trial, keys: set[str], log: Callable[[str], None]) -> Cell:
    """The cell ``trial`` is to train, its marks from an earlier attempt cleared; the trial is
    pruned where it holds no cell or one whose key is not in ``keys``, this grid's."""
    key = trial.user_attrs.get(CELL_ATTR)
    if key is None:  # another worker took the last queued cell between our look and our ask
        trial.set_user_attr(IDLE_ATTR, True)
        raise optuna.TrialPruned("nothing left to train")
    if key not in keys:  # queued under code whose grid had this cell; this grid has not
        trial.set_user_attr(OUTSIDE_ATTR, True)
        log(f"cell {key}: not in this study's grid (queued by an earlier version); not trained")
        raise optuna.TrialPruned("not in the grid")
    trial.set_user_attr(ATTR_RUN_ID, "")  # a retry's run is its own, not the dead worker's
    trial.set_user_attr(DEFERRED_ATTR, False)  # nor the mark of one that died putting it back
    return Cell.from_key(key)


def _put_back(study: optuna.Study, trial: optuna.Trial, cell: Cell, wait_s: float) -> optuna.TrialPruned:
    """Queue ``cell``, whose reference has not finished, again behind the others after waiting
    ``wait_s``; the pruning that ends ``trial``."""
    time.sleep(wait_s)
    trial.set_user_attr(DEFERRED_ATTR, True)
    study.enqueue_trial({}, user_attrs={CELL_ATTR: cell.key})
    return optuna.TrialPruned(f"{cell.reference.key} has not finished; queued again")


def work(
    study: optuna.Study,
    train: Callable[[Cell, int, str], tuple[str, float]],
    grid: list[Cell],
    poll_s: float = 5.0,
    log: Callable[[str], None] = lambda line: click.echo(line, err=True),
    stop_taking: Callable[[], bool] = lambda: False,
    wait_after_stop: bool = False,
) -> list[str]:
    """Take cells of ``grid`` until none is queued or training anywhere, or until
    ``stop_taking()`` says so (``--stop-after-hours``: what is queued stays queued; with
    ``wait_after_stop``, as the study's own process, first wait for the cells training
    elsewhere, so that its report holds them); the keys of cells that failed here.
    ``train(cell, trial_number, reference_run_id)`` trains one and returns its run id and its
    value (validation accuracy)."""
    failed: list[str] = []
    deferrals = 0  # seconds cells put back in a row: the wait before the next grows with it
    orphaned = False  # this worker's trial was failed as stale elsewhere while it trained
    said_stop = False

    def given_up(key: str, what: str) -> _Orphaned:  # a stalled storage: its trial was failed as stale
        nonlocal orphaned  # and the cell queued again by another worker; that retry counts
        orphaned = True
        log(f"cell {key}: {what} after its trial was failed as stale; the retry counts")
        return _Orphaned(key)

    keys = {c.key for c in grid}

    def objective(trial: optuna.Trial) -> float:
        nonlocal deferrals
        cell = _cell_of(trial, keys, log)
        key = cell.key
        reference = ""
        if cell.needs_reference_run:
            try:
                reference = reference_run(study, cell)
            except NotReady:
                # Its reference trains elsewhere or waits behind this cell: put it back, and
                # wait longer each time (up to a minute) so that waiting adds few trials.
                deferrals += 1
                raise _put_back(study, trial, cell, min(60.0, poll_s * deferrals)) from None
        deferrals = 0
        started = time.perf_counter()
        try:
            run_id, value = train(cell, trial.number, reference)
        except Exception as err:
            if _state(study, trial.number) != TrialState.RUNNING:
                raise given_up(key, f"failed ({one_line(err)})") from err
            trial.set_user_attr(ERROR_ATTR, one_line(err))
            failed.append(key)
            log(f"cell {key}: FAILED: {one_line(err)}")
            if not isinstance(err, UserError):
                log(traceback.format_exc())
            raise
        if _state(study, trial.number) != TrialState.RUNNING:
            raise given_up(key, f"trained (run {run_id})")
        trial.set_user_attr(ATTR_RUN_ID, run_id)
        log(f"cell {key}: val/acc {value:.4f} in {time.perf_counter() - started:.0f} s (run {run_id})")
        return value

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        while True:
            optuna.storages.fail_stale_trials(study)
            states = {t.state for t in study.get_trials(deepcopy=False)}
            stopped = stop_taking()
            if stopped and TrialState.WAITING in states and not said_stop:
                log("--stop-after-hours has passed: no new cell is taken here; what is queued stays queued")
                said_stop = True
            if TrialState.WAITING in states and not stopped:
                try:
                    study.optimize(objective, n_trials=1, catch=(Exception,))
                except ValueError:  # Optuna cannot tell a trial already failed as stale
                    if not orphaned:
                        raise
                    orphaned = False
            elif TrialState.RUNNING in states and (wait_after_stop or not stopped):
                time.sleep(poll_s)  # cells training elsewhere: stay to retry one whose worker dies
            else:
                return failed

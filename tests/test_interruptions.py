"""A Ctrl-C or SIGTERM that comes while a checkpoint and its epochs' metrics are logged waits
for both: the resumed run must not start after epochs whose metrics were never logged."""

import signal

import pytest

from pipeline.tracking.errors import Terminated, interruptions_held, raise_terminated


@pytest.fixture
def sigterm_raises():
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises
    yield
    signal.signal(signal.SIGTERM, previous)
    signal.signal(signal.SIGINT, previous_int)


SIGNALS = [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)]


@pytest.mark.parametrize(("sig", "raised"), SIGNALS)
def test_a_signal_during_the_block_is_acted_on_when_it_ends(sigterm_raises, sig, raised):
    done = []
    with pytest.raises(raised), interruptions_held():
        # raised in this (the main) thread: os.kill may hand it to another of the process's
        # threads (torch's, MLflow's), and the main thread then sees it only some bytecodes later
        signal.raise_signal(sig)
        done.append("first")
        done.append("second")
    assert done == ["first", "second"]
    assert signal.getsignal(signal.SIGTERM) is raise_terminated


def test_a_block_without_a_signal_ends_quietly_and_restores_the_handlers(sigterm_raises):
    before = signal.getsignal(signal.SIGINT)
    with interruptions_held():
        pass
    assert signal.getsignal(signal.SIGTERM) is raise_terminated
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("raised", [Terminated, KeyboardInterrupt])
def test_an_interrupted_run_gives_ctrl_c_back_once_it_has_closed(tracking, raised):
    """While an interrupted run closes, a second Ctrl-C is ignored; after, Ctrl-C works again
    (a process that goes on, a test suite or a notebook, kept ignoring it)."""
    import mlflow

    from pipeline.tracking.runs import tracked_run

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(raised), tracked_run("train_static", {}, "interrupted") as run:
        raise raised()
    assert mlflow.get_run(run.info.run_id).info.status == "KILLED"
    assert signal.getsignal(signal.SIGINT) is before


def test_a_run_stopped_after_its_last_epoch_is_finished_by_resume(tracking, monkeypatch):
    """Stopped while its model was logged, after the last epoch's checkpoint: --resume trains
    nothing again and finishes the run (it used to refuse it, leaving the epochs unusable)."""
    import mlflow
    from click.testing import CliRunner

    from pipeline import train_static
    from pipeline.run import session

    # Three quick epochs: the checkpoint pace writes the first epoch's and, always, the last's.
    args = ["--subset", "300", "--val-size", "100", "--spec", "tiny", "--epochs", "3"]
    args += ["--scores-run", "none", "--progress", "false"]
    logged = session.log_classifier

    def ctrl_c_while_logging(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "log_classifier", ctrl_c_while_logging)
    CliRunner().invoke(train_static.main, args)
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "KILLED" and "final/val_acc" not in run.data.metrics
    monkeypatch.setattr(session, "log_classifier", logged)

    result = CliRunner().invoke(train_static.main, [*args, "--resume", run.info.run_id])

    assert result.exit_code == 0, result.output
    done = mlflow.get_run(run.info.run_id)
    assert done.info.status == "FINISHED" and "final/val_acc" in done.data.metrics
    steps = [m.step for m in mlflow.MlflowClient().get_metric_history(run.info.run_id, "val/acc")]
    assert steps == [0, 1, 2]  # each epoch logged once: none trained again


def test_a_run_stopped_while_mlflow_wrote_its_model_shows_one_model_once_resumed(tracking, monkeypatch):
    """A Ctrl-C after MLflow created the run's model but before the run was tagged with it: the
    resumed run logs its model again and the first attempt's is deleted, so the run shows one
    model, the one its tag (and so evaluate) follows."""
    import mlflow
    from click.testing import CliRunner

    from pipeline import train_static
    from pipeline.run import logged_model

    args = ["--subset", "300", "--val-size", "100", "--spec", "tiny", "--epochs", "2"]
    args += ["--scores-run", "none", "--progress", "false"]
    log = logged_model._log

    def ctrl_c_once_written(**kwargs):
        log(**kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(logged_model, "_log", ctrl_c_once_written)
    CliRunner().invoke(train_static.main, args)
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "KILLED"
    experiments = [run.info.experiment_id]
    of_the_run = f"source_run_id = '{run.info.run_id}'"
    assert len(mlflow.search_logged_models(experiments, of_the_run, output_format="list")) == 1
    monkeypatch.setattr(logged_model, "_log", log)

    result = CliRunner().invoke(train_static.main, [*args, "--resume", run.info.run_id])

    assert result.exit_code == 0, result.output
    done = mlflow.get_run(run.info.run_id)
    (model,) = mlflow.search_logged_models(experiments, of_the_run, output_format="list")
    assert done.info.status == "FINISHED" and done.data.tags[logged_model.MODEL_ID_TAG] == model.model_id

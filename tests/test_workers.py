"""Worker processes on this machine: their exit codes come back, and one that exits with an
error is named after all have finished (its own message scrolled by while the others ran)."""

from __future__ import annotations

from pipeline import workers


def test_exit_codes_come_back_and_a_failed_worker_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    # python -m this prints and exits 0; json.tool refuses an unknown option with exit 2
    assert workers.run_worker_processes("this", [], 2, "WORKER_INDEX") == [0, 0]
    assert "exited" not in capsys.readouterr().err
    assert workers.run_worker_processes("json.tool", ["--no-such-option"], 2, "WORKER_INDEX") == [2, 2]
    err = capsys.readouterr().err
    assert "worker 0 (pid" in err and "worker 1 (pid" in err and "exited with code 2" in err

"""A resumed run is the run it was (issue #17, item 2): only options that do not change what
it trains may differ; the bad-input table runs the refusals end to end."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from pipeline.device import pick_device
from pipeline.run.resume import CHECKPOINT_ARTIFACT, RESUME_MAY_DIFFER, check_resumable
from pipeline.tracking.errors import UpstreamError

PARAMS = {"epochs": "6", "lr": "0.05", "spec": "tiny", "deterministic": "false", "progress": "true"}
TAGS = {"entry_point": "train_static", "final_spec": '{"layers": []}', "scores_run_id": ""}
TAGS["device"] = str(pick_device("auto"))  # where the run trained: here


@pytest.fixture
def killed(tracking, tmp_path):
    client = mlflow.MlflowClient()
    run = client.create_run(mlflow.get_experiment_by_name("test").experiment_id, tags=TAGS)
    for key, value in {**PARAMS, "data_digest": "d1", "run_name": "a", "resume": ""}.items():
        client.log_param(run.info.run_id, key, value)
    checkpoint = tmp_path / Path(CHECKPOINT_ARTIFACT).name  # it reached a checkpoint
    checkpoint.write_bytes(b"")
    client.log_artifact(run.info.run_id, str(checkpoint), str(Path(CHECKPOINT_ARTIFACT).parent))
    client.set_terminated(run.info.run_id, "KILLED")
    return run.info.run_id


def test_the_same_options_as_mlflow_run_spells_them_resume(killed):
    spelled = {**PARAMS, "epochs": "6.0", "deterministic": "False", "lr": "5e-2"}
    check_resumable(killed, "train_static", spelled, {"final_spec": TAGS["final_spec"]}, "d1")


def test_options_that_do_not_change_the_run_may_differ(killed):
    guards = {"max_params", "max_memory_gb"}  # size limits refuse networks, they do not change one
    where = {"run_name", "experiment_name"}  # a resumed run keeps its own name and experiment
    assert set(RESUME_MAY_DIFFER) == {"resume", "progress", "data_dir", *where, *guards}
    changed = {**PARAMS, "progress": "false", "run_name": "b", "resume": killed, "data_dir": "/else"}
    check_resumable(killed, "train_static", changed, {}, "d1")


@pytest.mark.parametrize(
    ("params", "tags", "digest", "expect"),
    [
        ({**PARAMS, "lr": "0.5"}, {}, "d1", "--lr 0.5 differs from the run's 0.05"),
        ({**PARAMS, "deterministic": "true"}, {}, "d1", "--deterministic true differs from the run's false"),
        (PARAMS, {"final_spec": '{"layers": [1]}'}, "d1", "its final_spec is"),
        (PARAMS, {}, "d2", "the data now has digest d2, the run trained on d1"),
        ({**PARAMS, "device": "auto"}, {}, "d1", ""),  # resolves as the run did on this machine
    ],
)
def test_an_option_that_defines_the_run_may_not(killed, params, tags, digest, expect):
    if not expect:
        check_resumable(killed, "train_static", params, tags, digest)
        return
    with pytest.raises(UpstreamError, match=expect):
        check_resumable(killed, "train_static", params, tags, digest)

"""Bad input, table-driven: every entry point answers it with one line naming the input and
what is wrong, exit status 2, no traceback, and its MLflow run FAILED with the reason.

Each case runs as `mlflow run` runs a step: the run exists before the step's code starts
(MLFLOW_RUN_ID), so the test also sees that a failure before any training still closes it.
Upstream runs (a finished training run, a scores run, a killed run) are real runs made once
in a real temporary store; doctored copies of them carry the defect a case needs.
"""

from __future__ import annotations

import importlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from models.io import SPEC_KEY
from models.spec import resolve_spec
from pipeline.difficulty.scores_table import SCORES_ARTIFACT, read_table, save_table, score_column
from pipeline.run.resume import CHECKPOINT_ARTIFACT
from pipeline.run.session import MODEL_ARTIFACT_DIR, MODEL_FILE
from pipeline.tracking.errors import FAILURE_TAG

pytestmark = pytest.mark.slow

TINY = ["--subset", "300", "--val-size", "100"]
FMNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass(frozen=True)
class Case:
    name: str
    entry_point: str
    args: tuple[str, ...]  # may hold {placeholders} filled from the `world` fixture
    expect: str  # a fragment of the one-line error (and of the run's failure_reason)


# Training cases name the good scores run: "auto" would pick the newest, a doctored twin.
SCORED = (*TINY, "--scores-run", "{scores}")
# The options of the killed runs to resume: a resumed run must be given the options it ran with.
RESUMED = (*SCORED, "--spec", "tiny", "--epochs", "1")
STATIC, DYNAMIC = "train_static", "train_dynamic"

CASES = [
    # data
    Case("unknown dataset", STATIC, ("--dataset", "imagenet-99"), "unknown dataset 'imagenet-99'"),
    Case("missing data files", STATIC, ("--data-dir", "{empty_dir}"), "lacks Fashion-MNIST file(s)"),
    Case("corrupt data file", STATIC, ("--data-dir", "{corrupt_dir}"), "corrupt or truncated"),
    Case("folder dataset with one class", STATIC, ("--dataset", "folder:{one_class}"), "1 class folder"),
    Case("unreadable image", STATIC, ("--dataset", "folder:{bad_image}"), "cannot read image"),
    Case("float images", STATIC, ("--dataset", "folder:{float_image}"), "no bit depth to scale"),
    Case("subset too small", STATIC, ("--subset", "5"), "--subset 5 is too small"),
    Case(
        "training split of one example",
        STATIC,
        ("--subset", "1000", "--val-size", "59999"),
        "leaves 1 train example(s)",
    ),
    # seeds: numpy's are 32-bit, and -1 means "the run's seed" only for --curriculum-seed
    Case("negative seed", STATIC, ("--seed", "-1"), "'--seed': -1 is not in the range 0<=x<=4294967295"),
    Case("seed past 2^64", STATIC, ("--seed", str(2**64)), "not in the range 0<=x<=4294967295"),
    Case("negative split seed", DYNAMIC, ("--split-seed", "-3"), "'--split-seed': -3 is not in the range"),
    Case("curriculum seed below -1", DYNAMIC, ("--curriculum-seed", "-2"), "not in the range -1<=x"),
    # scores tables
    Case(
        "scores table of other data",
        DYNAMIC,
        ("--subset", "400", "--val-size", "100", "--scores-run", "{scores}"),
        "is for data digest",
    ),
    Case("scores table with NaN rows", DYNAMIC, (*TINY, "--scores-run", "{nan_scores}"), "NaN scores"),
    Case("scores table with rows missing", DYNAMIC, (*TINY, "--scores-run", "{short_scores}"), "train rows"),
    # run ids
    Case("scores run that does not exist", DYNAMIC, (*TINY, "--scores-run", "0" * 32), "no such run"),
    Case(
        "scores run of the wrong entry point",
        DYNAMIC,
        (*TINY, "--scores-run", "{static}"),
        "is a train_static run, not score_difficulty",
    ),
    Case("evaluate a run that does not exist", "evaluate", ("--runs", "f" * 32), "does not exist"),
    Case("evaluate a scores run", "evaluate", ("--runs", "{scores}"), "not a training run"),
    Case("evaluate on a device this machine lacks", "evaluate", ("--device", "cuda:99"), "--device cuda:99"),
    Case("resume a run that does not exist", STATIC, (*SCORED, "--resume", "e" * 32), "no such run"),
    Case(
        "resume a run that does not exist, under a seconds budget",
        STATIC,
        (*SCORED, "--budget", "60s", "--resume", "e" * 32),
        "no such run",
    ),
    Case(
        "resume a scores run under a seconds budget",
        STATIC,
        (*SCORED, "--budget", "60s", "--resume", "{scores}"),
        "the run planned no epochs",
    ),
    Case(
        "resume a run that other code trained",
        STATIC,
        (*RESUMED, "--resume", "{other_code}"),
        "the run trained with code 0123456789ab, this checkout is",
    ),
    Case(
        "resume a run of the wrong entry point",
        DYNAMIC,
        (*SCORED, "--resume", "{killed_static}"),
        "is a train_static run, not train_dynamic",
    ),
    # a resumed run is the run it was: no option that defines it may change
    Case(
        "resume with another spec",
        STATIC,
        (*SCORED, "--epochs", "1", "--spec", "default", "--resume", "{killed_static}"),
        "--spec default differs from the run's tiny",
    ),
    Case(
        "resume with another learning rate",
        STATIC,
        (*RESUMED, "--lr", "0.5", "--resume", "{killed_static}"),
        "--lr 0.5 differs from the run's 0.05",
    ),
    Case(
        "resume with another subset",
        STATIC,
        # no scores: the run's scores table, for 300 examples, would be refused first
        (*RESUMED, "--subset", "400", "--scores-run", "none", "--resume", "{killed_static}"),
        "--subset 400 differs from the run's 300",
    ),
    # growth schedules and specs
    Case(
        "growth event past the last epoch",
        DYNAMIC,
        (*SCORED, "--epochs", "3", "--schedule", "5:conv(16)"),
        "growth epoch 5 is past --epochs 3 (5:conv(out_channels=16); growth happens before an "
        "epoch, so use 1..2)",
    ),
    Case(
        "growth events out of order",
        DYNAMIC,
        (*SCORED, "--epochs", "6", "--schedule", "4:conv(16);2:dropout"),
        "order",
    ),
    Case(
        "unknown layer type",
        DYNAMIC,
        (*SCORED, "--schedule", "2:attention"),
        "unknown layer type 'attention'",
    ),
    Case("unknown named spec", STATIC, (*SCORED, "--spec", "resnet9000"), "resnet9000"),
    Case("spec invalid for the input size", STATIC, (*SCORED, "--spec", "{five_pools}"), "1x1"),
    # sizes: refused with the figure before anything is allocated
    Case(
        "growth to a layer of 10^8 units",
        DYNAMIC,
        (*SCORED, "--epochs", "3", "--schedule", "1:fc(100000000)"),
        "parameters (layer 'fc2' alone 12,900,000,000) exceed --max-params",
    ),
    Case(
        "a spec of 10^9 channels",
        STATIC,
        (*SCORED, "--spec", "{giga_conv}"),
        "7,850,000,000,010 parameters",
    ),
    Case(
        "a spec whose activations do not fit in memory",
        STATIC,
        (*SCORED, "--spec", "{wide_conv}", "--max-memory-gb", "8"),
        "more than the 8.0 GiB allowed by --max-memory-gb",
    ),
    # numbers
    Case(
        "tier fractions that do not sum to one",
        "score_difficulty",
        (*TINY, "--tier-fractions", ".5,.3,.1"),
        "sum",
    ),
    Case("zero epochs", STATIC, (*SCORED, "--epochs", "0"), "--epochs must be positive"),
    # rejected by click itself, before the step's code runs (mlflow run types ints as float)
    Case("a fraction of an epoch", STATIC, ("--epochs", "2.5"), "'2.5' is not a valid integer"),
    Case("a word for a number in evaluate", "evaluate", ("--batch-size", "many"), "not a valid integer"),
    Case("zero batch size", STATIC, (*SCORED, "--batch-size", "0"), "--batch-size must be positive"),
    Case("negative learning rate", STATIC, (*SCORED, "--lr", "-0.1"), "--lr must be positive"),
    Case(
        "a learning rate that makes the loss diverge",
        STATIC,
        (*SCORED, "--spec", "tiny", "--epochs", "1", "--lr", "1e6"),
        "at epoch 0, global step",
    ),
    Case("label smoothing of 1", STATIC, (*SCORED, "--label-smoothing", "1"), "--label-smoothing must be"),
    Case("weight average decay of 1", DYNAMIC, (*SCORED, "--ema-decay", "1"), "--ema-decay must be"),
    Case("an unknown test-time augmentation", STATIC, (*SCORED, "--tta", "mirror"), "--tta 'mirror': use"),
    Case(
        "test-time flips and exits",
        DYNAMIC,
        (*SCORED, "--tta", "flip", "--exits", "stages"),
        "--tta flip with --exits",
    ),
    Case("both flips", STATIC, (*SCORED, "--augment", "flip+altflip"), "flip and altflip are two ways"),
    Case(
        "a stem's bias to freeze without a stem",
        STATIC,
        (*SCORED, "--whiten-bias-epochs", "3"),
        "--whiten-bias-epochs 3: network 'default' has no whitening stem",
    ),
    Case(
        "a growing network's stem's bias to freeze without a stem",
        DYNAMIC,
        (*SCORED, "--whiten-bias-epochs", "3"),
        "has no whitening stem",
    ),
    Case("negative growth re-warm", DYNAMIC, (*SCORED, "--growth-rewarm", "-0.1"), "--growth-rewarm must be"),
    Case("zero growth rate scale", DYNAMIC, (*SCORED, "--growth-lr-scale", "0"), "--growth-lr-scale must be"),
    Case(
        "zero batchnorm shift rate scale",
        STATIC,
        (*SCORED, "--bn-bias-lr-scale", "0"),
        "--bn-bias-lr-scale must be",
    ),
    Case("unknown compile mode", STATIC, (*SCORED, "--compile", "true", "--compile-mode", "x"), "mode 'x'"),
    Case(
        "compile mode without compiling",
        DYNAMIC,
        (*SCORED, "--compile-mode", "reduce-overhead"),
        "--compile-mode reduce-overhead needs --compile true",
    ),
    Case("negative growth noise", DYNAMIC, (*SCORED, "--growth-noise", "-1"), "--growth-noise must be"),
    Case(
        "growth noise on a random init",
        DYNAMIC,
        (*SCORED, "--growth-init", "random", "--growth-noise", "1"),
        "it needs --growth-init preserve",
    ),
    Case("rejoin of the whole run", DYNAMIC, (*SCORED, "--rejoin", "1"), "--rejoin 1.0 must be a fraction"),
    Case("hold back everything", STATIC, (*SCORED, "--hold-back", "1"), "--hold-back 1.0 must be a share"),
    Case(
        "hold back under self-paced",
        DYNAMIC,
        (*SCORED, "--pacing", "self-paced", "--hold-back", "0.2"),
        "not self-paced",
    ),
    Case("equal-flops neither true nor false", "main", ("--equal-flops", "maybe"), "--equal-flops 'maybe'"),
    Case("fp16 inference on CPU", "evaluate", ("--precision", "fp16"), "--precision fp16 runs only on CUDA"),
    Case("zero learning rate in tune", "tune", (*TINY, "--lr", "0"), "--lr must be positive"),
    # issue 34, item 3: late or misleading failures
    Case("weight decay NaN", STATIC, (*SCORED, "--weight-decay", "nan"), "--weight-decay must be a finite"),
    Case("an over-deep JSON spec", STATIC, (*SCORED, "--spec", "{deep_json}"), "nested too deeply"),
    Case("an over-deep JSON schedule", DYNAMIC, (*SCORED, "--schedule", "{deep_json}"), "nested too deeply"),
    Case(
        "a folder of one image per class",
        STATIC,
        ("--dataset", "folder:{one_per_class}"),
        "too few for a training and a validation split",
    ),
    Case("deleted scores run", STATIC, (*TINY, "--scores-run", "{deleted_scores}"), "is deleted; restore it"),
    Case("deleted run to evaluate", "evaluate", ("--runs", "{deleted_static}"), "is deleted; restore it"),
    Case("a run named twice to evaluate", "evaluate", ("--runs", "{static},{static}"), "names run"),
    Case("unknown pruner", "tune", (*TINY, "--pruner", "sometimes"), "--pruner 'sometimes'"),
    Case("unknown preset", "main", ("--preset", "huge"), "--preset 'huge'"),
    Case("unknown augmentation in main", "main", ("--augment", "blur"), "--augment 'blur'"),
    Case("label smoothing of 1 in main", "main", ("--label-smoothing", "1"), "--label-smoothing must be"),
    # refused before any step trains, not after (a registry name checked only at registration)
    Case("negative seed in main", "main", ("--seeds", "-1"), "--seeds '-1'"),
    Case("registry name with a slash in main", "main", ("--registered-model", "a/b"), "Names cannot contain"),
    Case("registry name with a colon in tune", "tune", (*TINY, "--registered-model", "a:b"), "a:b"),
    Case("study name the registry refuses", "tune", (*TINY, "--study-name", "lr/sw"), "--study-name, in"),
    Case(
        "a stem's bias to freeze without a stem, in tune",
        "tune",
        (*TINY, "--whiten-bias-epochs", "3"),
        "has no whitening stem",
    ),
    Case(
        "a stem's bias to freeze without a stem, in a study",
        "study",
        (*TINY, "--seeds", "1", "--whiten-bias-epochs", "3"),
        "has no whitening stem",
    ),
    Case(
        "negative hours to stop a study after",
        "study",
        (*TINY, "--seeds", "1", "--stop-after-hours", "-1"),
        "--stop-after-hours must be 0 (no limit) or a positive number",
    ),
    # label noise
    Case(
        "label noise of 1", STATIC, (*TINY, "--label-noise", "1"), "--label-noise 1 must be a share in [0, 1)"
    ),
    Case("negative label noise", DYNAMIC, (*TINY, "--label-noise", "-0.1"), "--label-noise -0.1 must be"),
    Case(
        "unknown noise kind",
        "score_difficulty",
        (*TINY, "--label-noise", "0.2", "--noise-kind", "pairwise"),
        "--noise-kind 'pairwise'",
    ),
    Case(
        "asymmetric noise on a dataset the map does not know",
        STATIC,
        ("--dataset", "folder:{two_classes}", "--label-noise", "0.2", "--noise-kind", "asymmetric"),
        "no confusion map for dataset folder-two-classes",
    ),
    Case("label noise out of range in tune", "tune", (*TINY, "--label-noise", "1.5"), "--label-noise 1.5"),
    Case("label noise out of range in main", "main", ("--label-noise", "0.2,1"), "--label-noise 1 must be"),
    # early exits
    Case(
        "exit threshold outside [0, 1]",
        STATIC,
        (*SCORED, "--spec", "tiny", "--exits", "pool1", "--exit-threshold", "1.5"),
        "--exit-threshold '1.5': 1.5 is outside [0, 1]",
    ),
    Case(
        "exit threshold below 0 in evaluate",
        "evaluate",
        ("--exit-threshold", "-0.1"),
        "-0.1 is outside [0, 1]",
    ),
    Case(
        "one exit threshold too many",
        DYNAMIC,
        (*SCORED, "--epochs", "4", "--exits", "stages", "--exit-threshold", "0.9,0.8"),
        "2 value(s) for 1 exit(s)",
    ),
    Case(
        "exit at a position that does not exist",
        STATIC,
        (*SCORED, "--spec", "tiny", "--exits", "conv9"),
        "'conv9' names no layer (layers: conv1, pool1, fc1)",
    ),
    Case(
        "exit after the head",
        STATIC,
        (*SCORED, "--spec", "tiny", "--exits", "head"),
        "nothing comes after the head",
    ),
    Case(
        "exit after the last layer",
        STATIC,
        (*SCORED, "--spec", "tiny", "--exits", "fc1"),
        "it would read what the head reads",
    ),
    Case(
        "exit on a map that cannot carry its head",
        STATIC,
        (
            *SCORED,
            "--spec",
            "tiny",
            "--exits",
            '[{{"id": "e1", "after": "conv1", "layers": [{{"id": "p", "type": "pool", "size": 64}}]}}]',
        ),
        "exit 'e1' after 'conv1' (a 8x28x28 map): layer 'p': pool of size 64 would shrink the 28x28 map",
    ),
    Case(
        "stage exits on a spec they do not fit",
        STATIC,
        (*SCORED, "--spec", '[{{"id": "conv1", "type": "conv", "out_channels": 8}}]', "--exits", "stages"),
        "--exits stages: the default schedule's stage exits do not fit",
    ),
    Case("negative exit weight", DYNAMIC, (*SCORED, "--exit-weights", "-1"), "--exit-weights '-1'"),
    Case(
        "unknown exit confidence",
        STATIC,
        (*SCORED, "--spec", "tiny", "--exits", "pool1", "--exit-confidence", "margin"),
        "--exit-confidence 'margin' is unknown (known: maxprob, entropy)",
    ),
    Case(
        "unknown exit calibration rule",
        DYNAMIC,
        (*SCORED, "--exits", "stages", "--exit-calibration", "median"),
        "--exit-calibration 'median' is unknown (known: bound, point, tiers)",
    ),
    Case(
        "unknown exit confidence in evaluate",
        "evaluate",
        ("--exit-confidence", "margin"),
        "--exit-confidence 'margin' is unknown (known: maxprob, entropy)",
    ),
    # checkpoints and model files
    Case(
        "resume a run without a checkpoint",
        STATIC,
        (*RESUMED, "--resume", "{no_checkpoint}"),
        "no checkpoint",
    ),
    Case("resume from a truncated checkpoint", STATIC, (*RESUMED, "--resume", "{truncated}"), "unreadable"),
    Case("model file unlike its spec", "evaluate", ("--runs", "{tampered_model}"), "does not match its spec"),
]


def _copy_run(
    client: mlflow.MlflowClient, source_id: str, status: str, params: dict | None = None, **tags: str
) -> str:
    """A new run with ``source_id``'s params and tags (a doctored twin, ``params`` and ``tags``
    overriding them), ended as ``status``."""
    source = client.get_run(source_id)
    twin = client.create_run(source.info.experiment_id, tags={**source.data.tags, **tags})
    for key, value in {**source.data.params, **(params or {})}.items():
        client.log_param(twin.info.run_id, key, value)
    client.set_terminated(twin.info.run_id, status)
    return twin.info.run_id


def _invoke(entry_point: str, args: list[str]):
    command = importlib.import_module(f"pipeline.{entry_point}").main
    return CliRunner().invoke(command, args, catch_exceptions=True)


def _write_png(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.delenv("MLFLOW_RUN_ID", raising=False)
        mlflow.set_tracking_uri(uri)
        experiment = mlflow.create_experiment("bad-input", artifact_location=(root / "artifacts").as_uri())
        patch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        patch.chdir(root)
        client = mlflow.MlflowClient()

        def step(entry_point: str, *args: str) -> str:
            result = _invoke(entry_point, [*TINY, *args])
            assert result.exit_code == 0, result.output
            runs = client.search_runs([experiment], order_by=["attributes.start_time DESC"], max_results=1)
            return runs[0].info.run_id

        places: dict[str, str] = {}
        places["static"] = step("train_static", "--spec", "tiny", "--epochs", "1", "--progress", "false")
        places["scores"] = step("score_difficulty", "--folds", "2", "--epochs", "1", "--scorers", "loss")

        # A scores table with NaN scores, and one with rows missing, each in a finished twin.
        table_path = Path(client.download_artifacts(places["scores"], SCORES_ARTIFACT, str(root / "scores")))
        frame, meta = read_table(table_path)
        loss = score_column("loss")
        for name, doctored in {
            "nan_scores": frame.assign(**{loss: frame[loss].where(frame.index % 7 != 3)}),
            "short_scores": frame.drop(frame.index[frame["split"] == "train"][:5]),
        }.items():
            twin = _copy_run(client, places["scores"], "FINISHED")
            path = save_table(doctored, root / name / Path(SCORES_ARTIFACT).name, meta)
            client.log_artifact(twin, str(path), str(Path(SCORES_ARTIFACT).parent))
            places[name] = twin

        # Killed runs to resume: one that died before its first checkpoint, one whose
        # checkpoint was cut short in the upload. They name the good scores run, as RESUMED does.
        scored = {"scores_run": places["scores"]}
        places["no_checkpoint"] = _copy_run(client, places["static"], "KILLED", scored)
        places["killed_static"] = _copy_run(client, places["static"], "KILLED", scored)
        other_code = {"code_version": "0123456789ab"}  # a commit that is not this checkout
        places["other_code"] = _copy_run(client, places["static"], "KILLED", scored, **other_code)
        ckpt = Path(client.download_artifacts(places["static"], CHECKPOINT_ARTIFACT, str(root / "ckpt")))
        ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
        places["truncated"] = _copy_run(client, places["static"], "KILLED", scored)
        client.log_artifact(places["truncated"], str(ckpt), str(Path(CHECKPOINT_ARTIFACT).parent))

        # A finished training run whose model file says one spec and holds another's weights.
        from safetensors.torch import load_file, save_file

        model_path = Path(
            client.download_artifacts(places["static"], f"{MODEL_ARTIFACT_DIR}/{MODEL_FILE}", str(root / "m"))
        )
        other = resolve_spec("default", (1, 28, 28), 10)
        save_file(load_file(str(model_path)), str(model_path), metadata={SPEC_KEY: other.to_json()})
        places["tampered_model"] = _copy_run(
            client, places["static"], "FINISHED", scores_run_id=places["scores"]
        )
        client.log_artifact(places["tampered_model"], str(model_path), MODEL_ARTIFACT_DIR)

        # Data on disk: an empty directory, a truncated copy of Fashion-MNIST, image folders.
        places["empty_dir"] = str((root / "empty").resolve())
        (root / "empty").mkdir()
        corrupt = root / "corrupt"
        shutil.copytree(FMNIST, corrupt)
        victim = next(p for p in sorted(corrupt.iterdir()) if p.name.startswith("train-images"))
        victim.write_bytes(victim.read_bytes()[:5000])
        places["corrupt_dir"] = str(corrupt)
        for i in range(4):
            _write_png(root / "one-class" / "shoes" / f"{i}.png", 40 * i)
            _write_png(root / "bad-image" / "a" / f"{i}.png", 40 * i)
            _write_png(root / "bad-image" / "b" / f"{i}.png", 200 - 40 * i)
        (root / "bad-image" / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
        places["one_class"], places["bad_image"] = str(root / "one-class"), str(root / "bad-image")
        for i in range(4):
            _write_png(root / "two-classes" / "a" / f"{i}.png", 40 * i)
            _write_png(root / "two-classes" / "b" / f"{i}.png", 200 - 40 * i)
        places["two_classes"] = str(root / "two-classes")
        for name in ("a", "b"):  # pixels without a bit depth: refused, not guessed
            folder = root / "float-image" / name
            folder.mkdir(parents=True)
            Image.fromarray(np.full((8, 8), 0.5, dtype=np.float32)).save(folder / "0.tiff")
        places["float_image"] = str(root / "float-image")
        places["giga_conv"] = json.dumps([{"id": "c1", "type": "conv", "out_channels": 10**9}])
        places["wide_conv"] = json.dumps(  # 400k parameters, 321 GB of activations at batch 128
            [
                {"id": "c1", "type": "conv", "out_channels": 200_000, "kernel_size": 1},
                {"id": "p1", "type": "pool", "size": 28},
            ]
        )
        places["deep_json"] = "[" * 100_000 + "]" * 100_000  # beyond json's recursion limit
        for name in ("a", "b"):
            _write_png(root / "one-per-class" / name / "0.png", 100)
        places["one_per_class"] = str(root / "one-per-class")
        places["deleted_scores"] = _copy_run(client, places["scores"], "FINISHED")
        client.delete_run(places["deleted_scores"])
        places["deleted_static"] = _copy_run(client, places["static"], "FINISHED")
        client.delete_run(places["deleted_static"])
        places["five_pools"] = json.dumps(
            {"layers": [{"id": f"pool{i}", "type": "pool"} for i in range(1, 6)]}
        )
        yield {"client": client, "experiment": experiment, "places": places}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_exit_2_and_a_failed_run(world, case, monkeypatch):
    client = world["client"]
    args = [arg.format(**world["places"]) for arg in case.args]
    # As `mlflow run` does: the step's run exists, RUNNING, before the step's code starts.
    outer = client.create_run(world["experiment"], tags={"mlflow.project.entryPoint": case.entry_point})
    monkeypatch.setenv("MLFLOW_RUN_ID", outer.info.run_id)

    result = _invoke(case.entry_point, args)

    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert case.expect in errors[0], errors[0]
    closed = client.get_run(outer.info.run_id)
    assert closed.info.status == "FAILED"
    assert case.expect in closed.data.tags[FAILURE_TAG]
    assert not client.search_runs([world["experiment"]], "attributes.status = 'RUNNING'")


def test_a_resume_refused_for_want_of_a_checkpoint_leaves_the_run_killed(world, monkeypatch):
    client, killed = world["client"], world["places"]["no_checkpoint"]
    outer = client.create_run(world["experiment"], tags={"mlflow.project.entryPoint": STATIC})
    monkeypatch.setenv("MLFLOW_RUN_ID", outer.info.run_id)
    args = [arg.format(**world["places"]) for arg in (*RESUMED, "--resume", killed)]
    result = _invoke(STATIC, args)
    assert result.exit_code == 2 and "no checkpoint" in result.stderr
    assert client.get_run(outer.info.run_id).info.status == "FAILED"  # the step's own run
    assert client.get_run(killed).info.status == "KILLED"  # the run it would have reopened


def test_the_table_covers_what_the_issue_lists():
    names = " / ".join(c.name for c in CASES)
    for topic in (
        "unknown dataset",
        "missing data",
        "corrupt data",
        "one class",
        "unreadable image",
        "float images",
        "other data",
        "NaN",
        "does not exist",
        "wrong entry point",
        "past the last epoch",
        "out of order",
        "unknown layer type",
        "invalid for the input size",
        "10^8 units",
        "10^9 channels",
        "do not fit in memory",
        "do not sum to one",
        "zero epochs",
        "a fraction of an epoch",
        "training split of one example",
        "batch size",
        "learning rate",
        "diverge",
        "without a checkpoint",
        "truncated checkpoint",
        "model file unlike its spec",
        "a device this machine lacks",
        "resume with another spec",
        "resume with another learning rate",
        "resume with another subset",
        "label noise of 1",
        "negative label noise",
        "unknown noise kind",
        "asymmetric noise on a dataset the map does not know",
        "exit threshold outside [0, 1]",
        "exit at a position that does not exist",
        "exit after the head",
        "exit on a map that cannot carry its head",
    ):
        assert topic in names, topic

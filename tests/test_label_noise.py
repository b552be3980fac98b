"""Label noise: a seeded, exact, stored mask on train and validation only; digests that keep
noisy and clean runs apart; scorers' AUC for the flipped labels; the memorisation probe."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from models.spec import resolve_spec
from pipeline.data.config import DataConfig, DataError
from pipeline.data.label_noise import ASYMMETRIC_MAPS, check_noise, flip_labels, noise_table
from pipeline.data.sources import FASHION_MNIST_CLASSES
from pipeline.data.splits import load_data
from pipeline.device import seed_everything
from pipeline.main import MainConfig, resolve_preset
from pipeline.report.runs import setting_of
from pipeline.report.stats import roc_auc
from pipeline.score_difficulty import Scored, noise_metrics, noise_report
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.probes import standard_probes
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan

NOISY = DataConfig(subset=2000, label_noise=0.4)


@pytest.fixture(scope="module")
def noisy():
    return load_data(NOISY, include_test=True)


def test_the_mask_is_seeded_and_reproducible(noisy):
    again = load_data(NOISY)
    assert torch.equal(again.train.y, noisy.train.y) and torch.equal(again.val.y, noisy.val.y)
    assert again.digest == noisy.digest and again.noise_digest == noisy.noise_digest
    other = load_data(DataConfig(subset=2000, label_noise=0.4, noise_seed=1))
    assert not torch.equal(other.train.flipped, noisy.train.flipped)
    assert other.digest != noisy.digest


def test_exactly_the_share_flips_in_every_class_and_to_another_class(noisy):
    for split in (noisy.train, noisy.val):
        flipped = split.flipped
        for c in range(10):  # 200 examples per class in each split of the subset: 80 flip
            assert int(flipped[split.y_clean == c].sum()) == 80
        assert float(flipped.float().mean()) == pytest.approx(0.4)
        # symmetric: every wrong class is drawn, never the true one
        assert torch.all(split.y[flipped] != split.y_clean[flipped])
        assert set(split.y[flipped].tolist()) == set(range(10))
        assert torch.equal(split.y[~flipped], split.y_clean[~flipped])


def test_asymmetric_noise_flips_only_within_the_map():
    data = load_data(DataConfig(subset=2000, label_noise=0.3, noise_kind="asymmetric"))
    mapping = {
        FASHION_MNIST_CLASSES.index(a): FASHION_MNIST_CLASSES.index(b)
        for a, b in ASYMMETRIC_MAPS["fashion-mnist"].items()
    }
    train = data.train
    flipped = train.flipped
    pairs = set(zip(train.y_clean[flipped].tolist(), train.y[flipped].tolist()))
    assert pairs == set(mapping.items())
    for c in range(10):
        share = float(flipped[train.y_clean == c].float().mean())
        assert share == pytest.approx(0.3 if c in mapping else 0.0)


def test_the_test_split_is_never_corrupted(noisy):
    clean = load_data(DataConfig(subset=2000), include_test=True)
    assert noisy.test.y_clean is None and not noisy.test.flipped.any()
    assert torch.equal(noisy.test.y, clean.test.y) and torch.equal(noisy.test.index, clean.test.index)
    assert torch.equal(noisy.train.y_clean, clean.train.y)  # and the source labels are kept


def test_digests_differ_with_noise_and_clean_data_keeps_its_digest(noisy):
    clean = load_data(DataConfig(subset=2000))
    assert not clean.noisy and clean.noise_digest == ""
    digests = {
        clean.digest,
        noisy.digest,
        load_data(DataConfig(subset=2000, label_noise=0.2)).digest,
        load_data(DataConfig(subset=2000, label_noise=0.4, noise_kind="asymmetric")).digest,
    }
    assert len(digests) == 4
    # No noise, whatever the unused noise options: the same data as before noise existed.
    assert load_data(DataConfig(subset=2000, noise_kind="asymmetric", noise_seed=3)).digest == clean.digest


def test_the_stored_mask_table_says_what_flipped(noisy):
    table = noise_table(noisy)
    assert len(table) == len(noisy.train) + len(noisy.val)
    assert table["flipped"].sum() == int(noisy.train.flipped.sum() + noisy.val.flipped.sum())
    assert (table["flipped"] == (table["label"] != table["original_label"])).all()
    assert set(table["split"]) == {"train", "val"}


def test_flip_labels_on_a_hand_built_split():
    y = torch.tensor([0] * 10 + [1] * 10 + [2] * 10)
    noisy = flip_labels(y, 0.2, 3, {0: 1}, torch.Generator().manual_seed(0))
    assert int((noisy != y).sum()) == 2 and set(noisy[noisy != y].tolist()) == {1}
    assert torch.equal(noisy[10:], y[10:])


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (DataConfig(label_noise=1.0), "--label-noise 1 must be a share in [0, 1)"),
        (DataConfig(label_noise=-0.1), "--label-noise -0.1"),
        (DataConfig(label_noise=0.2, noise_kind="pairwise"), "--noise-kind 'pairwise'"),
        (
            DataConfig(dataset="folder:/data/leaves", label_noise=0.2, noise_kind="asymmetric"),
            "no confusion map for dataset folder-leaves",
        ),
    ],
)
def test_bad_noise_options_are_refused_by_name(cfg, message):
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        check_noise(cfg)


def test_roc_auc_on_a_hand_built_case():
    # Pairs (positive, negative) ranked right: (0.35 > 0.1), (0.8 > 0.1), (0.8 > 0.4); wrong: (0.35 < 0.4)
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert roc_auc([1.0, 1.0], [True, False]) == pytest.approx(0.5)  # a tie counts half
    assert roc_auc([3.0, 2.0, 1.0], [True, False, False]) == 1.0
    assert roc_auc([1.0, 2.0], [False, False]) != roc_auc([1.0, 2.0], [False, False])  # NaN: no positives


def test_score_difficulty_noise_metrics_on_hand_built_scores(noisy):
    flipped = noisy.train.flipped
    perfect = flipped.double() + 0.01 * torch.rand(len(flipped), generator=torch.Generator().manual_seed(0))
    tiers = torch.where(flipped, 2, 0)  # every flipped example in the hard tier
    values = {"train": {"loss": perfect, "input": torch.zeros(len(flipped))}}
    values["val"] = {"loss": noisy.val.flipped.double(), "input": torch.zeros(len(noisy.val))}
    scored = Scored(values, {"train": tiers, "val": torch.where(noisy.val.flipped, 2, 0)}, None, None, {})
    metrics = noise_metrics(scored, noisy)
    assert metrics["noise/auc_loss_train"] == 1.0 and metrics["noise/auc_input_train"] == 0.5
    assert metrics["noise/train_flipped_in_hard"] == 1.0 and metrics["noise/train_flipped_in_easy"] == 0.0
    assert metrics["noise/train_hard_flipped"] == 1.0 and metrics["noise/train_easy_flipped"] == 0.0
    report = noise_report(metrics, ("loss", "input"), noisy)
    assert "| loss | 1.000 | 1.000 |" in report and "| hard | 100.0% | 100.0% |" in report


def test_training_logs_memorisation_per_epoch():
    data = load_data(DataConfig(subset=600, val_size=1000, label_noise=0.4))
    cfg = TrainConfig(epochs=2, batch_size=64, seed=0)
    seed_everything(0, False)
    state = new_state(resolve_spec("tiny", data.input_shape, data.num_classes), cfg, torch.device("cpu"))
    history = fit(state, data, cfg, TrainingPlan(), probes=standard_probes(data, cfg)).history
    for row in history:
        assert row["noise/trained_flipped_share"] == pytest.approx(0.4)  # static: every example
        for key in ("clean", "flipped_original", "flipped_noisy"):
            assert 0 <= row[f"noise/train_acc_{key}"] <= 1
        assert 0 <= row["noise/val_acc_original"] <= 1
    clean = load_data(DataConfig(subset=600, val_size=1000))
    seed_everything(0, False)
    state = new_state(resolve_spec("tiny", clean.input_shape, clean.num_classes), cfg, torch.device("cpu"))
    probes = standard_probes(clean, cfg)
    assert not any(
        k.startswith("noise/") for k in fit(state, clean, cfg, TrainingPlan(), probes=probes).history[-1]
    )


def test_runs_with_other_noise_fall_into_other_settings():
    base = {"dataset": "fashion-mnist", "data_digest": "d", "subset": "0", "epochs": "12"}
    before_noise = setting_of(base)
    clean = setting_of({**base, "label_noise": "0.0", "noise_kind": "asymmetric", "noise_seed": "4"})
    assert before_noise == clean  # no noise reads alike, whatever its unused options
    assert setting_of({**base, "label_noise": "0.2"}) != clean


def test_the_noise_preset_and_main_overrides():
    from pipeline.study import grid

    preset = resolve_preset(MainConfig(preset="noise"))
    assert preset.label_noise == (0.0, 0.2, 0.4) and preset.noise_kind == "symmetric"
    assert "flops:1" in preset.budgets.split(",") and len(preset.seeds) >= 3
    # Each curriculum holds back the hardest third, its random-order control a random third;
    # static runs whole (the matched baseline) and with the same hardest third held back.
    arms = {a.name: a for a in grid.parse_arms(preset.arms)}
    growing = [a for a in arms.values() if a.kind == "dynamic"]
    assert {(a.curriculum["pacing"], a.curriculum.get("order", "curriculum")) for a in growing} == {
        ("linear", "curriculum"),
        ("linear", "random"),
    }
    assert all(a.curriculum["hold_back"] == grid.NOISE_HOLD_BACK for a in growing)
    assert arms["static"].curriculum == {}
    assert arms["static-hold-back"].curriculum == {"hold_back": grid.NOISE_HOLD_BACK}
    assert "flops:1" not in resolve_preset(MainConfig(preset="noise", equal_flops="false")).budgets
    assert resolve_preset(MainConfig(equal_flops="true")).budgets == "epochs,seconds,flops:0.25,flops:1"
    quick = resolve_preset(MainConfig(label_noise="0.3", noise_kind="asymmetric"))
    assert quick.label_noise == (0.3,) and quick.noise_kind == "asymmetric"
    with pytest.raises(DataError, match="--label-noise 1 must be"):
        resolve_preset(MainConfig(label_noise="0.2,1"))


def test_the_report_draws_memorisation_and_noisy_share_per_epoch(tmp_path):
    from pipeline.report import build_report

    spec = '{"input_shape": [1, 28, 28], "layers": [], "name": "default", "num_classes": 10}'
    setting = setting_of({"label_noise": "0.4", "data_digest": "d"})
    rows, histories = [], {}
    arms = (("static", 0.4), ("dynamic-default+tiers", 0.6), ("dynamic-default+tiers-random", 0.4))
    for variant, share in arms:
        for seed in (0, 1, 2):
            run_id = f"{variant}-{seed}"
            entry = "train_static" if variant == "static" else "train_dynamic"
            memorised = [0.05 * e + 0.01 * seed for e in range(6)]
            rows.append(
                {"run_id": run_id, "run_name": run_id, "entry_point": entry, "variant": variant, "seed": seed,
                 "final_spec": spec, "status": "FINISHED", "setting": setting, "test/acc": 0.8 + 0.01 * seed,
                 "noise/train_acc_flipped_noisy": memorised[-1], "noise/train_acc_flipped_original": 0.6}
            )  # fmt: skip
            histories[run_id] = pd.DataFrame(
                {"epoch": range(6), "val/acc": 0.5, "time/cumulative_s": range(1, 7),
                 "noise/train_acc_flipped_noisy": memorised, "noise/trained_flipped_share": share}
            )  # fmt: skip
    paths = build_report(pd.DataFrame(rows), histories, {}, tmp_path)
    assert paths.noise_curves_png.exists() and paths.noise_curves_png in paths.files()
    md = paths.report_md.read_text()
    assert "## Label noise per epoch" in md and "## Label noise: memorisation at the last epoch" in md
    clean = build_report(
        pd.DataFrame(rows).drop(columns=[c for c in rows[0] if c.startswith("noise/")]),
        {k: v[["epoch", "val/acc", "time/cumulative_s"]] for k, v in histories.items()},
        {},
        tmp_path / "clean",
    )
    assert not clean.noise_curves_png.exists()


def test_a_preset_smaller_than_the_full_study_says_it_cannot_tell_the_direction():
    import dataclasses

    from pipeline.workflow.presets import FULL_STUDY_SEEDS, PRESETS, smoke_caveat

    assert smoke_caveat(PRESETS["quick"]).startswith("Too small to tell: 3 seed(s) on 10,000 examples")
    whole = dataclasses.replace(PRESETS["full"], seeds=tuple(range(FULL_STUDY_SEEDS)))
    assert smoke_caveat(whole) == ""
    assert "all examples" in smoke_caveat(PRESETS["full"])  # three seeds are too few even on all data

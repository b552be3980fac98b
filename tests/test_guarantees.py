"""The numbers the project publishes, each checked against a hand-built case with known answers:
per-tier accuracy, the weights of loss-aware pruning, training FLOPs and cross-fitted scores.
Each test here fails when the guarantee it names is broken (issue #19)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from models.builder import build_model
from models.flops import flops_per_example
from models.spec import ArchSpec, resolve_spec
from pipeline.curriculum.pruning import LossPruner
from pipeline.data.dataset import Data, Split
from pipeline.device import seed_everything
from pipeline.difficulty.cross_fit import FoldPlan, cross_fit
from pipeline.difficulty.scorers import el2n_score, logits_of, loss_score
from pipeline.evaluation import compute_test_metrics
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import EpochClock, EvalResult, LossTerms, StepRecipe, train_one_epoch
from pipeline.training.metrics import tier_accuracies
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan

CPU = torch.device("cpu")

# --- per-tier accuracy -------------------------------------------------------------------

# Seven examples: easy 2 (both right), medium 2 (one right), hard 3 (none right). Any other
# subset gives other numbers: e.g. easy on the other two tiers' examples would be 1/5.
TIERS = torch.tensor([0, 2, 1, 0, 2, 1, 2])
CORRECT = torch.tensor([True, False, True, True, False, False, False])
EXPECTED = {"easy": 1.0, "medium": 0.5, "hard": 0.0}


def test_validation_accuracy_per_tier_counts_exactly_that_tiers_examples():
    n = len(TIERS)
    result = EvalResult(0.0, float(CORRECT.float().mean()), torch.zeros(n), CORRECT, torch.zeros(n))
    assert tier_accuracies(result, TIERS, "val") == {f"val/acc_{k}": v for k, v in EXPECTED.items()}


class _PredictsItsInput(nn.Module):
    """Logits are the input pixels: an (N, 1, 1, C) one-hot input predicts its hot class."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) * 10.0


def test_test_accuracy_per_tier_counts_exactly_that_tiers_examples():
    classes = ["a", "b", "c"]
    y = torch.tensor([0, 1, 2, 1, 0, 2, 1])
    predicted = torch.where(CORRECT, y, (y + 1) % 3)
    x = nn.functional.one_hot(predicted, 3).float()[:, None, None, :]  # (N, 1, 1, C)
    test = Split(x, y, torch.arange(len(y)))
    metrics, per_class, confusion = compute_test_metrics(_PredictsItsInput(), test, TIERS, classes, 4)
    for name, acc in EXPECTED.items():
        assert metrics[f"test/acc_{name}"] == acc, name
    assert metrics["test/acc"] == pytest.approx(3 / 7)
    # loss per tier: the mean cross-entropy of that tier's examples only
    each = nn.functional.cross_entropy(x.flatten(1) * 10.0, y, reduction="none")
    for t, name in enumerate(EXPECTED):
        assert metrics[f"test/loss_{name}"] == pytest.approx(float(each[TIERS.eq(t)].mean()))
    assert confusion.to_numpy().trace() == int(CORRECT.sum())
    assert per_class["examples"].tolist() == [2, 3, 2]


# --- loss-aware pruning ------------------------------------------------------------------


def _linear_setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    split = Split(torch.randn(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2]), torch.arange(6))
    return model, split


def test_kept_examples_weights_reach_the_loss():
    """One batch holding every position: the step is exactly -lr x the gradient of the
    weighted mean of the per-example losses."""
    model, split = _linear_setup()
    weights = torch.tensor([0.0, 2.0, 1.0, 0.5, 3.0, 1.0])
    reference = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    reference.load_state_dict(model.state_dict())
    each = nn.functional.cross_entropy(reference(split.x), split.y, reduction="none")
    (each * weights).mean().backward()
    expected = {k: p.detach() - 0.1 * p.grad for k, p in reference.named_parameters()}

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stats = train_one_epoch(
        model,
        optimizer,
        split,
        torch.arange(6),
        StepRecipe(batch_size=6),
        EpochClock.single(0.1),
        LossTerms(weights=weights),
    )
    for k, p in model.named_parameters():
        assert torch.allclose(p.detach(), expected[k], atol=1e-6), k
    assert stats.loss == pytest.approx(float(each.detach().mean()))  # the logged loss stays unweighted


class _ZeroWeights(TrainingPlan):
    def example_weights(self, epoch: int) -> torch.Tensor:
        return torch.zeros(self.n)


def test_fit_hands_the_plans_weights_to_every_step(small_data):
    """All weights zero: no gradient reaches the model (no decay, no momentum), so it cannot move."""
    cfg = TrainConfig(epochs=1, batch_size=256, weight_decay=0.0, momentum=0.0, deterministic=True)
    seed_everything(0, True)
    state = new_state(resolve_spec("tiny", small_data.input_shape, small_data.num_classes), cfg, CPU)
    before = {k: v.clone() for k, v in state.model.state_dict().items()}
    plan = _ZeroWeights()
    plan.n = len(small_data.train)
    after = fit(state, small_data, cfg, plan).model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if "weight" in k or "bias" in k)


def test_pruning_leaves_each_examples_expected_weight_at_one():
    """E[kept x weight] = 1 for every example, so the expected gradient is the unpruned one."""
    n, rate, draws = 12, 0.4, 3000
    pruner = LossPruner(n, rate, anneal=0.0, start=1, seed=3)
    pruner.record(torch.arange(n), torch.linspace(0.1, 2.0, n))  # the first half is well learned
    total = torch.zeros(n)
    for epoch in range(1, draws + 1):
        kept, weights = pruner.select(epoch, draws + 2, torch.arange(n))
        taken = torch.zeros(n)
        taken[kept] = 1.0
        total += taken * weights
    mean = total / draws
    assert torch.allclose(mean, torch.ones(n), atol=0.06), mean
    assert torch.all(mean[n // 2 :] == 1)  # never pruned, never reweighted


# --- FLOPs -------------------------------------------------------------------------------

SMALL = ArchSpec(
    (1, 8, 8),
    3,
    (
        {"id": "c1", "type": "conv", "out_channels": 4, "kernel_size": 3},
        {"id": "p1", "type": "pool", "size": 2},
        {"id": "f1", "type": "fc", "out_features": 8},
    ),
)
GROWN = ArchSpec(
    (1, 8, 8),
    3,
    (
        SMALL.layers[0],
        {"id": "c2", "type": "conv", "out_channels": 2, "kernel_size": 3},
        *SMALL.layers[1:],
    ),
)


def _hand_count(spec: ArchSpec) -> dict[str, int]:
    """Multiply-adds x 2 of every conv and linear layer (same padding, 8x8 maps before the pool,
    4x4 after). Backward: a weight gradient for every layer and an input gradient for every
    layer but the first (the image needs none)."""
    convs = [layer for layer in spec.layers if layer["type"] == "conv"]
    conv_flops, in_ch = [], 1
    for layer in convs:
        conv_flops.append(2 * in_ch * layer["out_channels"] * 3 * 3 * 8 * 8)
        in_ch = layer["out_channels"]
    fc = 2 * (in_ch * 4 * 4) * 8
    head = 2 * 8 * 3
    forward = sum(conv_flops) + fc + head
    backward = sum(conv_flops) + sum(conv_flops[1:]) + 2 * fc + 2 * head
    return {"forward": forward, "train": forward + backward}


@pytest.mark.parametrize("spec", [SMALL, GROWN], ids=["conv-pool-fc", "two-convs"])
def test_flops_per_example_equal_a_hand_count(spec):
    assert flops_per_example(build_model(spec), spec.input_shape) == _hand_count(spec)
    assert _hand_count(SMALL) == {"forward": 5680, "train": 12432}  # the hand count itself


class _GrowAndSubsample(TrainingPlan):
    """Epoch 0 on 10 examples with SMALL; from epoch 1 on GROWN, on 25 then 40 examples."""

    SIZES = (10, 25, 40)

    def before_epoch(self, epoch, model, optimizer):
        if epoch == 1:
            model = build_model(GROWN)
            return model, torch.optim.SGD(model.parameters(), lr=0.01), []
        return model, optimizer, []

    def positions(self, epoch, model, data):
        return torch.arange(self.SIZES[epoch])


def test_cumulative_training_flops_are_the_sum_over_what_was_trained():
    gen = torch.Generator().manual_seed(0)
    split = lambda n: Split(torch.randn(n, 1, 8, 8, generator=gen), torch.arange(n) % 3, torch.arange(n))
    data = Data("hand", ["a", "b", "c"], split(40), split(9), None, "d", "d")
    cfg = TrainConfig(epochs=3, batch_size=8)
    seed_everything(0, False)
    state = fit(new_state(SMALL, cfg, CPU), data, cfg, _GrowAndSubsample())
    small, grown = _hand_count(SMALL)["train"], _hand_count(GROWN)["train"]
    expected = [10 * small, 10 * small + 25 * grown, 10 * small + 65 * grown]
    assert [h["train/flops_cumulative"] for h in state.history] == expected
    assert [h["model/flops_per_example"] for h in state.history] == [
        _hand_count(s)["forward"] for s in (SMALL, GROWN, GROWN)
    ]
    assert state.cumulative_train_flops == expected[-1]


# --- cross-fitted scores -----------------------------------------------------------------


def test_each_training_examples_score_is_its_own_images_under_the_model_that_held_it_out(small_data):
    """Retrain every fold model from its seed and recompute scores of the examples it held out
    (and of validation examples, the mean over fold models): the recorded values must match."""
    train = Split(small_data.train.x[:600], small_data.train.y[:600], small_data.train.index[:600])
    val = Split(small_data.val.x[:200], small_data.val.y[:200], small_data.val.index[:200])
    data = Data(small_data.name, small_data.classes, train, val, None, "d", "d")
    spec = resolve_spec("tiny", data.input_shape, data.num_classes)
    cfg = TrainConfig(epochs=2, batch_size=64, deterministic=True)
    result = cross_fit(data, spec, cfg, CPU, folds=2, repeats=1, seed=5, scorers=("loss", "el2n"))
    ledger = result.ledger
    val_loss = []
    for i, fold in enumerate(ledger.folds):
        fold_cfg = dataclasses.replace(cfg, seed=fold.seed)
        early = {}

        def after_first_epoch(epoch, metrics, state, early=early, fold=fold):
            if epoch == 0:  # EL2N's snapshot
                early["logits"] = logits_of(state.model, train.x[fold.held_out])

        seed_everything(fold.seed, True)
        state = fit(
            new_state(spec, fold_cfg, CPU), data, fold_cfg, FoldPlan(fold), on_epoch=after_first_epoch
        )
        held_y = train.y[fold.held_out]
        loss = loss_score(logits_of(state.model, train.x[fold.held_out]), held_y)
        el2n = el2n_score(early["logits"], held_y)
        recorded = ledger.per_model("train", "loss")[i, fold.held_out]
        assert torch.allclose(recorded, loss, atol=1e-5), fold.name
        assert torch.allclose(ledger.per_model("train", "el2n")[i, fold.held_out], el2n, atol=1e-5)
        val_loss.append(loss_score(logits_of(state.model, val.x), val.y))
    combined = ledger.combined("train", "loss")
    for i, fold in enumerate(ledger.folds):
        assert torch.allclose(combined[fold.held_out], ledger.per_model("train", "loss")[i, fold.held_out])
    assert torch.allclose(ledger.combined("val", "loss"), torch.stack(val_loss).mean(0), atol=1e-5)

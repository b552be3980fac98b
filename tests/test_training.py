"""The shared epoch loop: reproducible with a seed, resumable exactly, honest about divergence."""

from __future__ import annotations

import dataclasses
import math
import time

import pytest
import torch

from pipeline.cli import ConfigError
from pipeline.data.augment import alternate_flips, mixup_batch
from pipeline.device import CPU_EVAL_BATCH, eval_batch_size, seed_everything
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit, learning_rate
from pipeline.training.loop import (
    DivergenceError,
    EpochClock,
    LossTerms,
    StepRecipe,
    evaluate_split,
    train_one_epoch,
)
from pipeline.training.lr_schedule import cosine_lr, triangular_lr
from pipeline.training.pace import CheckpointPace
from pipeline.training.state import ArchitectureTrace
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import fresh_state, interrupted_then_resumed

CFG = TrainConfig(epochs=3, batch_size=64, deterministic=True, seed=7)


def test_same_seed_same_metrics(small_data):
    a = fit(fresh_state(small_data, CFG), small_data, CFG, TrainingPlan())
    b = fit(fresh_state(small_data, CFG), small_data, CFG, TrainingPlan())
    assert a.history[-1]["val/loss"] == b.history[-1]["val/loss"]
    assert a.history[-1]["val/acc"] > 0.5  # well above chance (0.1) on real data


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(small_data, tmp_path):
    whole = fit(fresh_state(small_data, CFG), small_data, CFG, TrainingPlan())
    resumed = interrupted_then_resumed(
        lambda: fresh_state(small_data, CFG), small_data, CFG, TrainingPlan, tmp_path / "c.pt"
    )
    keys = ("train/loss", "val/loss", "val/acc", "train/lr")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in whole.history]
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


def test_a_diverging_run_names_epoch_and_step(small_data):
    cfg = dataclasses.replace(CFG, lr=1e12, epochs=1)
    with pytest.raises(DivergenceError, match=r"at epoch 0, global step \d+"):
        fit(fresh_state(small_data, cfg), small_data, cfg, TrainingPlan())


def test_cosine_schedule_warms_up_peaks_and_ends_at_zero():
    assert cosine_lr(0.1, 0.0, 0.1) < 0.01
    assert cosine_lr(0.1, 0.1, 0.1) == pytest.approx(0.1)
    assert cosine_lr(0.1, 1.0, 0.1) == pytest.approx(0.0, abs=1e-12)


def test_the_triangle_climbs_from_a_fifth_of_the_peak_and_falls_to_seven_percent():
    # airbench94's get_lr: 0.2 -> 1 over the first 23% of steps, then 1 -> 0.07 at the last
    assert triangular_lr(1.5, 0.0, 0.23) == pytest.approx(0.3)
    assert triangular_lr(1.5, 0.115, 0.23) == pytest.approx(1.5 * 0.6)
    assert triangular_lr(1.5, 0.23, 0.23) == pytest.approx(1.5)
    assert triangular_lr(1.5, 0.615, 0.23) == pytest.approx(1.5 * (1 + 0.07) / 2)
    assert triangular_lr(1.5, 1.0, 0.23) == pytest.approx(1.5 * 0.07)
    assert triangular_lr(1.5, 1.2, 0.23) == pytest.approx(1.5 * 0.07)  # a seconds run's overshoot
    assert triangular_lr(1.0, 0.5, 0.0) == pytest.approx(1 - 0.93 / 2)  # no warm-up: from the peak


def test_the_run_follows_the_schedule_it_is_given(small_data):
    cfg = TrainConfig(epochs=2, batch_size=500, lr=0.05, warmup=0.5, lr_schedule="triangular", seed=0)
    state = fit(fresh_state(small_data, cfg), small_data, cfg, TrainingPlan())
    # train/lr is an epoch's last step's rate: epoch 1 ends past the warm-up's last step, epoch 2
    # at the end's 7%; the cosine would be back near zero there
    steps = -(-len(small_data.train) // 500)  # batches an epoch, the last one short
    last_of_first = (steps - 1) / (2 * steps)
    assert state.history[0]["train/lr"] == pytest.approx(triangular_lr(0.05, last_of_first, 0.5))
    assert state.history[1]["train/lr"] == pytest.approx(
        triangular_lr(0.05, (2 * steps - 1) / (2 * steps), 0.5)
    )
    with pytest.raises(ConfigError, match="--lr-schedule 'linear': use one of cosine, triangular"):
        dataclasses.replace(cfg, lr_schedule="linear").validate()


def test_growth_rewarm_ramps_the_rate_back_after_each_growth_event():
    cfg = TrainConfig(epochs=10, lr=0.1, warmup=0.0, growth_rewarm=0.2)
    trace = ArchitectureTrace({}, [], [{"epoch": 2, "label": "+conv"}, {"epoch": 2, "label": "+res"}])
    schedule = lambda p: cosine_lr(0.1, p, 0.0)
    assert learning_rate(cfg, trace, 0.1) == schedule(0.1)  # before growth: untouched
    assert learning_rate(cfg, trace, 0.2) < 0.01 * schedule(0.2)  # growth at epoch 2 of 10
    assert learning_rate(cfg, trace, 0.3) == pytest.approx(schedule(0.3) * (0.1 + 1e-3) / 0.2)
    assert learning_rate(cfg, trace, 0.4) == schedule(0.4)  # the ramp is over
    assert learning_rate(dataclasses.replace(cfg, growth_rewarm=0.0), trace, 0.2) == schedule(0.2)


def one_batch_at_zero_rate(state, split, example_losses: bool = False, **recipe):
    """One epoch of a single batch holding all of ``split``, at a zero learning rate and with a
    generator seeded 0: its loss is that of the model as it was, under the ``recipe`` options."""
    return train_one_epoch(
        state.model,
        state.optimizer,
        split,
        torch.arange(len(split)),
        StepRecipe(batch_size=len(split), **recipe),
        EpochClock.single(0.0),
        LossTerms(example_losses=example_losses),
    )


def test_label_smoothing_is_the_training_loss(small_data):
    """One batch of every example at a zero rate: the epoch's loss is the smoothed
    cross-entropy of the untouched model (train mode: batch statistics of that same batch)."""
    state = fit(fresh_state(small_data, CFG), small_data, dataclasses.replace(CFG, epochs=1), TrainingPlan())
    with torch.no_grad():
        logits = state.model.train()(small_data.train.x)
    expected = torch.nn.functional.cross_entropy(logits, small_data.train.y, label_smoothing=0.2)
    assert float(expected) > torch.nn.functional.cross_entropy(logits, small_data.train.y) + 0.05
    stats = one_batch_at_zero_rate(state, small_data.train, label_smoothing=0.2)
    assert stats.loss == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("example_losses", [False, True])
def test_mixup_is_the_training_loss(small_data, example_losses):
    """One batch of every example at a zero rate: the epoch's loss, and with ``example_losses``
    each example's (what pruning sees), mix the losses against both labels by the batch's lam."""
    state = fit(fresh_state(small_data, CFG), small_data, dataclasses.replace(CFG, epochs=1), TrainingPlan())
    train = small_data.train
    generator = torch.Generator().manual_seed(0)  # the epoch's, drawn in its order
    order = torch.randperm(len(train), generator=generator)
    mixed, partner, lam = mixup_batch(train.x[order], 8.0, generator)
    assert 0.2 < lam < 0.8  # a large alpha blends visibly: lam near 1/2
    with torch.no_grad():
        logits = state.model.train()(mixed)
    y = train.y[order]
    each = [torch.nn.functional.cross_entropy(logits, t, reduction="none") for t in (y, y[partner])]
    expected = lam * each[0] + (1 - lam) * each[1]
    assert float(expected.mean()) > float(each[0].mean()) + 0.05  # not the plain loss
    stats = one_batch_at_zero_rate(state, train, example_losses=example_losses, mixup=8.0)
    assert stats.loss == pytest.approx(float(expected.mean()), rel=1e-5)
    if example_losses:
        assert torch.equal(stats.order, order)
        torch.testing.assert_close(stats.losses, expected, rtol=1e-5, atol=1e-6)


def test_alternating_flips_mirror_the_images_of_the_run_s_seed_in_its_epoch_s_turn(small_data):
    """One batch of every example at a zero rate, in the epoch's random order: the loss is that
    of the model on each image mirrored where ``alternate_flips`` says for its position, the
    run's seed and the epoch; the next epoch mirrors the others (train mode: batch statistics
    of that same batch, whose order does not change them)."""
    state = fit(fresh_state(small_data, CFG), small_data, dataclasses.replace(CFG, epochs=1), TrainingPlan())
    train = small_data.train
    positions = torch.arange(len(train))

    def expected(seed, epoch):
        flip = alternate_flips(positions, epoch, seed)
        with torch.no_grad():
            logits = state.model.train()(torch.where(flip[:, None, None, None], train.x.flip(3), train.x))
        return float(torch.nn.functional.cross_entropy(logits, train.y))

    for seed, epoch in [(7, 0), (7, 1), (8, 0)]:
        stats = train_one_epoch(
            state.model,
            state.optimizer,
            train,
            positions,
            StepRecipe(batch_size=len(train), augment="altflip", seed=seed),
            EpochClock(lambda _progress: 0.0, epoch, 2, 0, torch.Generator().manual_seed(0)),
        )
        assert stats.loss == pytest.approx(expected(seed, epoch), rel=1e-5)
    assert len({expected(7, 0), expected(7, 1), expected(8, 0)}) == 3  # three different batches


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("epochs", 0, "--epochs must be positive"),
        ("batch_size", -1, "--batch-size must be positive"),
        ("lr", 0.0, "--lr must be positive"),
        ("lr", float("inf"), "--lr must be positive and finite"),
        ("weight_decay", float("nan"), "--weight-decay must be a finite non-negative number"),
        ("weight_decay", float("inf"), "--weight-decay must be a finite non-negative number"),
        ("augment", "rotate", "--augment 'rotate'"),
        ("augment", "flip+altflip", "--augment flip\\+altflip: flip and altflip are two ways .* choose one"),
        ("mixup", -0.2, "--mixup must be a non-negative alpha"),
        ("eval_batch_size", -1, "--eval-batch-size must be positive"),
    ],
)
def test_bad_training_options_are_refused(field, value, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(TrainConfig(), **{field: value}).validate()


def test_an_evaluation_pass_takes_the_device_s_batch_unless_told(small_data):
    """0 (the default) is 128 on the CPU and 1024 on an accelerator; a batch given is kept. The
    batch changes how fast a pass is, not what it finds."""
    assert TrainConfig().eval_batch_size == 0
    assert eval_batch_size(0, torch.device("cpu")) == CPU_EVAL_BATCH == 128
    assert eval_batch_size(0, torch.device("cuda")) == 1024
    assert eval_batch_size(40, torch.device("cpu")) == 40
    model = fresh_state(small_data, CFG).model
    auto, given = evaluate_split(model, small_data.val), evaluate_split(model, small_data.val, 7)
    assert torch.equal(auto.predictions, given.predictions)
    torch.testing.assert_close(auto.per_example_loss, given.per_example_loss, rtol=1e-5, atol=1e-6)


def test_checkpoints_follow_every_epoch_unless_writing_one_is_slow(small_data):
    cfg = dataclasses.replace(CFG, epochs=4)
    quick, slow = [], []

    def write_slowly(state, _plan):  # a stalled artifact store: 0.2 s against epochs of milliseconds
        slow.append(state.epoch)
        time.sleep(0.2)

    fit(
        fresh_state(small_data, cfg),
        small_data,
        cfg,
        TrainingPlan(),
        checkpoint=lambda s, _p: quick.append(s.epoch),
    )
    state = fit(fresh_state(small_data, cfg), small_data, cfg, TrainingPlan(), checkpoint=write_slowly)
    # the first epoch's, none between (the next is due 10 s, 50 x 0.2 s, later), the last's
    assert slow == [1, 4]
    assert state.time_parts["checkpoint"] == pytest.approx(0.4, abs=0.15)
    every = CheckpointPace(max_share=math.inf)
    fit(
        fresh_state(small_data, cfg),
        small_data,
        cfg,
        TrainingPlan(),
        checkpoint=write_slowly,
        checkpoint_pace=every,
    )
    assert slow == [1, 4, 1, 2, 3, 4]
    assert quick[0] == 1 and quick == sorted(set(quick))


@pytest.mark.parametrize("reason", ["collapsed", "budget"])
def test_a_run_that_stopped_early_stays_stopped_when_resumed(small_data, tmp_path, reason):
    from pipeline.training.checkpoints import load_checkpoint, save_checkpoint

    state = fresh_state(small_data, CFG)
    state.stop_reason = reason  # as fit leaves it in the checkpoint of the epoch it stopped at
    path = save_checkpoint(tmp_path / "c.pt", state, TrainingPlan(), CFG)
    resumed = load_checkpoint(path, CFG, TrainingPlan(), torch.device("cpu"))
    assert resumed.stop_reason == reason
    resumed = fit(resumed, small_data, CFG, TrainingPlan())
    assert resumed.epoch == 0 and not resumed.history and resumed.stop_reason == reason


@pytest.mark.parametrize("deterministic", [False, True])
def test_cudnn_never_autotunes(deterministic):
    """A growing run meets new shapes at each growth and, pruned, a new last batch every epoch:
    cuDNN's autotuner would time its kernels again for each (docs/results/gpu/cudnn)."""
    torch.backends.cudnn.benchmark = True
    seed_everything(0, deterministic)
    assert torch.backends.cudnn.benchmark is False

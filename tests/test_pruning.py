"""Loss-aware pruning: what it leaves out, how it reweights, and that a run can resume it."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.curriculum.config import CurriculumConfig
from pipeline.curriculum.diet import make_pruner
from pipeline.curriculum.pruning import LossPruner, PruningError
from pipeline.curriculum.strategies import make_curriculum
from pipeline.training.config import TrainConfig

N = 1000


def _seen(pruner: LossPruner) -> LossPruner:
    """Half the examples well learned (loss 0.1), half not (loss 2.0)."""
    positions = torch.arange(N)
    pruner.record(positions, torch.where(positions < N // 2, 0.1, 2.0))
    return pruner


def test_only_well_learned_examples_are_left_out_and_the_kept_ones_weigh_for_them():
    pruner = _seen(LossPruner(N, rate=0.4, anneal=0.25, start=1, seed=0))
    kept, weights = pruner.select(1, 8, torch.arange(N))
    assert set(range(N // 2, N)) <= set(kept.tolist())  # the not-yet-learned half stays whole
    dropped = N - len(kept)
    assert 0.3 * N / 2 < dropped < 0.5 * N / 2  # about rate of the well-learned half
    assert pruner.pruned_share == pytest.approx(dropped / N)
    easy_kept = kept[kept < N // 2]
    assert torch.allclose(weights[easy_kept], torch.tensor(1 / 0.6))
    assert torch.all(weights[N // 2 :] == 1)
    # Unbiased in expectation: the kept well-learned examples carry as much total weight as all
    # of them would (within sampling error of a binomial draw).
    assert float(weights[easy_kept].sum()) == pytest.approx(N / 2, rel=0.15)


def test_examples_never_trained_on_are_always_kept():
    pruner = LossPruner(N, rate=0.9, start=1)
    pruner.record(torch.arange(N // 2), torch.full((N // 2,), 0.01))
    kept, _ = pruner.select(1, 8, torch.arange(N))
    assert set(range(N // 2, N)) <= set(kept.tolist())


def test_pruning_waits_for_its_start_and_stops_for_the_annealing_tail():
    pruner = _seen(LossPruner(N, rate=0.5, anneal=0.25, start=2, seed=0))
    active = [pruner.active(epoch, 8) for epoch in range(8)]
    assert active == [False, False, True, True, True, True, False, False]
    for epoch in (0, 1, 6, 7):
        kept, weights = pruner.select(epoch, 8, torch.arange(N))
        assert len(kept) == N and weights is None and pruner.pruned_share == 0
    # Losses matter only in the epochs just before a pruning epoch.
    assert [pruner.needs_losses(epoch, 8) for epoch in range(8)] == [
        False,
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_the_draw_depends_on_seed_and_epoch_only():
    a, b = _seen(LossPruner(N, 0.5, seed=1)), _seen(LossPruner(N, 0.5, seed=1))
    assert torch.equal(a.select(3, 8, torch.arange(N))[0], b.select(3, 8, torch.arange(N))[0])
    assert not torch.equal(a.select(3, 8, torch.arange(N))[0], a.select(4, 8, torch.arange(N))[0])
    other = _seen(LossPruner(N, 0.5, seed=2))
    assert not torch.equal(a.select(3, 8, torch.arange(N))[0], other.select(3, 8, torch.arange(N))[0])


def test_only_the_curriculums_positions_are_considered():
    pruner = _seen(LossPruner(N, 0.5, seed=0))
    chosen = torch.arange(N // 2, N)  # the curriculum's epoch: only the not-yet-learned half
    kept, _ = pruner.select(1, 8, chosen)
    # Among these the mean loss is 2.0 and none lies below it: nothing is pruned.
    assert torch.equal(kept, chosen)


def test_state_round_trips_and_a_mismatched_one_is_refused():
    pruner = _seen(LossPruner(N, 0.5))
    copy = LossPruner(N, 0.5)
    copy.load_state_dict(pruner.state_dict())
    assert torch.equal(copy.last_loss, pruner.last_loss)
    with pytest.raises(PruningError, match="covers"):
        LossPruner(N + 1, 0.5).load_state_dict(pruner.state_dict())
    with pytest.raises(PruningError, match="without --prune"):
        LossPruner(N, 0.5).load_state_dict({})
    assert math.isinf(float(LossPruner(N, 0.5).last_loss[0]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 1.0}, "--prune"),
        ({"rate": -0.1}, "--prune"),
        ({"rate": 0.5, "anneal": 1.5}, "--prune-anneal"),
        ({"rate": 0.5, "start": 0}, "--prune-from"),
    ],
)
def test_bad_pruning_options_are_refused(kwargs, message):
    with pytest.raises(PruningError, match=message):
        LossPruner(N, **kwargs)


def _tiers_curriculum(boundaries, pacing="tiers", rejoin=0.0):
    difficulty = torch.linspace(0, 1, N)
    tiers = torch.div(torch.arange(N) * 3, N, rounding_mode="floor")
    return make_curriculum(
        difficulty, tiers, epochs=12, n=N, pacing=pacing, boundaries=boundaries, rejoin=rejoin
    )


def test_pruning_starts_when_the_easy_examples_retire_or_after_the_first_growth_unless_told_otherwise():
    train = TrainConfig(epochs=12)
    assert make_pruner(CurriculumConfig(), train, None, N) is None
    retiring = make_pruner(CurriculumConfig(prune=0.3), train, _tiers_curriculum([1, 2, 3]), N, 5)
    assert retiring.start == 3
    assert make_pruner(CurriculumConfig(prune=0.3), train, _tiers_curriculum([1, 2]), N).start == 1
    # the epoch after the growth at 4: the network and its diet never change in the same epoch
    assert make_pruner(CurriculumConfig(prune=0.3), train, _tiers_curriculum([1, 2]), N, 4).start == 5
    assert make_pruner(CurriculumConfig(prune=0.3), train, None, N, 0).start == 1  # growth before epoch 1
    assert make_pruner(CurriculumConfig(prune=0.3), train, None, N).start == 1
    told = make_pruner(CurriculumConfig(prune=0.3, prune_from=5), train, _tiers_curriculum([1, 2, 3]), N)
    assert told.start == 5


def test_a_pruning_that_would_never_prune_is_refused_unless_it_was_left_automatic():
    train = TrainConfig(epochs=12)
    with pytest.raises(PruningError, match="--prune-from 11 prunes no epoch: .* from 11 of 12 whole"):
        make_pruner(CurriculumConfig(prune=0.3, prune_from=11), train, None, N)
    with pytest.raises(PruningError, match="--prune-from"):
        make_pruner(CurriculumConfig(prune=0.3, prune_from=-1), train, None, N)
    # Easy examples retiring in the annealing tail: nothing is left to prune, so no pruner.
    assert make_pruner(CurriculumConfig(prune=0.3), train, _tiers_curriculum([3, 6, 11]), N) is None


def test_pruning_stops_where_the_retired_easy_examples_rejoin():
    train, cfg = TrainConfig(epochs=12), CurriculumConfig(prune=0.3, rejoin=0.25)
    tiers = make_pruner(cfg, train, _tiers_curriculum([1, 2, 3], rejoin=0.25), N)
    assert (tiers.start, tiers.anneal, tiers.first_annealed(12)) == (3, 0.25, 9)
    # A pacing function retires nothing, so nothing rejoins: pruning keeps its own tail.
    paced = make_pruner(cfg, train, _tiers_curriculum([1, 2, 3], pacing="linear", rejoin=0.25), N)
    assert (paced.start, paced.anneal) == (1, 0.125)

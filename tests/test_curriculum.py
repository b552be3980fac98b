"""Pacing functions (properties), curriculum orders and their controls, tiers, self-paced."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.builder import build_model
from models.spec import resolve_spec
from pipeline.curriculum.checks import CurriculumError
from pipeline.curriculum.pacing import PACINGS, get_pacing
from pipeline.curriculum.strategies import curriculum_from_dict, make_curriculum
from pipeline.data.dataset import Data, Split
from pipeline.training.loop import evaluate_split

N = 600
fractions = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, allow_nan=False)
progress = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@pytest.fixture(scope="module")
def difficulty() -> torch.Tensor:
    return torch.rand(N, generator=torch.Generator().manual_seed(1))  # (N,)


@pytest.fixture(scope="module")
def tiers(difficulty) -> torch.Tensor:
    # Terciles of the difficulty, as the score step makes them: 200 examples per tier.
    rank = torch.argsort(torch.argsort(difficulty))
    return rank * 3 // N  # (N,) 0/1/2


def tiny_data(n: int, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    split = Split(
        torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g), torch.arange(n)
    )
    return Data("random", [str(c) for c in range(10)], split, split, None, "src", "digest")


# --- pacing functions --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PACINGS))
@settings(max_examples=150, deadline=None)
@given(a=fractions, b=fractions, t1=progress, t2=progress)
def test_pacing_is_monotone_from_b_to_exactly_one(name, a, b, t1, t2):
    g = PACINGS[name]
    lo, hi = sorted((t1, t2))
    assert b <= g(lo, a, b) <= g(hi, a, b) <= 1.0
    assert g(0.0, a, b) == pytest.approx(b, abs=1e-9)
    assert g(a, a, b) == 1.0
    assert g(max(a, hi), a, b) == 1.0


def test_pacings_follow_the_papers_shapes():
    a, b = 0.5, 0.2
    half = {name: g(0.25, a, b) for name, g in PACINGS.items()}  # halfway to a
    assert half["linear"] == pytest.approx(0.6)
    assert half["quad"] == pytest.approx(0.2 + 0.8 * 0.25)
    assert half["root"] == pytest.approx(0.2 + 0.8 * math.sqrt(0.5))
    assert half["step"] == b
    assert half["exp"] < half["quad"] < half["linear"] < half["root"] < half["log"]


@pytest.mark.parametrize(("a", "b"), [(0.0, 0.5), (1.5, 0.5), (0.5, 0.0), (0.5, float("nan"))])
def test_pacing_rejects_fractions_outside_unit_interval(a, b):
    with pytest.raises(CurriculumError, match=r"must be a fraction in \(0, 1\]"):
        PACINGS["linear"](0.1, a, b)


def test_unknown_names_list_the_known_ones(difficulty):
    with pytest.raises(ValueError, match="known: linear, quad, root, step, exp, log"):
        get_pacing("cosine")
    with pytest.raises(ValueError, match=r"known: none, tiers, linear.*self-paced"):
        make_curriculum(difficulty, epochs=10, n=N, pacing="cosine")
    with pytest.raises(ValueError, match="known: curriculum, anti, random"):
        make_curriculum(difficulty, epochs=10, n=N, pacing="linear", order="reverse")


# --- difficulty-sorted pacings and their controls ----------------------------------------


@pytest.mark.parametrize("pacing", list(PACINGS))
def test_controls_use_the_curriculums_count_every_epoch(pacing, difficulty, tiers):
    epochs = 10
    made = {
        order: make_curriculum(
            difficulty, tiers, epochs=epochs, n=N, pacing=pacing, order=order, a=0.6, b=0.1
        )
        for order in ("curriculum", "anti", "random")
    }
    for epoch in range(epochs):
        counts = {order: len(c.positions(epoch)) for order, c in made.items()}
        expected = math.ceil(round(PACINGS[pacing](epoch / epochs, 0.6, 0.1) * N, 6))
        assert counts == dict.fromkeys(made, expected)
    assert len(made["curriculum"].positions(epochs - 1)) == N  # t = 0.9 >= a


def test_curriculum_takes_the_easiest_and_anti_the_hardest(difficulty):
    easy = make_curriculum(difficulty, epochs=10, n=N, pacing="linear", order="curriculum", b=0.25).positions(
        0
    )
    hard = make_curriculum(difficulty, epochs=10, n=N, pacing="linear", order="anti", b=0.25).positions(0)
    rand = make_curriculum(difficulty, epochs=10, n=N, pacing="linear", order="random", b=0.25).positions(0)
    assert len(easy) == len(hard) == len(rand) == N // 4
    chosen = torch.zeros(N, dtype=torch.bool)
    chosen[easy] = True
    assert difficulty[chosen].max() <= difficulty[~chosen].min()  # exactly the easiest quarter
    assert difficulty[easy].mean() < difficulty[rand].mean() < difficulty[hard].mean()
    assert torch.equal(easy, easy.sort().values) and easy.dtype == torch.long


def test_ties_are_broken_by_position():
    flat = torch.zeros(10)
    for order in ("curriculum", "anti"):
        c = make_curriculum(flat, epochs=4, n=10, pacing="linear", order=order, b=0.3)
        assert c.positions(0).tolist() == [0, 1, 2]


def test_same_seed_same_positions_and_other_seed_others(difficulty):
    make = lambda seed: make_curriculum(
        difficulty, epochs=5, n=N, pacing="root", order="random", b=0.3, seed=seed
    )
    for epoch in range(5):
        assert torch.equal(make(3).positions(epoch), make(3).positions(epoch))
    assert not torch.equal(make(3).positions(0), make(4).positions(0))
    # Nested: an epoch's random examples stay in use in every later epoch.
    c = make(3)
    earlier = set(c.positions(0).tolist())
    assert earlier <= set(c.positions(1).tolist())


def test_none_uses_everything(difficulty):
    c = make_curriculum(epochs=3, n=50, pacing="none")
    assert torch.equal(c.positions(0, data=tiny_data(50)), torch.arange(50))
    assert c.epoch_info(0) == {"curriculum/fraction": 1.0}


# --- tiers -------------------------------------------------------------------------------


def test_tiers_add_medium_then_hard_at_the_boundaries(difficulty, tiers):
    c = make_curriculum(difficulty, tiers, epochs=6, n=N, pacing="tiers", boundaries=[2, 4])
    expect = {0: {0}, 1: {0}, 2: {0, 1}, 3: {0, 1}, 4: {0, 1, 2}, 5: {0, 1, 2}}
    for epoch, allowed in expect.items():
        pos = c.positions(epoch)
        assert set(tiers[pos].tolist()) == allowed
        assert len(pos) == sum(int((tiers == t).sum()) for t in allowed)  # every example of each tier


def test_tiers_anti_is_hard_first_and_random_matches_counts(difficulty, tiers):
    anti = make_curriculum(difficulty, tiers, epochs=6, n=N, pacing="tiers", order="anti", boundaries=[2, 4])
    rand = make_curriculum(
        difficulty, tiers, epochs=6, n=N, pacing="tiers", order="random", boundaries=[2, 4]
    )
    assert set(tiers[anti.positions(0)].tolist()) == {2}
    assert set(tiers[anti.positions(2)].tolist()) == {1, 2}
    for epoch, expected in ((0, 200), (3, 400), (5, 600)):
        assert len(anti.positions(epoch)) == len(rand.positions(epoch)) == expected
    assert set(tiers[rand.positions(0)].tolist()) == {0, 1, 2}


def test_tiers_retire_easy_examples_at_a_third_boundary(difficulty, tiers):
    c = make_curriculum(difficulty, tiers, epochs=6, n=N, pacing="tiers", boundaries=[1, 2, 4])
    expect = {0: {0}, 1: {0, 1}, 2: {0, 1, 2}, 3: {0, 1, 2}, 4: {1, 2}, 5: {1, 2}}
    for epoch, allowed in expect.items():
        pos = c.positions(epoch)
        assert set(tiers[pos].tolist()) == allowed
        assert len(pos) == sum(int((tiers == t).sum()) for t in allowed)
    assert [c.stage(e) for e in range(6)] == [0, 1, 2, 2, 3, 3]
    # The controls drop as many examples: anti its easiest-ranked (it began with the hardest),
    # random another random set.
    anti = make_curriculum(
        difficulty, tiers, epochs=6, n=N, pacing="tiers", order="anti", boundaries=[1, 2, 4]
    )
    rand = make_curriculum(
        difficulty, tiers, epochs=6, n=N, pacing="tiers", order="random", boundaries=[1, 2, 4]
    )
    assert set(tiers[anti.positions(4)].tolist()) == {0, 1}
    assert len(anti.positions(5)) == len(rand.positions(5)) == len(c.positions(5)) == 400
    assert set(tiers[rand.positions(4)].tolist()) == {0, 1, 2}
    assert c.epoch_info(4)["curriculum/tier_easy_coverage"] == 0.0


def test_retired_easy_examples_rejoin_for_the_final_fraction(difficulty, tiers):
    c = make_curriculum(difficulty, tiers, epochs=8, n=N, pacing="tiers", boundaries=[1, 2, 4], rejoin=0.25)
    # 8 epochs: the last quarter (epochs 6 and 7) uses every tier again.
    assert [c.stage(e) for e in range(8)] == [0, 1, 2, 2, 3, 3, 2, 2]
    assert c.first_rejoined() == 6
    assert set(tiers[c.positions(5)].tolist()) == {1, 2}
    assert len(c.positions(6)) == len(c.positions(7)) == N
    # The random-order control follows the same counts.
    rand = make_curriculum(
        difficulty, tiers, epochs=8, n=N, pacing="tiers", order="random", boundaries=[1, 2, 4], rejoin=0.25
    )
    assert [rand.count(e) for e in range(8)] == [c.count(e) for e in range(8)]
    with pytest.raises(CurriculumError, match="--rejoin 1.0 must be a fraction"):
        make_curriculum(difficulty, tiers, epochs=8, n=N, pacing="tiers", rejoin=1.0)


@pytest.mark.parametrize("pacing", ["none", "tiers", "linear", "root"])
def test_held_back_examples_never_train_and_every_order_takes_as_many(difficulty, tiers, pacing):
    ranked = torch.argsort(difficulty).tolist()
    easiest, hardest = set(ranked[:180]), set(ranked[N - 180 :])  # hold back 0.3 of 600
    runs = {
        order: make_curriculum(
            difficulty, tiers, epochs=6, n=N, pacing=pacing, order=order, boundaries=[1, 2, 4], hold_back=0.3
        )
        for order in ("curriculum", "anti", "random")
    }
    used = {order: set() for order in runs}
    for epoch in range(6):
        counts = {order: len(c.positions(epoch)) for order, c in runs.items()}
        assert len(set(counts.values())) == 1, counts  # matched controls
        for order, c in runs.items():
            used[order] |= set(c.positions(epoch).tolist())
    assert used["curriculum"] == set(range(N)) - hardest  # all the rest trains at some point
    assert used["anti"] == set(range(N)) - easiest  # anti holds back the end of its order
    assert len(used["random"]) == N - 180 and 0 < len(hardest & used["random"]) < 180
    assert runs["curriculum"].ordering.held == 180
    assert runs["curriculum"].to_dict()["hold_back"] == 0.3  # checkpoints and plan.json carry it


def test_hold_back_on_pacing_functions_paces_over_the_kept_examples(difficulty):
    c = make_curriculum(difficulty, epochs=4, n=N, pacing="linear", a=0.5, b=0.5, hold_back=0.5)
    assert c.count(0) == 150 and c.count(2) == c.count(3) == 300
    assert float(difficulty[c.positions(3)].max()) <= float(torch.sort(difficulty).values[299])


def test_hold_back_is_refused_where_it_cannot_work(difficulty, tiers):
    with pytest.raises(CurriculumError, match="--hold-back 1.0 must be a share in"):
        make_curriculum(difficulty, tiers, epochs=6, n=N, pacing="tiers", hold_back=1.0)
    with pytest.raises(CurriculumError, match="not self-paced"):
        make_curriculum(difficulty, epochs=6, n=N, pacing="self-paced", hold_back=0.2)
    with pytest.raises(CurriculumError, match="needs difficulty scores"):
        make_curriculum(tiers=tiers, epochs=6, n=N, pacing="tiers", hold_back=0.2)


def test_tiers_default_boundaries_are_thirds_of_a_times_epochs(tiers):
    assert make_curriculum(tiers=tiers, epochs=12, n=N, pacing="tiers", a=0.75).tier_boundaries() == [3, 6]
    assert make_curriculum(tiers=tiers, epochs=10, n=N, pacing="tiers", a=1.0).tier_boundaries() == [4, 7]


def test_unbalanced_tier_controls_still_match_counts():
    tiers = torch.tensor([0] * 6 + [1] * 3 + [2] * 1)
    anti = make_curriculum(tiers=tiers, epochs=3, n=10, pacing="tiers", order="anti", boundaries=[1, 2])
    assert len(anti.positions(0)) == 6  # as many as the easy tier: hard first, then medium
    assert sorted(tiers[anti.positions(0)].tolist()) == [0, 0, 1, 1, 1, 2]


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [
        ([5, 3], "in order"),
        ([2, 5, 4], "in order"),
        ([-1, 3], "non-negative"),
        ([2], "two or three epochs"),
        ([1, 2, 3, 4], "two or three epochs"),
        ([2, 12], "tier boundary epoch 12 is past the last epoch 11 of --epochs 12"),
    ],
)
def test_bad_tier_boundaries_fail_with_a_reason(tiers, boundaries, message):
    with pytest.raises(CurriculumError, match=message):
        make_curriculum(tiers=tiers, epochs=12, n=N, pacing="tiers", boundaries=boundaries)


# --- inputs ------------------------------------------------------------------------------


def test_bad_inputs_fail_with_one_line_reasons(difficulty, tiers):
    cases = [
        (
            lambda: make_curriculum(difficulty, tiers[:-1], epochs=2, n=N, pacing="linear"),
            "difficulty has 600 rows but tiers has 599",
        ),
        (
            lambda: make_curriculum(torch.tensor([0.1, float("nan")]), epochs=2, n=2, pacing="linear"),
            "NaN score",
        ),
        (
            lambda: make_curriculum(tiers=torch.tensor([0, 3]), epochs=2, n=2, pacing="tiers"),
            "tiers must be 0, 1 or 2",
        ),
        (
            lambda: make_curriculum(tiers=torch.tensor([0.0, 1.0]), epochs=2, n=2, pacing="tiers"),
            "integer tensor",
        ),
        (lambda: make_curriculum(epochs=2, n=N, pacing="tiers"), "needs tiers"),
        (lambda: make_curriculum(tiers=tiers, epochs=2, n=N, pacing="linear"), "needs difficulty"),
        (
            lambda: make_curriculum(difficulty, epochs=2, n=N, pacing="linear", a=1.2),
            r"a=1.2 must be a fraction",
        ),
        (
            lambda: make_curriculum(difficulty, epochs=2, n=N, pacing="linear").positions(
                0, data=tiny_data(10)
            ),
            "cover 600 examples but the training split has 10",
        ),
        (
            lambda: make_curriculum(difficulty, epochs=2, n=N, pacing="linear").positions(2),
            "epoch 2 is outside 0..1",
        ),
        # Built for one run: its epochs and training-set size are checked once, up front.
        (lambda: make_curriculum(difficulty, epochs=0, n=N, pacing="linear"), "epochs must be a positive"),
        (lambda: make_curriculum(difficulty, epochs=2, n=10, pacing="linear"), "cover 600 examples but"),
        (
            lambda: make_curriculum(torch.zeros(10), epochs=2, n=10, pacing="none", hold_back=0.95),
            "--hold-back 0.95 holds back all 10 training examples",
        ),
    ]
    for make, message in cases:
        with pytest.raises(CurriculumError, match=message) as info:
            make()
        assert "\n" not in str(info.value)


# --- self-paced --------------------------------------------------------------------------


def test_self_paced_picks_the_models_lowest_loss_examples():
    torch.manual_seed(0)
    data = tiny_data(96)
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    model.train()
    c = make_curriculum(
        epochs=4, n=96, pacing="self-paced", b=0.25, a=0.5, eval_batch_size=40, tiers=torch.arange(96) % 3
    )
    pos = c.positions(0, model, data)
    assert model.training  # the evaluation pass leaves the model as it found it
    loss = evaluate_split(model, data.train, 40).per_example_loss  # the same batches: the same losses
    chosen = torch.zeros(96, dtype=torch.bool)
    chosen[pos] = True
    assert chosen.sum() == 24
    assert loss[chosen].max() <= loss[~chosen].min()

    anti = make_curriculum(
        epochs=4, n=96, pacing="self-paced", order="anti", b=0.25, a=0.5, eval_batch_size=40
    )
    hardest = torch.zeros(96, dtype=torch.bool)
    hardest[anti.positions(0, model, data)] = True
    assert hardest.sum() == 24 and loss[hardest].min() >= loss[~hardest].max()
    assert len(c.positions(2, model, data)) == 96  # t = a: all data, no evaluation needed

    row = c.schedule_table()[0]
    assert row["count"] == 24
    assert sum(row[f"tier_{t}_share"] for t in ("easy", "medium", "hard")) == pytest.approx(1.0)
    restored = make_curriculum(
        epochs=4, n=96, pacing="self-paced", b=0.25, a=0.5, eval_batch_size=40, tiers=torch.arange(96) % 3
    )
    restored.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert restored.schedule_table() == c.schedule_table()


def test_self_paced_without_model_says_what_it_needs():
    with pytest.raises(CurriculumError, match="needs the model and data"):
        make_curriculum(epochs=4, n=10, pacing="self-paced").positions(0, None, tiny_data(10))


# --- reporting and checkpoints -----------------------------------------------------------


def test_schedule_table_and_epoch_info_describe_the_positions(difficulty, tiers):
    c = make_curriculum(difficulty, tiers, epochs=6, n=N, pacing="tiers", a=1.0)
    table = c.schedule_table()
    json.dumps(table)
    assert [row["count"] for row in table] == [len(c.positions(e)) for e in range(6)]
    assert [row["tiers_present"] for row in table] == ["easy"] * 2 + ["easy+medium"] * 2 + [
        "easy+medium+hard"
    ] * 2
    info = c.epoch_info(2)
    assert info == {
        "curriculum/stage": 1.0,
        "curriculum/fraction": 400 / 600,
        "curriculum/tier_easy_share": 0.5,
        "curriculum/tier_easy_coverage": 1.0,
        "curriculum/tier_medium_share": 0.5,
        "curriculum/tier_medium_coverage": 1.0,
        "curriculum/tier_hard_share": 0.0,
        "curriculum/tier_hard_coverage": 0.0,
    }


def test_config_round_trips_and_checkpoints_refuse_another_curriculum(difficulty, tiers):
    c = make_curriculum(difficulty, tiers, epochs=5, n=N, pacing="exp", order="anti", a=0.5, b=0.1, seed=7)
    config = json.loads(json.dumps(c.to_dict()))
    again = curriculum_from_dict(config, 5, difficulty, tiers)
    assert torch.equal(again.positions(1), c.positions(1))
    again.load_state_dict(json.loads(json.dumps(c.state_dict())))
    with pytest.raises(CurriculumError, match="order 'anti' \\(checkpoint\\) vs 'curriculum'"):
        make_curriculum(difficulty, tiers, epochs=5, n=N, pacing="exp", a=0.5, b=0.1, seed=7).load_state_dict(
            c.state_dict()
        )
    with pytest.raises(CurriculumError, match="other difficulty scores"):
        curriculum_from_dict(config, 5, difficulty.flip(0), tiers).load_state_dict(c.state_dict())


# --- pinned: the same examples every epoch, whatever the code's shape ---------------------


def _pinned_cases():
    for order in ("curriculum", "anti", "random"):
        for hold_back in (0.0, 0.3):
            yield "none", order, {"hold_back": hold_back}
            for boundaries in (None, [2, 4], [1, 2, 4]):
                yield "tiers", order, {"boundaries": boundaries, "hold_back": hold_back}
            yield "tiers", order, {"boundaries": [1, 2, 4], "rejoin": 0.25, "hold_back": hold_back}
            for pacing in PACINGS:
                yield pacing, order, {"a": 0.6, "b": 0.15, "seed": 3, "hold_back": hold_back}
    yield "self-paced", "random", {"a": 0.6, "b": 0.15, "seed": 3}


def test_every_kind_order_and_hold_back_picks_the_pinned_examples():
    """A digest of each epoch's positions, the schedule table and the epoch metrics of every
    static pacing, order and hold-back (and self-paced's random control), recorded before the
    curriculum was split into strategies: a refactoring must not move a single example."""
    g = torch.Generator().manual_seed(1)
    scores = torch.round(torch.rand(N, generator=g) * 50) / 50  # (N,) with ties on purpose
    tiers = torch.argsort(torch.argsort(scores)) * 3 // N
    epochs, digest = 8, hashlib.sha256()
    for pacing, order, options in _pinned_cases():
        c = make_curriculum(scores, tiers, epochs=epochs, n=N, pacing=pacing, order=order, **options)
        for epoch in range(epochs):
            digest.update(c.positions(epoch).numpy().tobytes())
            digest.update(json.dumps(c.epoch_info(epoch)).encode())
        digest.update(json.dumps([c.schedule_table(), c.to_dict()]).encode())
    # re-pinned when the evaluation batch's default became 0 (the device's): with
    # eval_batch_size=1024 given, the old digest bb9925a14d55b6cd still comes out
    assert digest.hexdigest()[:16] == "ed3c76232372498e"

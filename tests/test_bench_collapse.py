"""scripts/bench_collapse.py's own logic: which seeds it trains and how it counts (its training
is the pipeline's train_dynamic, tested elsewhere)."""

from __future__ import annotations

import pytest

from scripts.bench_collapse import summarise
from scripts.bench_common import parse_seeds


def test_seeds_are_a_range_or_a_list():
    assert parse_seeds("600-603") == [600, 601, 602, 603]
    assert parse_seeds("600,605") == [600, 605]


def test_the_summary_counts_every_verdict_before_any_mean():
    rows = [
        {"health": "ok", "growth_dips": [-0.01], "val_acc": [0.5, 0.76]},
        {"health": "collapsed", "growth_dips": [-0.5], "val_acc": [0.6, 0.1]},
        {"health": "diverged", "error": "non-finite loss"},
    ]
    lines = summarise(rows).splitlines()
    assert lines[0] == "3 runs: 1 collapsed, 1 diverged, 0 dipped, 1 ok"
    assert lines[1] == "growth dip, points: median -25.5, worst -50.0"
    assert lines[2].startswith("final val/acc: mean 0.4300") and lines[2].endswith("min 0.1000")


def test_the_seeds_that_chose_the_defaults_are_refused():
    from click.testing import CliRunner

    from scripts.bench_collapse import main

    result = CliRunner().invoke(main, ["--seeds", "1-3"])
    assert result.exit_code == 2 and "chose the defaults" in result.output
    with pytest.raises(ValueError):
        parse_seeds("a-b")

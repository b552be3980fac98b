"""Known-input checks of the comparison statistics."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from pipeline.report.stats import paired_test, summary, time_to_target

T_975 = {2: 4.302652729911275, 4: 2.7764451051977987}  # Student-t 97.5% quantiles by degrees of freedom


def test_summary_matches_hand_computed_t_interval():
    out = summary([1.0, 2.0, 3.0, 4.0, 5.0])
    half = T_975[4] * math.sqrt(2.5) / math.sqrt(5)  # std (ddof=1) of 1..5 is sqrt(2.5)
    assert out["n"] == 5
    assert out["mean"] == pytest.approx(3.0)
    assert out["std"] == pytest.approx(math.sqrt(2.5))
    assert out["ci_low"] == pytest.approx(3.0 - half)
    assert out["ci_high"] == pytest.approx(3.0 + half)


def test_summary_drops_non_finite_values():
    assert summary([0.8, float("nan"), 0.9, 0.85])["n"] == 3
    assert summary([0.8, float("nan"), 0.9, 0.85])["mean"] == pytest.approx(0.85)


@pytest.mark.parametrize("values", [[0.7], []])
def test_summary_short_input_gives_nan_spread_not_an_error(values):
    out = summary(values)
    assert out["n"] == len(values)
    assert (out["mean"] == 0.7) if values else math.isnan(out["mean"])
    assert all(math.isnan(out[k]) for k in ("std", "ci_low", "ci_high"))


def test_paired_test_matches_scipy():
    a = np.array([0.91, 0.925, 0.93, 0.94])
    b = np.array([0.90, 0.90, 0.915, 0.905])
    out = paired_test(a, b)
    diff = a - b
    half = sps.t.ppf(0.975, 3) * diff.std(ddof=1) / 2
    assert out["n"] == 4
    assert out["mean_diff"] == pytest.approx(diff.mean())
    assert out["ci_low"] == pytest.approx(diff.mean() - half)
    assert out["ci_high"] == pytest.approx(diff.mean() + half)
    ref = sps.ttest_rel(a, b)
    assert out["t_stat"] == pytest.approx(ref.statistic)
    assert out["p_t"] == pytest.approx(ref.pvalue)
    assert out["p_wilcoxon"] == pytest.approx(sps.wilcoxon(diff).pvalue)
    assert out["within_noise"] is False  # every seed improved by 1 to 3.5 points


def test_paired_test_hand_computed_interval_and_noise():
    # differences +0.01, -0.01, +0.006: mean 0.002, an interval that straddles 0
    a, b = [0.81, 0.79, 0.806], [0.80, 0.80, 0.80]
    out = paired_test(a, b)
    d = np.array([0.01, -0.01, 0.006])
    half = T_975[2] * d.std(ddof=1) / math.sqrt(3)
    assert out["mean_diff"] == pytest.approx(0.002)
    assert out["ci_low"] == pytest.approx(0.002 - half)
    assert out["ci_high"] == pytest.approx(0.002 + half)
    assert out["within_noise"] is True


def test_paired_test_constant_shift_is_certain_and_zero_shift_is_noise():
    shifted = paired_test([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    assert (shifted["ci_low"], shifted["ci_high"]) == (1.0, 1.0)
    assert shifted["within_noise"] is False
    assert shifted["p_t"] == 0.0

    same = paired_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert same["mean_diff"] == 0.0
    assert same["within_noise"] is True
    assert math.isnan(same["p_wilcoxon"])  # all differences zero
    assert math.isnan(same["p_t"])


def test_paired_test_one_pair_is_no_test():
    out = paired_test([0.9, float("nan")], [0.8, 0.85])  # the NaN pair is dropped
    assert out["n"] == 1
    assert out["mean_diff"] == pytest.approx(0.1)
    assert all(math.isnan(out[k]) for k in ("ci_low", "ci_high", "t_stat", "p_t", "p_wilcoxon"))
    assert out["within_noise"] is True  # no interval: no difference can be claimed


def test_paired_test_refuses_unequal_lengths():
    with pytest.raises(ValueError, match="equally long"):
        paired_test([1.0, 2.0], [1.0])


def test_time_to_target():
    history = pd.DataFrame(
        {
            "epoch": [0, 1, 2, 3],
            "val/acc": [0.5, 0.8, 0.9, 0.85],
            "time/cumulative_s": [10.0, 20.0, 30.0, 40.0],
        }
    )
    assert time_to_target(history, 0.8) == 20.0  # reaching it exactly counts
    assert time_to_target(history, 0.85) == 30.0  # the first time, not the last row above it
    assert math.isnan(time_to_target(history, 0.95))
    assert time_to_target(history, 0.85, clock="epoch") == 2
    with pytest.raises(ValueError, match="no column val/acc_hard"):
        time_to_target(history, 0.8, metric="val/acc_hard")

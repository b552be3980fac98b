"""Statistics for comparing runs over seeds: means with Student-t intervals, paired tests, and
time to a target accuracy. Pure functions of numbers and data frames; no MLflow, no plotting.

Non-finite values (NaN, inf) are dropped before anything is computed, so a run that lacks a
metric shrinks ``n`` instead of poisoning the mean; ``n`` always says how many values counted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

CONFIDENCE = 0.95
NAN = float("nan")


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _t_half_width(std: float, n: int) -> float:
    """Half-width of the two-sided Student-t interval for a mean of ``n`` values."""
    return float(sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * std / math.sqrt(n))


def summary(values: Iterable[float]) -> dict:
    """n, mean, std (ddof=1) and the 95% Student-t interval of the mean.

    With one value the mean is that value and std / interval are NaN (there is no spread to
    estimate); with none everything but ``n`` is NaN. Never raises on short input.
    """
    x = _finite(values)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": NAN, "std": NAN, "ci_low": NAN, "ci_high": NAN}
    mean = float(x.mean())
    if n == 1:
        return {"n": 1, "mean": mean, "std": NAN, "ci_low": NAN, "ci_high": NAN}
    std = float(x.std(ddof=1))
    half = _t_half_width(std, n)
    return {"n": n, "mean": mean, "std": std, "ci_low": mean - half, "ci_high": mean + half}


def paired_test(a: Iterable[float], b: Iterable[float]) -> dict:
    """Paired comparison of ``a`` against ``b`` (same length, element i of each from seed i).

    Returns n (pairs with both values finite), mean_diff (a - b), the 95% t interval of the
    mean difference, the paired t statistic and p-value (as ``scipy.stats.ttest_rel``), the
    Wilcoxon signed-rank p-value (NaN when n < 2 or every difference is zero), and
    ``within_noise``: the interval contains 0. With n < 2 there is no interval, so no difference
    can be claimed and ``within_noise`` is True; check ``n`` to tell the two cases apart.
    """
    a_arr = np.asarray(list(a), dtype=float).ravel()
    b_arr = np.asarray(list(b), dtype=float).ravel()
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"paired_test needs equally long inputs, got {len(a_arr)} and {len(b_arr)}")
    keep = np.isfinite(a_arr) & np.isfinite(b_arr)
    a_arr, b_arr = a_arr[keep], b_arr[keep]
    diff = a_arr - b_arr
    n = len(diff)
    out = {
        "n": n,
        "mean_diff": float(diff.mean()) if n else NAN,
        "ci_low": NAN,
        "ci_high": NAN,
        "t_stat": NAN,
        "p_t": NAN,
        "p_wilcoxon": NAN,
        "within_noise": True,
    }
    if n < 2:
        return out
    mean = out["mean_diff"]
    std = float(diff.std(ddof=1))
    if std == 0.0:
        # Every seed moved by exactly the same amount: the interval is a point, and the t test
        # degenerates (scipy returns NaN); a nonzero constant shift is as certain as it gets.
        out.update(ci_low=mean, ci_high=mean)
        if mean != 0.0:
            out.update(t_stat=math.copysign(math.inf, mean), p_t=0.0)
    else:
        half = _t_half_width(std, n)
        out.update(ci_low=mean - half, ci_high=mean + half)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # near-constant differences
            res = sps.ttest_rel(a_arr, b_arr)
        out.update(t_stat=float(res.statistic), p_t=float(res.pvalue))
    if np.any(diff != 0.0):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", (RuntimeWarning, UserWarning))
                out["p_wilcoxon"] = float(sps.wilcoxon(diff).pvalue)
        except ValueError:
            pass  # too few nonzero differences for scipy; stays NaN
    out["within_noise"] = bool(out["ci_low"] <= 0.0 <= out["ci_high"])
    return out


def time_to_target(
    history_df: pd.DataFrame,
    target: float,
    metric: str = "val/acc",
    clock: str = "time/cumulative_s",
) -> float:
    """The earliest ``clock`` value of a row whose ``metric`` is >= ``target``; NaN if none is."""
    missing = [col for col in (metric, clock) if col not in history_df.columns]
    if missing:
        raise ValueError(
            f"history has no column {', '.join(missing)}; it has {', '.join(map(str, history_df.columns))}"
        )
    if not math.isfinite(target):
        return NAN
    reached = history_df.loc[history_df[metric] >= target, clock].dropna()
    return float(reached.min()) if len(reached) else NAN


def roc_auc(scores: Iterable[float], positive: Iterable[bool]) -> float:
    """Area under the ROC curve of ``scores`` for finding the ``positive`` examples: the chance
    that a random positive scores above a random negative, ties counting half (Mann-Whitney U
    over mid-ranks). 0.5 is chance, 1 finds every positive first; NaN without both classes."""
    s = np.asarray(list(scores), dtype=float).ravel()
    pos = np.asarray(list(positive), dtype=bool).ravel()
    if s.shape != pos.shape:
        raise ValueError(f"roc_auc needs one label per score, got {len(s)} scores and {len(pos)} labels")
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return NAN
    ranks = sps.rankdata(s)  # mid-ranks: ties share their mean rank
    u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


# The family-wise error every Holm-corrected verdict is read at: a report's, a study's.
ALPHA = 0.05


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): the family-wise error over
    all of a study's comparisons stays at most alpha when each is read against alpha. NaN stays
    NaN and does not count toward the family's size."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(ranked)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for k, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - k) * p))
        adjusted[i] = running
    return adjusted

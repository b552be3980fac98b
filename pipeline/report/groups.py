"""The runs of a report in groups, each with the static baseline it is compared with.

Within a setting (``runs.setting_of``), runs are grouped by ``variant`` tag and final
architecture. A group's baseline is the group of variant ``static`` (entry point
``train_static``, no curriculum) of the same setting whose ``final_spec`` equals the group's,
compared as architectures: the spec's ``name`` is ignored, because a grown network is named after
its start spec while a static one is named after itself. Pairs are formed by seed; several runs of
one seed in one group are averaged into one value. A group whose static twin exists only in
another setting is reported unpaired, with the parameters that differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from models.errors import UserError
from models.spec import ArchSpec
from pipeline.budget.spec import Budget, parse_budget
from pipeline.report.metrics import TIME_TO_TARGET, fmt
from pipeline.report.runs import COMPARABILITY_KEYS, LENGTH_KEYS, setting_of
from pipeline.report.stats import time_to_target

BASELINE_VARIANT = "static"
BASELINE_ENTRY_POINT = "train_static"
# Default target: 95% of the matched baseline's mean final validation accuracy. At 99% most
# variants, whose final accuracy is a point or two below static's, never reached it and the
# column read n/a; 95% is reached by every variant that learns, so the times compare.
TARGET_FRACTION = 0.95


def spec_key(final_spec: str) -> str:
    """The architecture in ``final_spec`` as canonical JSON without its name ('' when absent).

    Read back through the spec format where it can be, so every layer carries every field of
    its type: a run logged before a field existed (convbn's ``activation``) keys as a run
    logged after it with the field at its default."""
    if not isinstance(final_spec, str) or not final_spec.strip():
        return ""
    try:
        spec = json.loads(final_spec)
    except json.JSONDecodeError:
        return final_spec.strip()
    if isinstance(spec, dict):
        # a spec this code cannot read is keyed as logged
        with contextlib.suppress(UserError, KeyError, TypeError, ValueError):
            spec = ArchSpec.from_dict(spec).to_dict()
        spec.pop("name", None)
    return json.dumps(spec, sort_keys=True)


def _spec_id(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()[:6] if key else "none"


@dataclass
class Group:
    label: str
    variant: str
    entry_point: str
    spec_key: str
    runs: pd.DataFrame  # the group's rows of runs_df, with a ``unit`` column (seed or run)
    setting: str = ""  # setting_of(params): runs of different settings are never compared
    setting_label: str = ""  # the setting's values that differ from the other settings' ('' if one)
    baseline: Group | None = None
    unmatched: str = ""  # why there is no baseline, when there is none
    target: float = math.nan  # target validation accuracy for time-to-target
    target_note: str = ""
    curves: int = 0  # runs with a validation curve in history.csv, for time-to-target
    variant_options: str = "{}"  # runs.variant_options: the growth and curriculum options beyond the tag
    # "": paired with the baseline at equal training length (same setting); "seconds" or
    # "flops": each run's budget was its seed's baseline run's cost (``--budget run:ID``)
    equal_cost: str = ""

    @property
    def spec_id(self) -> str:
        return _spec_id(self.spec_key)

    @property
    def budget_unit(self) -> str:
        """ "flops" or "seconds" when the group's runs were all given the same amount of that
        (``--budget 3e12flops``), so a baseline of its setting had the same budget; else ""."""
        given = _given_amount(json.loads(self.setting).get("budget", "") if self.setting else "")
        return given.unit if given else ""

    @property
    def is_baseline(self) -> bool:
        return (
            self.variant == BASELINE_VARIANT
            and self.entry_point == BASELINE_ENTRY_POINT
            and bool(self.spec_key)
        )

    def per_unit(self, metric: str) -> pd.Series:
        """One value per seed (duplicate runs of a seed averaged), NaN where not logged."""
        if metric not in self.runs.columns:
            return pd.Series(dtype=float)
        return self.runs.groupby("unit", sort=True)[metric].mean().astype(float)

    def has(self, metric: str) -> bool:
        return metric in self.runs.columns and bool(self.runs[metric].notna().any())

    def units_judged(self, verdict: str) -> list[str]:
        """The seeds (units) with a run whose health verdict is ``verdict``."""
        if "health" not in self.runs.columns:
            return []
        return sorted(set(self.runs.loc[self.runs["health"].fillna("") == verdict, "unit"]))

    def health_caveat(self) -> str:
        """What a mean over this group's seeds must say beside it: '' when no seed collapsed."""
        collapsed = self.units_judged("collapsed")
        return f"includes {len(collapsed)} collapsed seed(s): {', '.join(collapsed)}" if collapsed else ""


def make_groups(runs_df: pd.DataFrame, histories: dict, target_acc: float | None) -> list[Group]:
    runs = runs_df.copy()
    if "setting" not in runs.columns:
        runs["setting"] = setting_of({})
    if "budget_reference" not in runs.columns:
        runs["budget_reference"] = ""
    if "variant_options" not in runs.columns:
        runs["variant_options"] = "{}"
    for col in ("entry_point", "variant", "final_spec", "setting", "budget_reference", "variant_options"):
        runs[col] = runs[col].fillna("").astype(str)
    runs["variant"] = runs["variant"].replace("", "(no variant tag)")
    runs["spec_key"] = runs["final_spec"].map(spec_key)
    runs["unit"] = [
        f"seed {int(s)}" if pd.notna(s) else f"run {r}" for s, r in zip(runs["seed"], runs["run_id"])
    ]
    runs[TIME_TO_TARGET] = math.nan
    final_val = [_final_val_acc(row, histories.get(row["run_id"])) for _, row in runs.iterrows()]
    runs["val/acc"] = final_val

    settings = setting_labels(runs["setting"].unique())
    groups = []
    columns = ["setting", "variant", "entry_point", "spec_key", "variant_options"]
    for setting, variant, entry_point, key, options in (
        runs[columns].drop_duplicates().itertuples(index=False)
    ):
        rows = runs[(runs[columns] == (setting, variant, entry_point, key, options)).all(axis=1)]
        rows = rows.reset_index(drop=True)
        groups.append(
            Group(
                variant, variant, entry_point, key, rows, setting, settings[setting], variant_options=options
            )
        )
    _name_variant_options(groups)
    # Several groups under one variant in one setting (e.g. static runs of two architectures):
    # name the spec; several settings: name the setting too, so no label stands for two.
    counts = pd.Series([(g.setting, g.variant) for g in groups]).value_counts()
    for g in groups:
        if counts[(g.setting, g.variant)] > 1:
            g.label = f"{g.variant} [{g.spec_id}]"
        else:
            g.label = g.variant
        if g.setting_label:
            g.label = f"{g.label} ({g.setting_label})"
    groups.sort(key=lambda g: (g.setting_label, not g.is_baseline, g.label))

    baselines = {(g.setting, g.spec_key): g for g in groups if g.is_baseline}
    for g in groups:
        base = baselines.get((g.setting, g.spec_key)) if g.spec_key else None
        if base is None and not g.is_baseline:
            base, g.equal_cost = _equal_cost_baseline(
                g, [b for b in baselines.values() if b.spec_key == g.spec_key]
            )
        g.baseline = base if base is not g else None
        if g.baseline is None and not g.is_baseline:
            g.unmatched = _why_unmatched(g, [b for b in baselines.values() if b.spec_key == g.spec_key])
        ref = base or (g if g.is_baseline else None)
        if target_acc is not None:
            g.target, g.target_note = float(target_acc), "given"
        elif ref is not None and ref.has("val/acc"):
            base_mean = float(np.nanmean(ref.per_unit("val/acc")))
            g.target = TARGET_FRACTION * base_mean
            g.target_note = (
                f"{TARGET_FRACTION:.0%} of {ref.label}'s mean final val/acc {fmt('acc', base_mean)}"
            )
        else:
            g.target_note = "no target: no matched static baseline"
        with_curve = [r for r in g.runs["run_id"] if has_curve(histories.get(r))]
        g.curves = len(with_curve)
        g.runs[TIME_TO_TARGET] = [
            time_to_target(histories[r], g.target) if r in with_curve else math.nan for r in g.runs["run_id"]
        ]
    return groups


def _name_variant_options(groups: list[Group]) -> None:
    """Runs of one variant with other growth or curriculum options (``--growth-rewarm``,
    ``--tier-boundaries``, a custom schedule, ...) are separate variants, each named with the
    options in which it differs from the others."""
    kin: dict[tuple, list[Group]] = {}
    for g in groups:
        kin.setdefault((g.setting, g.variant, g.entry_point), []).append(g)
    for alike in kin.values():
        if len({g.variant_options for g in alike}) < 2:
            continue
        options = [json.loads(g.variant_options) for g in alike]
        for g, mine in zip(alike, options):
            differ = [k for k in sorted(mine) if any(o.get(k) != mine[k] for o in options)]
            g.variant = f"{g.variant} [{', '.join(f'{k}={mine[k]}' for k in differ)}]"


def _equal_cost_baseline(g: Group, candidates: list[Group]) -> tuple[Group | None, str]:
    """The static group ``g`` was given the cost of, run for run: every run of ``g`` has a
    ``--budget run:ID`` naming the same seed's run of one baseline of its architecture, whose
    setting is ``g``'s but for the training length. Returns (baseline, "seconds" or "flops")."""
    refs = g.runs["budget_reference"]
    if not len(refs) or not refs.astype(bool).all():
        return None, ""
    unit = "seconds" if ":s" in json.loads(g.setting).get("budget", "") else "flops"
    for base in candidates:
        if _but_length(base.setting) != _but_length(g.setting):
            continue
        seed_of = dict(zip(base.runs["run_id"], base.runs["unit"]))
        if all(seed_of.get(ref) == seed for ref, seed in zip(refs, g.runs["unit"])):
            return base, unit
    return None, ""


def _but_length(setting: str) -> dict[str, str]:
    """The values of a setting other than the training length (``LENGTH_KEYS``)."""
    return {k: v for k, v in json.loads(setting).items() if k not in LENGTH_KEYS}


def cost_frontier_lines(groups: list[Group]) -> list[tuple[str, list[Group]]]:
    """(variant, its groups) for each variant whose groups agree on everything but the training
    length and differ in it, so that a point is never joined to one of other data or precision;
    static groups of other architectures are lines of their own. In a stable order, for colours."""
    lines: dict[tuple[str, str, str], list[Group]] = {}
    for g in groups:
        if g.has("test/acc") and g.has("time/total_s") and g.has("train/flops_cumulative"):
            key = (json.dumps(_but_length(g.setting)), g.variant, g.spec_key if g.is_baseline else "")
            lines.setdefault(key, []).append(g)
    return [(key[1], line) for key, line in sorted(lines.items()) if len({g.setting for g in line}) > 1]


def setting_labels(settings: Iterable[str]) -> dict[str, str]:
    """A short name per setting: the values in which it differs from the others ('' if alone)."""
    parsed = {s: json.loads(s) for s in settings}
    if len(parsed) < 2:
        return dict.fromkeys(parsed, "")
    differ = [k for k in COMPARABILITY_KEYS if len({p.get(k, "") for p in parsed.values()}) > 1]
    # The digest only when nothing readable tells the settings apart; the resolved budget only
    # when the budgets as given do not (it follows from them).
    shown = [k for k in differ if k != "data_digest"] or differ
    if "budget" in shown and "budget_resolved" in shown:
        shown.remove("budget_resolved")

    def value(p: dict, key: str) -> str:
        if key == "budget" and not p.get(key):
            return f"{p.get('epochs') or '?'} epochs"  # no --budget: the run trained for --epochs
        given = _given_amount(p[key]) if key == "budget" else None
        if given and given.unit == "flops":
            return f"{given.amount:.3g} FLOPs"  # not all 17 digits it was given with
        return p.get(key, "") or "-"

    return {s: ", ".join(f"{k} {value(p, k)}" for k in shown) for s, p in parsed.items()}


def _given_amount(budget: str) -> Budget | None:
    """A ``--budget`` given as an amount of FLOPs or seconds, parsed; None for epochs, another
    run's cost or none."""
    if not budget or budget.startswith("run:"):
        return None
    try:
        parsed = parse_budget(budget, 1)
    except ValueError:
        return None
    return parsed if parsed.unit in ("flops", "seconds") else None


def _why_unmatched(g: Group, elsewhere: list[Group]) -> str:
    """Why ``g`` has no static baseline: none of its architecture, or only in other settings."""
    if not g.spec_key:
        return "its runs have no final_spec tag"
    if not elsewhere:
        return f"no static run with its final architecture {g.spec_id}"
    mine = json.loads(g.setting)
    reasons = []
    for base in elsewhere:
        theirs = json.loads(base.setting)
        differ = [
            f"{k} {mine.get(k, '') or '-'} vs {theirs.get(k, '') or '-'}"
            for k in COMPARABILITY_KEYS
            if mine.get(k, "") != theirs.get(k, "")
        ]
        reasons.append(f"{base.label} differs in {', '.join(differ)}")
    return f"static runs of its architecture {g.spec_id} are not comparable: " + "; ".join(reasons)


def has_curve(history: pd.DataFrame | None) -> bool:
    return history is not None and {"val/acc", "time/cumulative_s"} <= set(history.columns)


def _final_val_acc(row: pd.Series, history: pd.DataFrame | None) -> float:
    value = row.get("val/acc", math.nan)
    if pd.notna(value):
        return float(value)
    if history is not None and "val/acc" in history.columns and len(history):
        last = history.sort_values("epoch") if "epoch" in history.columns else history
        return float(last["val/acc"].iloc[-1])
    return math.nan

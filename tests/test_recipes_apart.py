"""evaluate never averages different recipes as one configuration (issue 34, item 2): runs of
another learning rate, decay, batch size or augmentation are other settings; runs of one variant
with other growth or curriculum options are other variants, named by what differs; several runs
of one seed in one configuration are said, not silently averaged."""

from __future__ import annotations

import mlflow

from pipeline.report import build_report, collect_runs
from pipeline.report.runs import setting_of
from tests.test_comparability import FASHION, _record


def _report(ids, tmp_path) -> str:
    runs_df, histories, events = collect_runs(ids)
    return build_report(runs_df, histories, events, tmp_path / "report").report_md.read_text()


def test_runs_of_other_recipes_are_other_settings(tracking, tmp_path):
    ids = [
        _record("static", 0, 0.40, {**FASHION, "lr": "0.05"}),
        _record("static", 0, 0.42, {**FASHION, "lr": "0.2"}),
        _record("static", 1, 0.41, {**FASHION, "weight_decay": "0"}),
        _record("static", 1, 0.43, {**FASHION, "weight_decay": "5e-4"}),
    ]
    report = _report(ids, tmp_path)
    assert report.count("| static (") >= 3  # three settings: lr 0.2, weight decay 0, the default
    for name in ("lr", "weight_decay", "batch_size", "augment", "mixup", "clip_grad", "device_kind"):
        assert f"| {name} |" in report
    # A run logged before an option existed trained with its default: the same setting.
    assert setting_of({**FASHION}) == setting_of({**FASHION, "clip_grad": "0", "lr": "0.05"})
    assert setting_of({**FASHION, "batch_size": "64"}) != setting_of({**FASHION})
    assert setting_of({**FASHION, "augment": "flip"}) != setting_of({**FASHION})


def test_one_variant_with_other_growth_options_is_two_variants_named_by_the_difference(tracking, tmp_path):
    grows = {**FASHION, "start_spec": "minimal"}  # a growing run logs where it starts from
    # Static runs logged the growth-only options too, with the default of their day: a static run
    # trains the same whatever they say, so they do not set it apart.
    ids = [_record("static", 0, 0.80, {**FASHION, "growth_rewarm": "0"})]
    ids += [_record("static", 1, 0.80, {**FASHION, "growth_rewarm": "0.05"})]
    ids += [_record("dynamic-default+tiers", s, 0.81, {**grows, "growth_rewarm": "0"}) for s in (0, 1)]
    ids += [_record("dynamic-default+tiers", s, 0.79, {**grows, "growth_rewarm": "0.1"}) for s in (0, 1)]
    report = _report(ids, tmp_path)
    assert "dynamic-default+tiers [growth_rewarm=0]" in report
    assert "dynamic-default+tiers [growth_rewarm=0.1]" in report
    assert "static [" not in report  # one static variant


def test_several_runs_of_one_seed_are_said(tracking, tmp_path):
    ids = [_record("static", 0, 0.80, FASHION), _record("static", 0, 0.82, FASHION)]
    ids += [_record("static", 1, 0.81, FASHION)]
    report = _report(ids, tmp_path)
    assert f"Caution: static has several runs of one seed (seed 0: {ids[0]}, {ids[1]})" in report
    assert mlflow.get_run(ids[2]).info.status == "FINISHED"

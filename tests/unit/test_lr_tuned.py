"""``lr_scaling: {rule: tuned}``: a rate per global batch measured by a sweep on the
reference framework and borrowed by every framework (dlscale.tune.rates, rate_choice).

Pure parts: the spec that carries a swept rate, the study's plan of the sweep (its runs,
rates and folders) and the refusals before any job, and the choice from the sweep's
outcomes (fewest median steps among rates that never diverged). The sweep through the
workflow, for real: studies/lr-tuned-lenet.yaml (docs/how-many-nodes.md).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers.paths import REPO, SCHEMA

from dlscale.runspec import RunSpec, SpecError
from dlscale.study import matrix, validation
from dlscale.tune import grid, rate_choice, rates

BASE = {
    "framework": "torch", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "torch/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 40, "warmup": 3, "threads_per_rank": 1, "learning_rate": 0.01,
    "seed": 1234, "timeout_s": 600,
}  # fmt: skip
TUNED = {"rule": "tuned", "base_batch": 64, "warmup_iterations": 4}


def test_a_tuned_spec_trains_at_its_swept_rate_after_the_rules_warm_up():
    run = RunSpec.from_dict({**BASE, "lr_rule": {**TUNED, "rate": 0.03}})
    assert run.target_learning_rate == pytest.approx(0.03)
    assert [run.learning_rate_at(s) for s in range(6)] == pytest.approx(
        [0.01, 0.015, 0.02, 0.025, 0.03, 0.03]
    )
    assert run.lr_record()["lr_rule"] == "tuned" and run.lr_record()["lr_rate"] == pytest.approx(0.03)
    # The rate is part of the spec: another choice is another spec (and hash), so it redoes the run.
    other = RunSpec.from_dict({**BASE, "lr_rule": {**TUNED, "rate": 0.02}})
    assert other.sha256 != run.sha256


@pytest.mark.parametrize(
    "rule",
    [TUNED, {**TUNED, "rate": 0}, {**TUNED, "rate": math.inf}, {**TUNED, "rate": True},
     {"rule": "linear", "base_batch": 64, "rate": 0.02}],
)  # fmt: skip
def test_a_tuned_rule_needs_a_positive_rate_and_only_it_has_one(rule):
    with pytest.raises(SpecError, match="lr_rule"):
        RunSpec.from_dict({**BASE, "lr_rule": rule})


def study_of(**config):
    return validation.validate_config(
        {
            "frameworks": ["torch", "caffe"],
            "models": ["lenet"],
            "nodes": [1, 2, 4],
            "init": "shared",
            "eval_every": 10,
            "quality_target": {"lenet": {"metric": "top1", "value": 0.9}},
            "lr_scaling": {"rule": "tuned", "warmup_iterations": 5},
            **config,
        },
        validation.load_schema(SCHEMA),
    )


def test_the_sweep_runs_the_reference_at_one_rank_around_the_linear_rate_for_every_batch():
    study = study_of(lr_scaling={"rule": "tuned", "sweep": [2, 0.5, 1], "sweep_repeats": 2})
    assert rates.tuned_models(study) == ["lenet"]
    assert rates.sweep_batches(study, "lenet") == [64, 128, 256]
    assert rates.choice_files(study) == [rates.choice_path("lenet", b) for b in (64, 128, 256)]
    paths = rates.sweep_runs(study, "lenet", 128)
    # Repeat-major, so the rates are measured interleaved; the rate's folder, then the run id.
    assert paths[:3] == [
        f"results/lr_tuning/{r}/torch/lenet/n1x1/b128/r0/events.jsonl" for r in ("x0.5", "x1", "x2")
    ]
    assert len(paths) == 6
    spec = rates.sweep_spec(study, "lenet", 128, "x2", 1)
    assert (spec.framework, spec.world_size, spec.global_batch, spec.repeat) == ("torch", 1, 128, 1)
    # The linear rule's rate at 128 is twice the base (0.01 at 64); x2 doubles it again.
    assert spec.target_learning_rate == pytest.approx(2 * 2 * spec.learning_rate)
    assert spec.quality_target == {"metric": "top1", "value": 0.9} and spec.eval_every == 10
    with pytest.raises(rates.RateError, match="no rate 'x3'"):
        rates.sweep_spec(study, "lenet", 128, "x3", 0)
    with pytest.raises(rates.RateError, match="no global batch 96"):
        rates.sweep_spec(study, "lenet", 96, "x1", 0)


def test_every_run_of_a_tuned_model_needs_the_swept_rate_and_carries_it():
    study = study_of()
    run = next(r for r in matrix.expand_runs(study) if r.run_id == "caffe/lenet/n2x1/b64/r0")
    with pytest.raises(SpecError, match="no swept rate was given for global batch 128"):
        matrix.run_spec(study, run)
    spec = matrix.run_spec(study, run, lr_rate=0.015)
    assert spec.lr_rule == {"rule": "tuned", "base_batch": 64, "warmup_iterations": 5, "rate": 0.015}
    # The parity references borrow the same rate as the runs they are the references of.
    refs = matrix.parity_references(study, lambda model, batch: {128: 0.015, 256: 0.02}[batch])
    assert {r.global_batch: r.target_learning_rate for r in refs} == {128: 0.015, 256: 0.02}
    # A model whose rule is computed refuses a swept rate.
    plain = study_of(lr_scaling={"rule": "linear"})
    with pytest.raises(SpecError, match="is not 'tuned'"):
        matrix.run_spec(plain, run, lr_rate=0.015)


def test_the_options_tuning_runs_of_a_tuned_model_train_at_the_linear_rate():
    study = study_of(nodes=[2])
    spec = grid._one_node_spec(study, "torch", "lenet", 0, {})
    assert spec.lr_rule["rate"] == pytest.approx(rates.linear_rate(study, "lenet", spec.global_batch))


@pytest.mark.parametrize(
    ("config", "words"),
    [({"lr_scaling": {"rule": "linear", "sweep": [0.5, 1]}}, "lr_scaling.lenet.sweep': only rule 'tuned'"),
     ({"quality_target": {}}, "lr_scaling.lenet.rule': 'tuned' chooses the rate"),
     ({"lr_scaling": {"rule": "tuned", "sweep": [1]}}, "lr_scaling"),
     ({"lr_scaling": {"rule": "tuned", "sweep_repeats": 1}}, "lr_scaling")],
)  # fmt: skip
def test_a_sweep_that_cannot_choose_fails_before_any_job(config, words):
    with pytest.raises(validation.ConfigError, match=words.replace(".", r"\.")):
        study_of(**config)


# -- the choice ----------------------------------------------------------------------------


def outcomes(per_rate: dict[float, list[float | str]]) -> pd.DataFrame:
    """Outcome rows of a sweep at global batch 128: per rate, each repeat's steps to target,
    or "diverged" / "not reached"."""
    rows = []
    for rate, repeats in per_rate.items():
        for k, steps in enumerate(repeats):
            reached = isinstance(steps, (int, float))
            rows.append({
                "run_id": f"torch/lenet/n1x1/b128/r{k}", "framework": "torch", "model": "lenet",
                "lr_rule": "tuned", "lr_rate": rate, "global_batch": 128, "target_metric": "top1",
                "target_value": 0.9, "outcome": "reached" if reached else steps,
                "steps_to_target": float(steps) if reached else math.nan,
                "steps_bracket_low": float(steps) - 10 if reached else math.nan,
            })  # fmt: skip
    return pd.DataFrame(rows)


FACTORS = {0.01: 0.5, 0.02: 1.0, 0.04: 2.0}


def chosen(per_rate):
    table = rate_choice.rate_rows(outcomes(per_rate), FACTORS)
    return rate_choice.choose(table)


def test_the_rate_with_the_fewest_median_steps_is_chosen():
    rate, why = chosen({0.01: [90, 90, 100], 0.02: [60, 50, 60], 0.04: [40, 40, 50]})
    assert rate == 0.04 and "fewest median steps to target: 40" in why
    assert "the sweep's largest rate: a wider sweep may find a better one" in why


def test_a_choice_the_intervals_cannot_separate_says_no_clear_best():
    table = rate_choice.rate_rows(
        outcomes({0.01: [90, 90, 100], 0.02: [60, 50, 60], 0.04: [40, 40, 50]}), FACTORS
    )
    rate, why, clear = rate_choice.decide(table)
    # 0.02's interval [50, 60] touches 0.04's [40, 50]: the repeats cannot tell them apart.
    assert (rate, clear) == (0.04, False) and "no clear best: the interval of 0.02 overlaps" in why
    table = rate_choice.rate_rows(
        outcomes({0.01: [90, 90, 100], 0.02: [60, 60, 70], 0.04: [40, 40, 50]}), FACTORS
    )
    rate, why, clear = rate_choice.decide(table)
    assert (rate, clear) == (0.04, True) and "no clear best" not in why
    # A rival with one repeat has no interval: never separated.
    table = rate_choice.rate_rows(outcomes({0.01: [90], 0.02: [60, 60, 70], 0.04: [40, 40, 50]}), FACTORS)
    assert rate_choice.decide(table)[2] is False


def test_a_rate_that_diverged_once_is_never_chosen_however_fast():
    rate, _ = chosen({0.01: [90, 90, 100], 0.02: [60, 50, 60], 0.04: [20, 20, "diverged"]})
    assert rate == 0.02


def test_a_tie_goes_to_the_tighter_interval_then_to_the_rate_nearer_the_linear_rule():
    rate, why = chosen({0.01: [50, 50, 50], 0.02: [50, 50, 50], 0.04: [50, 40, 70]})
    assert rate == 0.02 and "tied on the median with 0.01" in why
    rate, _ = chosen({0.01: [50, 50, 60], 0.02: [50, 50, 70], 0.04: [80, 80, 80]})
    assert rate == 0.01  # the tighter upper bound beats the nearer rate


def test_a_rate_that_reached_the_target_in_half_its_repeats_or_fewer_has_no_median():
    rate, _ = chosen({0.01: [90, 90, 100], 0.02: [30, "not reached", "not reached"], 0.04: ["diverged"] * 3})
    assert rate == 0.01


def test_where_no_rate_can_train_the_batch_the_linear_rate_is_borrowed_and_the_choice_says_so():
    rate, why = chosen({0.01: ["not reached"] * 3, 0.02: ["diverged"] * 3, 0.04: ["diverged"] * 3})
    assert rate == 0.02 and "no swept rate reached the target" in why


def test_a_rate_without_runs_still_has_its_row():
    table = rate_choice.rate_rows(outcomes({0.01: [90, 90, 100]}), FACTORS)
    assert list(table["lr_rate"]) == [0.01, 0.02, 0.04]
    assert list(table["repeats"].fillna(0)) == [3, 0, 0]
    assert rate_choice.choose(table)[0] == 0.01


def test_a_framework_faster_than_the_reference_beyond_both_intervals_is_flagged_not_crowned():
    from dlscale.analysis import nodes_to_target

    def row(framework, steps, low, high, rate=0.02):
        return {"framework": framework, "model": "lenet", "lr_rule": "tuned", "lr_rate": rate,
                "global_batch": 128, "target_metric": "top1", "target_value": 0.9,
                "steps_to_target": steps, "steps_low": low, "steps_high": high}  # fmt: skip

    steps = pd.DataFrame([
        row("torch", 50, 40, 60), row("caffe", 30, 20, 35), row("tensorflow", 50, 45, 70),
        row("bigdl", 90, 80, 100), row("caffe", 30, 20, 35, rate=0.04),
        row("jax", 20, math.nan, math.nan),
    ])  # fmt: skip
    assert list(nodes_to_target.reference_check(steps)) == [
        nodes_to_target.REFERENCE_ROW,
        nodes_to_target.FASTER_THAN_REFERENCE,
        nodes_to_target.WITHIN_REFERENCE,
        nodes_to_target.SLOWER_THAN_REFERENCE,
        nodes_to_target.NO_REFERENCE,
        nodes_to_target.NO_INTERVAL,
    ]


# -- evaluation spacing per run ------------------------------------------------------------


def test_eval_spacing_resolves_every_node_count_alike_under_the_rule():
    study = study_of(
        lr_scaling={"rule": "linear", "warmup_iterations": 5},
        eval_spacing={"lenet": {"expected_steps": 130, "evaluations": 10}},
        eval_every=0,
    )
    every = {
        r.nodes: matrix.run_spec(study, r).eval_every
        for r in matrix.expand_runs(study)
        if r.framework == "torch"
    }
    # 130 steps at batch 64, 65 at 128, 32.5 at 256 under the linear rule's ideal scaling.
    assert every == {1: 13, 2: 6, 4: 3}
    sqrt = study_of(lr_scaling={"rule": "sqrt"}, eval_spacing={"lenet": {"expected_steps": 100}})
    assert matrix.eval_every_at(sqrt, "lenet", 256) == 5  # 100 / sqrt(4) / 10 (the default)
    fixed = study_of(lr_scaling={"rule": "fixed"}, eval_spacing={"lenet": {"expected_steps": 5}})
    assert matrix.eval_every_at(fixed, "lenet", 256) == 1  # never below one step


def test_eval_spacing_needs_a_target_and_stands_in_for_eval_every():
    with pytest.raises(validation.ConfigError, match=r"eval_spacing\.lenet': lenet has no quality_target"):
        study_of(
            quality_target={}, lr_scaling={"rule": "linear"}, eval_spacing={"lenet": {"expected_steps": 9}}
        )
    with pytest.raises(validation.ConfigError, match="eval_every': 0 with a quality_target"):
        study_of(eval_every=0)


def test_the_choice_reads_a_sweeps_events_whose_rates_share_run_ids():
    """Two real sweep runs (torch LeNet, batch 64, 0.5x and 1x the base rate 0.01, seed
    1234, 2026-12-04): one run id in two rate folders, each read on its own."""
    sweep = REPO / "tests/data/lr_tuning"
    paths = sorted(sweep.rglob("events.jsonl"))
    made = rate_choice.choice(paths, "lenet", 64, {0.005: 0.5, 0.01: 1.0})
    by_rate = {row["lr_rate"]: row for row in made["rates"]}
    assert (by_rate[0.005]["steps_to_target"], by_rate[0.01]["steps_to_target"]) == (90.0, 70.0)
    assert made["chosen_rate"] == 0.01 and by_rate[0.01]["chosen"] and not by_rate[0.005]["chosen"]
    with pytest.raises(ValueError, match="no run of lenet at global batch 128"):
        rate_choice.choice(paths, "lenet", 128, {0.01: 1.0})

"""The learning rate as a declared function of the global batch (config ``lr_scaling``).

Pure parts: the rule and its warm-up in the run spec (what every runner asks for its rate),
the study key that sets it per model, and the parity check's proof that a runner applied
it (the rate each step recorded against the rule's, and references on the same schedule).
The runners' side, for real, is in tests/runners/test_lr_rule_runs.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers.paths import SCHEMA

from dlscale.analysis import parity
from dlscale.events import write_atomic
from dlscale.runspec import RunSpec, SpecError
from dlscale.study import matrix, validation

BASE = {
    "framework": "torch", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "torch/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 40, "warmup": 3, "threads_per_rank": 1, "learning_rate": 0.01,
    "seed": 1234, "timeout_s": 600,
}  # fmt: skip


def spec(**rule) -> RunSpec:
    return RunSpec.from_dict({**BASE, **({"lr_rule": rule} if rule else {})})


@pytest.mark.parametrize(("rule", "rate"), [("fixed", 0.01), ("linear", 0.02), ("sqrt", 0.01 * math.sqrt(2))])
def test_the_rule_sets_the_rate_at_the_global_batch(rule, rate):
    run = spec(rule=rule, base_batch=64, warmup_iterations=0)
    assert run.target_learning_rate == pytest.approx(rate)
    assert [run.learning_rate_at(s) for s in (0, 1, 100)] == [pytest.approx(rate)] * 3
    record = run.lr_record()
    assert record == {"lr_rule": rule, "lr_base_rate": 0.01, "lr_base_batch": 64,
                      "lr_warmup_iterations": 0, "lr_rate": pytest.approx(rate)}  # fmt: skip


def test_warm_up_climbs_from_the_base_rate_to_the_target_in_equal_steps():
    run = spec(rule="linear", base_batch=32, warmup_iterations=4)  # target 0.04
    rates = [run.learning_rate_at(s) for s in range(6)]
    assert rates == pytest.approx([0.01, 0.0175, 0.025, 0.0325, 0.04, 0.04])
    assert run.warmup_ramp == 4


def test_no_ramp_when_the_target_is_not_above_the_base_rate():
    # A global batch below the base batch: the rule lowers the rate, from the first step.
    run = spec(rule="linear", base_batch=256, warmup_iterations=30)
    assert run.warmup_ramp == 0 and run.learning_rate_at(0) == pytest.approx(0.005)
    assert spec(rule="fixed", base_batch=64, warmup_iterations=30).warmup_ramp == 0


def test_a_spec_without_a_rule_keeps_its_json_and_hash():
    plain = spec()
    assert "lr_rule" not in plain.to_json()
    assert plain.target_learning_rate == plain.learning_rate_at(0) == 0.01
    declared = spec(rule="linear", base_batch=64, warmup_iterations=5)
    assert declared.sha256 != plain.sha256
    assert RunSpec.from_json(declared.to_json()) == declared


@pytest.mark.parametrize(
    "rule",
    [{"rule": "cubic", "base_batch": 64}, {"rule": "linear", "base_batch": 0},
     {"rule": "linear", "base_batch": 64, "warmup_iterations": -1}, {"rule": "linear"},
     {"rule": "linear", "base_batch": 64, "ramp": 3}, {"rule": "linear", "base_batch": True}],
)  # fmt: skip
def test_a_bad_rule_is_refused_naming_the_field(rule):
    with pytest.raises(SpecError, match="lr_rule"):
        RunSpec.from_dict({**BASE, "lr_rule": rule})


# -- the study key ------------------------------------------------------------------------


def plan(**config):
    study = validation.validate_config(
        {"frameworks": ["torch"], "models": ["lenet"], **config}, validation.load_schema(SCHEMA)
    )
    return {run.run_id: matrix.run_spec(study, run) for run in matrix.expand_runs(study)}


def test_one_rule_for_every_model_with_the_base_batch_at_the_smallest_node_count():
    specs = plan(nodes=[2, 4], lr_scaling={"rule": "linear", "warmup_iterations": 10})
    two, four = specs["torch/lenet/n2x1/b64/r0"], specs["torch/lenet/n4x1/b64/r0"]
    assert two.lr_rule == four.lr_rule == {"rule": "linear", "base_batch": 128, "warmup_iterations": 10}
    assert two.target_learning_rate == pytest.approx(two.learning_rate)
    assert four.target_learning_rate == pytest.approx(2 * four.learning_rate)


def test_a_rule_per_model_and_none_where_none_is_declared():
    specs = plan(
        models=["lenet", "autoencoder"], nodes=[1], lr_scaling={"lenet": {"rule": "sqrt", "base_batch": 16}}
    )
    assert specs["torch/lenet/n1x1/b64/r0"].lr_rule == {
        "rule": "sqrt",
        "base_batch": 16,
        "warmup_iterations": 0,
    }
    assert specs["torch/autoencoder/n1x1/b64/r0"].lr_rule is None


def test_a_study_without_the_key_plans_the_specs_it_planned_before():
    assert plan(nodes=[1, 2]) == plan(nodes=[1, 2], lr_scaling={})
    assert all(s.lr_rule is None for s in plan(nodes=[1, 2]).values())


@pytest.mark.parametrize(
    ("value", "words"),
    [({"rule": "cubic"}, "lr_scaling.rule"), ({"lenet": {"rule": "linear", "warmup": 3}}, "lr_scaling.lenet.warmup"),
     ({"rule": "linear", "base_batch": 0}, "lr_scaling.base_batch")],
)  # fmt: skip
def test_a_bad_key_fails_before_any_job_naming_it(value, words):
    with pytest.raises(validation.ConfigError, match=words.replace(".", r"\.")):
        plan(lr_scaling=value)


# -- the parity check's proof that the rule reached a runner ------------------------------


def write_run(root: Path, framework: str, losses, rates, *, nodes=1, batch=64, lr=None) -> Path:
    run_id = f"{framework}/lenet/n{nodes}x1/b{batch}/r0"
    start = {
        "event": "run_start", "run_id": run_id, "framework": framework, "model": "lenet", "nodes": nodes,
        "ranks_per_node": 1, "batch": batch, "global_batch": batch * nodes, "repeat": 0, "world_size": nodes,
        "hosts": ["h"] * nodes, "threads_per_rank": 1, "versions": {}, "config_sha256": "x", "git_sha": "y",
        "time": 0.0, "spec": {"run_id": run_id, "init": "shared", "seed": 1234, "learning_rate": 0.01},
        **({"learning_rate": lr} if lr else {}),
    }  # fmt: skip
    events = [start]
    for i, (loss, rate) in enumerate(zip(losses, rates, strict=True)):
        for rank in range(nodes):
            events.append({"event": "iteration", "rank": rank, "iteration": i, "samples": batch, "step_s": 0.01,
                           "compute_s": 0.01, "comm_s": 0.0, "loss": loss, "lr": rate, "time": 1.0 + i,
                           **({"init_sha256": "abc"} if i == 0 else {})})  # fmt: skip
    events.append({"event": "run_end", "status": "ok", "reason": None, "time": 100.0})
    return write_atomic(root / run_id / "events.jsonl", events)


LINEAR = {
    "lr_rule": "linear",
    "lr_base_rate": 0.01,
    "lr_base_batch": 64,
    "lr_warmup_iterations": 4,
    "lr_rate": 0.02,
}
RAMP = [0.01, 0.0125, 0.015, 0.0175] + [0.02] * 6
LOSSES = [2.3 - 0.05 * i for i in range(10)]


def checked(root: Path):
    runs = [parity.read_run(p) for p in sorted(root.rglob("events.jsonl"))]
    return parity.check([r for r in runs if r is not None], tolerance=1e-3).set_index("framework")


def test_runs_that_follow_the_rule_pass_against_a_reference_on_the_same_schedule(tmp_path):
    write_run(tmp_path, "torch", LOSSES, RAMP, batch=128, lr=LINEAR)
    write_run(tmp_path, "caffe", LOSSES, RAMP, nodes=2, lr=LINEAR)
    row = checked(tmp_path).loc["caffe"]
    assert row["passes"] and row["lr_matches"] and row["lr_rule"] == "linear", row["reason"]
    assert row["reference"] == "torch/lenet/n1x1/b128/r0"


def test_a_runner_that_ignores_the_rule_fails_naming_it_even_with_a_designed_difference(tmp_path):
    write_run(tmp_path, "torch", LOSSES, RAMP, batch=128, lr=LINEAR)
    write_run(tmp_path, "bigdl", LOSSES, [0.01] * 10, nodes=2, lr=LINEAR)  # trained at the base rate
    row = checked(tmp_path).loc["bigdl"]
    assert not row["passes"] and not row["lr_matches"] and row["lr_matches"] is not None
    assert row["designed_difference"] is None
    assert (
        "bigdl ignored the learning-rate rule (linear): iteration 1 ran at 0.01, the rule gives 0.0125"
        in row["reason"]
    )


def test_a_reference_on_another_schedule_is_no_reference(tmp_path):
    write_run(tmp_path, "torch", LOSSES, [0.01] * 10, batch=128)  # fixed rate, no record: 0.01 throughout
    write_run(tmp_path, "caffe", LOSSES, RAMP, nodes=2, lr=LINEAR)
    row = checked(tmp_path).loc["caffe"]
    assert row["passes"] is None
    assert (
        "no 1-rank torch run of lenet at global batch 128, seed 1234, linear rate 0.02 after a 4-step"
        in row["reason"]
    )


def test_losses_are_compared_while_the_summed_rate_stays_within_the_measured_budget(tmp_path):
    """A rule that climbs to 0.1: rounding grows with how far the weights travel, so the
    losses are compared while the rates before them sum to at most 0.2 (docs/thresholds.md);
    a late difference there is not a failure, an early one is, and the rates are checked at
    every step."""
    climb = {**LINEAR, "lr_rate": 0.1, "lr_warmup_iterations": 2}
    rates = [0.01, 0.055] + [0.1] * 8  # summed before step t: 0, .01, .065, .165, .265 ...
    late = [*LOSSES[:5], *(loss * 1.01 for loss in LOSSES[5:])]
    write_run(tmp_path, "torch", LOSSES, rates, batch=128, lr=climb)
    write_run(tmp_path, "caffe", late, rates, nodes=2, lr=climb)
    row = checked(tmp_path).loc["caffe"]
    assert row["passes"] and row["iterations"] == 4, row["reason"]
    assert "whose preceding rates sum to at most 0.2" in row["reason"]
    write_run(tmp_path, "tensorflow", [LOSSES[0], LOSSES[1] * 1.01, *LOSSES[2:]], rates, nodes=2, lr=climb)
    assert checked(tmp_path).loc["tensorflow"]["first_failed_iteration"] == 1
    # A rate the rule does not give is caught after the budget too.
    write_run(tmp_path, "bigdl", LOSSES, [*rates[:8], 0.05, 0.1], nodes=2, lr=climb)
    assert "iteration 8 ran at 0.05" in checked(tmp_path).loc["bigdl"]["reason"]


# -- the parity check's references at every node count ------------------------------------


def study_of(**config):
    return validation.validate_config(
        {"frameworks": ["torch", "caffe"], "models": ["lenet"], **config}, validation.load_schema(SCHEMA)
    )


def test_the_study_plans_a_one_rank_reference_for_every_global_batch_it_trains_on_more_ranks():
    study = study_of(
        nodes=[1, 2, 4],
        repeats=2,
        init="shared",
        eval_every=10,
        lr_scaling={"rule": "linear", "warmup_iterations": 5},
    )
    refs = {spec.run_id: spec for spec in matrix.parity_references(study)}
    assert sorted(refs) == [f"torch/lenet/n1x1/b{b}/r{r}" for b in (128, 256) for r in (0, 1)]
    ref = refs["torch/lenet/n1x1/b256/r1"]
    assert (ref.world_size, ref.global_batch, ref.seed) == (1, 256, 1235)
    assert (ref.iterations, ref.warmup, ref.eval_every, ref.quality_target) == (20, 0, 0, None)
    assert not ref.evaluates  # the check compares losses: no held-out evaluation, not even the last
    # The same schedule as the 4-node runs it is the reference of: the rule from base batch 64.
    four = next(
        matrix.run_spec(study, r) for r in matrix.expand_runs(study) if r.run_id == "caffe/lenet/n4x1/b64/r1"
    )
    assert [ref.learning_rate_at(s) for s in range(8)] == [four.learning_rate_at(s) for s in range(8)]


def test_no_references_without_the_shared_initialisation_or_where_the_study_has_the_run():
    assert matrix.parity_references(study_of(nodes=[1, 2], init="framework")) == []
    # 1 node of 128 is the 2-node runs' global batch under strong scaling: the study's own.
    strong = study_of(nodes=[1, 2], init="shared", scaling="strong", global_batch={"lenet": 128})
    assert matrix.parity_references(strong) == []

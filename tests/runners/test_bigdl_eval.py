"""The BigDL runner's held-out evaluation and time to target (issue 34), for real.

Real runs through the launcher on real MNIST, as tests/runners/test_bigdl_runner.py starts them
(helpers.bigdl_runs): the driver (rank 0) evaluates LeNet on the 10,000 test images with BigDL's
own ``evaluate`` between training segments, eval time is kept out of the training clock,
a run at learning rate 0 stays at chance, and a run with a quality target stops at the
first evaluation that meets it. No timing threshold is asserted: only that the clocks are
kept apart. The pure helpers (segments, batches, the shared samples and weights) are tested without
a JVM.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.bigdl_runs import SHARED_INIT, TWO_EXECUTOR_TARGET, launch, spec

from dlscale import catalog
from dlscale.analysis import tables
from dlscale.data import initweights
from dlscale.data.shards import GlobalBatchSlices
from dlscale.events import read_events
from dlscale.runners.bigdl.data import shared_indices
from dlscale.runners.bigdl.evaluate import eval_batch, segment_ends
from dlscale.runners.bigdl.models import shared_weights
from dlscale.runspec import RunSpec

TARGET = {"metric": "top1", "value": 0.5}  # of the pure segment tests
DEFAULT_LR = catalog.model("lenet").learning_rate  # the study's default


def run(python, data, tmp_path, **fields):
    top = ("eval_every", "quality_target", "max_iterations", "seed", "init")  # the spec's, not options
    extra = {k: fields.pop(k) for k in top if k in fields}
    events_path = tmp_path / "run" / "events.jsonl"
    proc = launch(python, {**spec(**fields), **extra}, data, events_path, retries=0)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", (events[-1], output[-5000:])
    return events_path, events


def kinds(events, kind):
    return [e for e in events if e["event"] == kind]


def timed_seconds(events, upto=None):
    return sum(
        e["step_s"]
        for e in kinds(events, "iteration")
        if not e["warmup"] and (upto is None or e["iteration"] < upto)
    )


def run_spec(**fields):
    return RunSpec.from_dict({**spec(nodes=1, iterations=20, warmup=2), **fields})


def test_segments_end_where_an_evaluation_is_due():
    assert segment_ends(run_spec()) == [22]  # eval_every 0: once, after the last iteration
    assert segment_ends(run_spec(eval_every=5)) == [5, 10, 15, 20, 22]
    target = run_spec(eval_every=5, quality_target=TARGET, max_iterations=8)
    assert segment_ends(target) == [5, 10]
    # Nothing to evaluate (no held-out set): one segment, whatever the spacing or target.
    assert segment_ends(run_spec(eval_every=5), evaluates=False) == [22]
    assert segment_ends(run_spec(eval_every=5, evaluates=False)) == [22]  # a parity reference
    assert segment_ends(target, evaluates=False) == [10]


def test_eval_batch_splits_over_the_partitions_and_is_never_below_the_global_batch():
    lenet = run_spec()
    assert eval_batch(lenet, 64, 1) == 1000 and eval_batch(lenet, 192, 3) == 1002
    assert eval_batch(lenet, 2048, 2) == 2048
    alexnet = RunSpec.from_dict({**spec(model="alexnet", nodes=2, batch=16)})
    assert eval_batch(alexnet, 32, 2) == 32


def test_shared_samples_of_n_ranks_are_those_of_one_rank_of_the_global_batch():
    n, batch, iterations, seed = 1000, 8, 30, 1234
    one = shared_indices(n, batch * 4, 1, range(1), seed, iterations)
    per_rank = [shared_indices(n, batch, 4, range(r, r + 1), seed, iterations) for r in range(4)]
    two_executors = [shared_indices(n, batch, 4, range(k * 2, k * 2 + 2), seed, iterations) for k in (0, 1)]
    assert sorted(one.tolist()) == sorted(np.concatenate(per_rank).tolist())
    assert sorted(one.tolist()) == sorted(np.concatenate(two_executors).tolist())
    first = next(GlobalBatchSlices(n, batch, 4, 0, seed))
    np.testing.assert_array_equal(per_rank[0][:batch], first)


def test_shared_weights_take_bigdls_layout():
    for model in ("lenet", "autoencoder"):
        weights = initweights.initial_weights(model, 1234)
        arrays = shared_weights(model, weights)
        assert len(arrays) == len(weights)
        for array, (name, shape) in zip(arrays, initweights.LAYOUTS[model], strict=True):
            assert array.shape == ((1, *shape) if len(shape) == 4 else shape), name
            np.testing.assert_array_equal(array.reshape(shape), weights[name])


def test_one_rank_lenet_evaluates_once_after_the_last_iteration(bigdl_shared_init_run):
    path, events, _ = bigdl_shared_init_run
    iterations = SHARED_INIT["iterations"] + SHARED_INIT["warmup"]
    evals = kinds(events, "eval")
    assert len(evals) == 1, evals
    (e,) = evals
    assert (e["rank"], e["split"], e["metric"], e["iteration"]) == (0, "test", "top1", iterations)
    assert e["samples"] == 10000 and e["heldout"] == "mnist"
    assert 0.5 < e["value"] <= 1.0, e  # clearly above chance (0.1) after 40 steps
    assert e["eval_s"] > 0
    # The evaluation is not training time: the clock it reports is the timed steps' sum.
    assert e["train_s"] == pytest.approx(timed_seconds(events), rel=1e-9)
    assert len(kinds(events, "iteration")) == iterations
    print(
        f"BIGDL-EVAL lenet 1 rank: top1 {e['value']:.4f} after {iterations} iterations, eval_s {e['eval_s']:.2f}"
    )


def test_learning_rate_zero_stays_at_chance(bigdl_py, mnist_shards, no_leftovers):  # noqa: F811
    # From the shared initial weights (the same numbers every framework starts from), so
    # the untrained network's score is fixed: BigDL's own random initialisation scored
    # up to 0.2062 here (make test, 2026-12-04), over the 0.2 bound, with the same seed.
    _, events = run(
        bigdl_py,
        mnist_shards,
        no_leftovers,
        nodes=1,
        iterations=8,
        warmup=1,
        lr=0.0,
        seed=1234,
        init="shared",
    )
    (e,) = kinds(events, "eval")
    print(f"BIGDL-EVAL lenet, rate 0, shared initial weights: top1 {e['value']:.4f}")
    assert e["samples"] == 10000 and e["value"] < 0.2, e


def test_target_run_stops_at_the_first_evaluation_that_meets_it(bigdl_target_run):
    """Two executors, segments of 10 iterations: the run stops at its target, every
    executor's rank with it (one driver hands out every step)."""
    path, events, _ = bigdl_target_run
    target, every = TWO_EXECUTOR_TARGET["quality_target"]["value"], TWO_EXECUTOR_TARGET["eval_every"]
    evals = kinds(events, "eval")
    assert {e["rank"] for e in evals} == {0} and {e["samples"] for e in evals} == {10000}
    assert [e["iteration"] for e in evals] == list(range(every, every * len(evals) + 1, every))
    assert len(evals) >= 2, evals  # the first segment did not reach it: training went on
    assert all(e["value"] < target for e in evals[:-1]) and evals[-1]["value"] >= target, evals
    stop = evals[-1]["iteration"]
    assert stop < TWO_EXECUTOR_TARGET["max_iterations"] + 2, "the target was not met before the cap"
    iterations = kinds(events, "iteration")
    assert [e["iteration"] for e in iterations] == list(range(stop))  # iterations go on across segments
    train_s = [e["train_s"] for e in evals]
    assert train_s == sorted(train_s)
    for e in evals:
        assert e["train_s"] == pytest.approx(timed_seconds(events, upto=e["iteration"]), rel=1e-9)
    runs, _ = tables.load_events([path])
    row = runs.iloc[0]
    assert row["status"] == "ok" and bool(row["reached_target"]) is True
    assert row["time_to_target_s"] == pytest.approx(evals[-1]["train_s"])

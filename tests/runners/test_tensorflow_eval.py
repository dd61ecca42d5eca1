"""The TensorFlow runner's held-out evaluation and time to target, for real (issue 34).

Real runs through the launcher on real MNIST, as tests/runners/test_tensorflow_runner.py starts
them: every MWMS worker evaluates its share of LeNet's 10,000 test images and rank 0
records the sum (checked against the whole set on the same weights; ps mode: the chief
evaluates the whole set), between steps, eval time is kept out of the training clock, a run at learning rate 0 stays at
chance, and a run with a quality target stops at the first evaluation that meets it, on
every rank at once. No timing threshold is asserted: only that the clocks are kept apart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.heldout_shares import SCRIPT_HEAD, run_and_check
from helpers.paths import framework_python
from helpers.tensorflow_runs import iterations_of, launch, spec

from dlscale.analysis import tables
from dlscale.events import read_events

TARGET = {"metric": "top1", "value": 0.5}


@pytest.fixture(scope="session")
def tf_py() -> Path:
    return framework_python("tensorflow")


def run(tf_py: Path, data: Path, tmp_path: Path, **fields) -> list[dict]:
    options = fields.pop("options", {})
    extra = {k: fields.pop(k) for k in ("eval_every", "quality_target", "max_iterations") if k in fields}
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, {**spec(**fields, **options), **extra}, data, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events


def evals_of(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "eval"]


def timed_seconds(events: list[dict], rank: int = 0, upto: int | None = None) -> float:
    """The sum of rank ``rank``'s timed step_s over its iterations before ``upto``."""
    return sum(
        e["step_s"]
        for e in iterations_of(events)
        if e["rank"] == rank and not e["warmup"] and (upto is None or e["iteration"] < upto)
    )


def test_one_rank_lenet_evaluates_once_after_the_last_iteration(tf_py, mnist_shards, tmp_path):
    events = run(tf_py, mnist_shards, tmp_path, iterations=40, warmup=2)
    evals = evals_of(events)
    assert len(evals) == 1, evals
    (e,) = evals
    assert (e["rank"], e["split"], e["metric"], e["iteration"]) == (0, "test", "top1", 42)
    assert e["samples"] == 10000 and e["heldout"] == "mnist"
    assert 0.5 < e["value"] <= 1.0, e  # clearly above chance (0.1) after 42 steps
    assert e["eval_s"] > 0
    # The evaluation is not training time: the clock it reports is the timed steps' sum.
    assert e["train_s"] == pytest.approx(timed_seconds(events), rel=1e-9)
    assert len(iterations_of(events)) == 42


def test_learning_rate_zero_stays_at_chance(tf_py, mnist_shards, tmp_path):
    events = run(tf_py, mnist_shards, tmp_path, iterations=10, warmup=1, lr=0.0)
    (e,) = evals_of(events)
    assert e["samples"] == 10000 and e["value"] < 0.2, e


def test_target_run_stops_at_the_first_evaluation_that_meets_it(tf_py, mnist_shards, tmp_path):
    events = run(
        tf_py, mnist_shards, tmp_path, warmup=2, eval_every=5, quality_target=TARGET, max_iterations=60
    )
    evals = evals_of(events)
    assert [e["iteration"] for e in evals] == list(range(5, 5 * len(evals) + 1, 5))
    assert all(e["value"] < 0.5 for e in evals[:-1]) and evals[-1]["value"] >= 0.5, evals
    stop = evals[-1]["iteration"]
    assert stop < 62, "the target was not met before the cap"
    assert len(iterations_of(events)) == stop
    train_s = [e["train_s"] for e in evals]
    assert train_s == sorted(train_s)
    assert evals[-1]["train_s"] == pytest.approx(timed_seconds(events), rel=1e-9)
    runs, _ = tables.load_events([tmp_path / "events.jsonl"])
    row = runs.iloc[0]
    assert row["status"] == "ok" and bool(row["reached_target"]) is True
    assert row["time_to_target_s"] == pytest.approx(evals[-1]["train_s"])


def test_two_rank_target_run_stops_every_rank_at_once(tf_py, mnist_shards, tmp_path):
    events = run(
        tf_py,
        mnist_shards,
        tmp_path,
        nodes=2,
        warmup=2,
        eval_every=5,
        quality_target=TARGET,
        max_iterations=60,
    )
    evals = evals_of(events)
    assert evals and {e["rank"] for e in evals} == {0}
    stop = evals[-1]["iteration"]
    assert evals[-1]["value"] >= 0.5 and stop < 62
    iters = iterations_of(events)
    for rank in (0, 1):
        assert sorted(e["iteration"] for e in iters if e["rank"] == rank) == list(range(stop))
    # The replicas are identical where the run stopped, on both ranks.
    sums = {e["rank"]: e["weights_sum"] for e in iters if e["iteration"] == stop - 1}
    assert sums[0] == sums[1]
    runs, _ = tables.load_events([tmp_path / "events.jsonl"])
    assert runs.iloc[0]["status"] == "ok" and bool(runs.iloc[0]["reached_target"]) is True


def test_ps_chief_evaluates_and_scales_each_workers_update(tf_py, mnist_shards, tmp_path):
    events = run(
        tf_py,
        mnist_shards,
        tmp_path,
        nodes=2,
        warmup=2,
        eval_every=5,
        quality_target=TARGET,
        max_iterations=60,
        options={"strategy": "ps"},
    )
    assert events[0]["spec"]["options"]["strategy"] == "ps"
    iters = iterations_of(events)
    assert {e["update_scale"] for e in iters} == {0.5}  # 1 / workers
    evals = evals_of(events)
    assert evals and {e["rank"] for e in evals} == {0} and evals[-1]["samples"] == 10000
    assert evals[-1]["value"] >= 0.5 and len(iters) == evals[-1]["iteration"] < 62
    runs, _ = tables.load_events([tmp_path / "events.jsonl"])
    assert runs.iloc[0]["status"] == "ok" and bool(runs.iloc[0]["reached_target"]) is True


#: In the TensorFlow venv: each model's held-out sums, the whole set at once and in 2 and 3
#: workers' shares (each share loaded and converted as every MWMS worker's Evaluator does),
#: on the same weights.
SHARDED = (
    SCRIPT_HEAD
    + """
import tensorflow as tf
from dlscale.data.shards import ShardSet
from dlscale.runners.tensorflow.evaluate import Evaluator
from dlscale.runners.tensorflow.models import build_model
out = {}
for spec, ctx in contexts():
    tf.keras.utils.set_random_seed(3)
    train = ShardSet(ctx.data_dir)
    model = build_model(spec.model, tuple(train.image_shape))
    def evaluator(rank=0, world=1):
        return Evaluator(tf, ctx, model, tuple(train.image_shape), train.mean, train.std, rank, world)
    whole = evaluator()
    found = {"whole": whole.evaluate()}
    try:
        evaluator(0, 2).evaluate()
    except RuntimeError:
        pass
    else:
        raise SystemExit("a share alone gave a metric of its own")
    for world in (2, 3):
        parts = [evaluator(rank, world).sums() for rank in range(world)]
        found[world] = whole.results({k: sum(p[k] for p in parts) for k in parts[0]})
    out[spec.model] = found
print(json.dumps(out))
"""
)


def test_shares_summed_give_the_whole_sets_metric_on_the_same_weights(tf_py, mnist_shards, tmp_path):
    """What an MWMS run records (every worker's share, the sums all-reduced) is the metric
    of the whole set evaluated at once, on the same weights (LeNet and AutoEncoder); a
    share alone has no metric of its own."""
    specs = [spec(model=m) for m in ("lenet", "autoencoder")]
    run_and_check(tf_py, SHARDED, specs, mnist_shards, tmp_path)

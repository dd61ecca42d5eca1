"""The Caffe runner's held-out evaluation, for real: LeNet on MNIST's 10,000 test images.

Every rank evaluates its share with Caffe's own inference (a TEST-phase net sharing the
solver's weights) between iterations, outside the timed steps, and rank 0 records the
shares' sum, which is the whole set's metric (checked on the same weights); with a
quality target every rank stops after the first evaluation that met it. Runs go through dlscale.launch as the
training rule's do (helpers.caffe_runs); no timing is asserted, only that
eval time and training time are kept apart.
"""

from __future__ import annotations

import math

import numpy as np
from helpers.caffe_runs import launch, spec
from helpers.heldout_shares import check_shares

from dlscale.analysis.tables import load_events
from dlscale.events import read_events
from dlscale.runners.caffe.evaluate import squared_error, top_k_hits


def run(caffe_py, mnist_shards, tmp_path, **fields):
    events_path = tmp_path / "events.jsonl"
    proc = launch(caffe_py, spec(**fields), mnist_shards, events_path, retries=0)
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events_path, events


def kinds(events, kind):
    return [e for e in events if e["event"] == kind]


def test_metrics_count_hits_and_the_sigmoid_error():
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0], [0.0, 0.5, 0.4]], dtype=np.float32)
    labels = np.array([1, 2, 0])
    assert top_k_hits(logits, labels, 1) == 1
    assert top_k_hits(logits, labels, 2) == 2
    assert top_k_hits(logits, labels, 5) == 3  # k above the classes: every label is among them
    z = np.array([[0.0, 1000.0, -1000.0]], dtype=np.float32)
    target = np.array([[[[0.5, 1.0, 0.25]]]], dtype=np.float32)
    assert math.isclose(squared_error(z, target), 0.0625)  # no overflow at +-1000


def test_lenet_evaluates_on_the_heldout_set_outside_the_timed_steps(caffe_py, mnist_shards, tmp_path):
    _, events = run(caffe_py, mnist_shards, tmp_path, batch=64, iterations=40, eval_every=20)
    evals = kinds(events, "eval")
    assert [e["iteration"] for e in evals] == [20, 40, 42]  # every 20 (warm-up counted) and after the last
    assert {e["rank"] for e in evals} == {0}
    assert {(e["metric"], e["split"], e["samples"], e["heldout"]) for e in evals} == {
        ("top1", "test", 10000, "mnist")
    }
    assert 0.5 < evals[-1]["value"] <= 1.0, evals  # chance is 0.1
    assert all(e["eval_s"] > 0 for e in evals)
    timed = [e["step_s"] for e in kinds(events, "iteration") if not e["warmup"]]
    assert math.isclose(evals[-1]["train_s"], sum(timed), rel_tol=1e-9, abs_tol=1e-9)
    assert evals[0]["train_s"] < evals[1]["train_s"] <= evals[2]["train_s"]


def test_learning_rate_zero_stays_at_chance_evaluated_once(caffe_py, mnist_shards, tmp_path):
    _, events = run(caffe_py, mnist_shards, tmp_path, iterations=5, lr=0.0)
    evals = kinds(events, "eval")
    assert len(evals) == 1 and evals[0]["iteration"] == 7, evals  # eval_every 0: after the last only
    assert evals[0]["value"] < 0.2, evals


def test_two_rank_target_run_stops_early_on_every_rank(caffe_py, mnist_shards, tmp_path):
    target = {"metric": "top1", "value": 0.5}
    events_path, events = run(
        caffe_py, mnist_shards, tmp_path, nodes=2, batch=64, eval_every=5, quality_target=target,
        max_iterations=60,
    )  # fmt: skip
    evals = kinds(events, "eval")
    assert evals and {e["rank"] for e in evals} == {0}
    met = [e for e in evals if e["value"] >= 0.5]
    assert met and met[0] is evals[-1], evals  # stopped at the first evaluation that met the target
    stop = evals[-1]["iteration"]
    assert stop < 62
    iterations = kinds(events, "iteration")
    for rank in (0, 1):
        assert [e["iteration"] for e in iterations if e["rank"] == rank] == list(range(stop)), rank
    runs, _ = load_events([events_path])
    row = runs.iloc[0]
    assert row["status"] == "ok", row.to_dict()
    assert bool(row["reached_target"]) and row["quality_metric"] == "top1"
    assert math.isclose(row["time_to_target_s"], met[0]["train_s"], rel_tol=1e-9), row.to_dict()


#: In the caffe venv: each model's held-out sums, the whole set at once and in 2 and 3
#: ranks' shares (each rank's Evaluator converts its own share), on the same weights.
SHARDED = """
import json, sys, tempfile
from pathlib import Path
from dlscale.data.shards import ShardSet, heldout_dir
from dlscale.runners.caffe.evaluate import Evaluator
from dlscale.runners.caffe.train import make_solver
from dlscale.runspec import RunSpec

data = Path(sys.argv[2])
train = ShardSet(data)
out = {}
for spec in map(RunSpec.from_dict, json.loads(sys.argv[1])):
    with tempfile.TemporaryDirectory() as tmp:
        net = make_solver(spec, spec.batch, Path(tmp)).net
    def evaluator(rank, world):
        return Evaluator(spec.model, spec.batch, net, heldout_dir(data), train.mean, train.std, rank, world)
    found = {"whole": evaluator(0, 1).evaluate()}
    for world in (2, 3):
        found[world] = evaluator(0, 1).results(sum(evaluator(rank, world).sums() for rank in range(world)))
    out[spec.model] = found
print(json.dumps(out))
"""


def test_shares_summed_give_the_whole_sets_metric_on_the_same_weights(caffe_py, mnist_shards, tmp_path):
    """What a multi-rank run records (every rank's share, the sums all-reduced by MPI) is
    the metric of the whole set evaluated at once, on the same weights (LeNet and AutoEncoder)."""
    import json
    import os
    import subprocess

    from dlscale.runners.caffe.launcher import caffe_env, caffe_home

    env = {**os.environ, **caffe_env(caffe_home({}, os.environ, str(caffe_py)), {}), "GLOG_minloglevel": "2"}
    proc = subprocess.run(
        [str(caffe_py), "-c", SHARDED, json.dumps([spec(model=m) for m in ("lenet", "autoencoder")]),
         str(mnist_shards)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_shares(json.loads(proc.stdout.splitlines()[-1]))

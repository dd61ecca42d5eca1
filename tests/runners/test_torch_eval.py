"""The PyTorch runner's held-out evaluation, for real: LeNet on MNIST's 10,000 test images
between timed steps (every rank its share, rank 0 records the sum: the whole set's metric,
checked on the same weights), and a run with a quality target stops every rank at the
first evaluation that met it.

Runs go through the launcher as the training rule starts them (``helpers.torch_runs``),
without redoing contended attempts: these tests check what was computed, never how fast
(no timing asserted).
"""

from __future__ import annotations

import math

import pytest
from helpers.heldout_shares import SCRIPT_HEAD, run_and_check
from helpers.torch_runs import launch, spec

from dlscale.analysis import tables
from dlscale.events import read_events

#: The launcher redoes a run whose host was busy; on 2 shared cores that would only repeat
#: the same numbers (every attempt computes the same losses).
ONCE = ("--contended-retries", "0")


def run(torch_py, mnist_shards, tmp_path, **settings):
    """Launch one run of ``spec(**settings)``; its events (the run must be ok) and stdout."""
    run_spec = spec(**settings)
    events_path = tmp_path / run_spec["run_id"] / "events.jsonl"
    proc = launch(torch_py, run_spec, mnist_shards, events_path, args=ONCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events_path, events, proc.stdout + proc.stderr


def evals_of(events):
    return [e for e in events if e["event"] == "eval"]


def timed_step_sum(events, rank=0, upto=None):
    """Rank ``rank``'s summed step_s over timed iterations (0-based ones below ``upto``)."""
    return sum(
        e["step_s"]
        for e in events
        if e["event"] == "iteration"
        and e["rank"] == rank
        and not e["warmup"]
        and (upto is None or e["iteration"] < upto)
    )


def test_lenet_learns_and_evaluation_is_kept_out_of_training_time(torch_py, mnist_shards, tmp_path):
    """Every eval_every iterations and after the last: top-1 on all 10,000 test images, well
    above chance; each eval's train_s is the timed steps' step_s summed up to it (warm-up
    and the evaluations themselves excluded), its eval_s reported apart."""
    _, events, _ = run(torch_py, mnist_shards, tmp_path, batch=64, iterations=40, warmup=2, eval_every=20)
    evals = evals_of(events)
    assert [e["iteration"] for e in evals] == [20, 40, 42]
    for e in evals:
        assert e["rank"] == 0 and e["split"] == "test" and e["metric"] == "top1"
        assert e["samples"] == 10_000 and e["heldout"] == "mnist"
        assert 0.0 <= e["value"] <= 1.0 and e["eval_s"] > 0
        assert math.isclose(e["train_s"], timed_step_sum(events, upto=e["iteration"]), rel_tol=1e-9)
    assert evals[-1]["value"] > 0.5, evals  # chance is 0.1 (0.86 measured after 42 iterations)
    assert math.isclose(evals[-1]["train_s"], timed_step_sum(events), rel_tol=1e-9)
    assert [e["train_s"] for e in evals] == sorted(e["train_s"] for e in evals)


def test_learning_rate_zero_stays_at_chance(torch_py, mnist_shards, tmp_path):
    """A model that does not learn is visible: one evaluation (after the last iteration, as
    eval_every 0 asks), at chance level, and the runs table says it did not learn."""
    path, events, _ = run(torch_py, mnist_shards, tmp_path, lr=0.0, iterations=5, warmup=1)
    [final] = evals_of(events)
    assert final["iteration"] == 6 and final["samples"] == 10_000
    assert final["value"] < 0.2, final
    runs, _ = tables.load_events([path])
    row = runs.iloc[0]
    assert row["status"] == "ok" and row["quality_metric"] == "top1"
    assert row["final_quality"] == pytest.approx(final["value"]) and not row["learned"]


def test_target_stops_every_rank_at_the_first_evaluation_that_met_it(torch_py, mnist_shards, tmp_path):
    """2 ranks, target top-1 0.5 checked every 5 iterations, at most 60: rank 0 alone
    evaluates, both ranks stop after the evaluation that met it, and the analysis reads the
    run as ok, reached, with time to target that evaluation's training clock."""
    path, events, output = run(
        torch_py,
        mnist_shards,
        tmp_path,
        nodes=2,
        batch=32,
        iterations=20,
        warmup=2,
        eval_every=5,
        max_iterations=60,
        quality_target={"metric": "top1", "value": 0.5},
    )
    evals = evals_of(events)
    assert evals and all(e["rank"] == 0 for e in evals)
    # Each evaluation prints one line; a second rank evaluating would print its own.
    assert output.count("held-out after") == len(evals)
    assert [e["iteration"] for e in evals] == list(range(5, 5 * len(evals) + 1, 5))
    met = [e for e in evals if e["value"] >= 0.5]
    assert met == evals[-1:], evals  # it stopped at the first that met the target
    stop = evals[-1]["iteration"]
    assert stop < 2 + 60  # well before the cap
    for rank in (0, 1):
        mine = [e["iteration"] for e in events if e["event"] == "iteration" and e["rank"] == rank]
        assert mine == list(range(stop)), (rank, mine)
    runs, _ = tables.load_events([path])
    row = runs.iloc[0]
    assert row["status"] == "ok" and bool(row["reached_target"]) is True
    assert row["time_to_target_s"] == pytest.approx(evals[-1]["train_s"])
    assert math.isclose(evals[-1]["train_s"], timed_step_sum(events), rel_tol=1e-9)


#: In the torch venv: each model's held-out sums, the whole set at once and in 2 and 3
#: ranks' shares (each share converted once, as every rank's HeldOut does), on the same weights.
SHARDED = (
    SCRIPT_HEAD
    + """
import torch
from dlscale.runners.torch.data import Batches
from dlscale.runners.torch.evaluate import HeldOut
from dlscale.runners.torch.models import build_model
out = {}
for spec, ctx in contexts():
    torch.manual_seed(3)
    model = build_model(spec.model)
    batches = Batches(ctx, torch)
    found = {"whole": HeldOut(ctx, batches, torch).evaluate(model)}
    for world in (2, 3):
        parts = [HeldOut(ctx, batches, torch, rank, world).sums(model) for rank in range(world)]
        found[world] = HeldOut(ctx, batches, torch).results({k: sum(p[k] for p in parts) for k in parts[0]})
    out[spec.model] = found
print(json.dumps(out))
"""
)


def test_shares_summed_give_the_whole_sets_metric_on_the_same_weights(torch_py, mnist_shards, tmp_path):
    """What a multi-rank run records (every rank's share, the sums all-reduced) is the
    metric of the whole set evaluated at once, on the same weights (LeNet and AutoEncoder)."""
    specs = [spec(model=m) for m in ("lenet", "autoencoder")]
    run_and_check(torch_py, SHARDED, specs, mnist_shards, tmp_path)

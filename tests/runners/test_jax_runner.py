"""The JAX runner, for real: its models, its events, parity with the torch reference, a
wrong collective caught, and a coordinator that cannot be reached.

Two runs are shared by the tests (module fixtures, about 10 s each on 2 cores): LeNet on
1 rank of 64 and on 2 ranks of 32 from the shared weights (``init: shared``, seed 1234, no
warm-up: the torch reference run of ``tests/data/parity/torch-lenet.json``), the 2-rank run
with rank 1's gradient doubled before the all-reduce from iteration 10 on
(``DLSCALE_JAX_FAULT``: what a collective returning wrong values on one rank, jax-ml/jax
#40830, does to a run). The parity check compares each with the reference's recorded
losses: the 2-rank run passes on its first 10 and fails on 20, naming JAX and iteration 11
(the first loss after the first wrong update). 2 ranks under a learning-rate rule with
warm-up: tests/runners/test_lr_rule_runs.py; on SLURM: tests/slurm/test_jax_slurm.py. SIGTERM, SIGKILL, time limits and a master name that does not
resolve are the fault suite's (tests/faults/test_faults.py runs every implemented
framework, JAX included).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest
from helpers.heldout_shares import SCRIPT_HEAD, run_and_check
from helpers.jax_runs import launch, parity_row, spec
from helpers.paths import framework_python

from dlscale import catalog
from dlscale.analysis import tables
from dlscale.base.sysutil import free_port
from dlscale.data import initweights
from dlscale.data.shards import GlobalBatchSlices, ShardSet
from dlscale.events import read_events

SHARED = {"iterations": 20, "warmup": 0, "lr": 0.01, "seed": 1234, "init": "shared"}
ONCE = ("--contended-retries", "0")  # every attempt computes the same losses
FAULT_FROM = 10  # rank 1's gradient doubled before the all-reduce from this iteration on
FAULT = {"DLSCALE_JAX_FAULT": f"scale-gradient:1:{FAULT_FROM}"}


@pytest.fixture(scope="module")
def jax_py():
    return framework_python("jax")


def run_ok(python, data, root, env=None, **settings):
    """Launch ``spec(**settings)`` (it must end ok); its events path and events."""
    run_spec = spec(**settings)
    events_path = root / "events.jsonl"
    proc = launch(python, run_spec, data, events_path, env=env, args=ONCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events_path, events


@pytest.fixture(scope="module")
def one_rank(jax_py, mnist_shards, tmp_path_factory):
    return run_ok(jax_py, mnist_shards, tmp_path_factory.mktemp("jax-1"), batch=64, **SHARED)


@pytest.fixture(scope="module")
def two_ranks_wrong_collective(jax_py, mnist_shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("jax-2-fault")
    return run_ok(jax_py, mnist_shards, root, env=FAULT, nodes=2, batch=32, **SHARED)


def test_parameter_counts_match_the_catalog(jax_py):
    probe = (
        "import json\nfrom dlscale.runners.jax.models import MODELS, parameter_count\n"
        "print(json.dumps({m: parameter_count(m) for m in MODELS}))"
    )
    proc = subprocess.run([str(jax_py), "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(catalog.MNIST_MODELS) | {"alexnet"} == set(counts)  # ResNet-50 not written yet
    assert counts == {m: catalog.PARAMETERS[m] for m in counts}


def test_one_rank_events_are_valid_and_match_the_reference(one_rank):
    path, events = one_rank
    runs, iterations = tables.load_events([path])  # every event checked against its schema
    assert runs.loc[0, "status"] == "ok" and len(iterations) == 20
    start = events[0]
    assert start["versions"]["jax"] == start["versions"]["jaxlib"] == "0.10.2"
    assert start["settings"]["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=true"
    assert start["measured"]["compile_s"] > 0  # compiled before the first timed step
    steps = [e for e in events if e["event"] == "iteration"]
    assert steps[0]["init_sha256"] == initweights.digest(initweights.initial_weights("lenet", 1234))
    assert all(e["comm_s"] == 0 and e["step_s"] >= e["compute_s"] > 0 for e in steps)
    assert [e["lr"] for e in steps] == [0.01] * 20
    (last_eval,) = [e for e in events if e["event"] == "eval"]
    assert last_eval["metric"] == "top1" and last_eval["samples"] == 10_000 and last_eval["value"] > 0.5
    row = parity_row(path)
    assert row["passes"] and row["init_matches"], row["reason"]


def test_two_ranks_compute_what_one_does_until_a_wrong_collective_which_parity_names(
    two_ranks_wrong_collective,
):
    """One 2-rank run: its first 10 steps are right (the parity check passes on them), then
    rank 1's gradient is doubled before the all-reduce from iteration 10 on, and the check
    over the 20 losses fails naming JAX and iteration 11 (the first loss after a wrong update)."""
    path, events = two_ranks_wrong_collective
    start = events[0]
    assert start["world_size"] == 2 and start["hosts"][0] != start["hosts"][1]
    steps = [e for e in events if e["event"] == "iteration"]
    assert len(steps) == 2 * 20
    for e in steps:
        assert e["comm_s"] > 0 and e["compute_s"] > 0 and e["step_s"] >= e["compute_s"] + e["comm_s"] - 1e-9
        assert e["comm_bytes"] == catalog.PARAMETERS["lenet"] * 4
    assert any("fault injected" in w for w in events[-1]["warnings"])  # the run says so
    right = parity_row(path, iterations=FAULT_FROM)
    assert right["passes"], right["reason"]
    row = parity_row(path)
    assert not row["passes"] and row["first_failed_iteration"] == FAULT_FROM + 1
    assert row["reason"].startswith(f"jax differs from torch at iteration {FAULT_FROM + 1}"), row["reason"]


def test_a_rank_that_cannot_reach_its_coordinator_fails_in_time_naming_it(jax_py, mnist_shards, tmp_path):
    """Rank 1 of 2 alone: nothing listens at the master's port. It must end itself (its own
    rank_end, not JAX's abort) within the start-up timeout, naming the coordinator."""
    port, startup_s = free_port(), 10
    run_spec = spec(nodes=2, batch=32, options={"startup_timeout_s": startup_s})
    env = {
        **os.environ,
        "DLSCALE_RANK": "1", "DLSCALE_WORLD_SIZE": "2", "DLSCALE_LOCAL_RANK": "0",
        "DLSCALE_NODE_RANK": "1", "DLSCALE_NNODES": "2", "DLSCALE_HOST": "test/node1",
        "DLSCALE_MASTER_ADDR": "127.0.0.1", "DLSCALE_MASTER_PORT": str(port),
        "DLSCALE_NODE_ADDR": "127.0.0.1", "JAX_PLATFORMS": "cpu",
    }  # fmt: skip
    argv = [str(jax_py), "-m", "dlscale.runners.jax", "--spec-json", json.dumps(run_spec)]
    argv += ["--data", str(mnist_shards), "--work-dir", str(tmp_path)]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=startup_s + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, output[-3000:]
    end = [json.loads(line) for line in (tmp_path / "rank1.jsonl").read_text().splitlines()][-1]
    assert end["event"] == "rank_end" and end["status"] == "failed"
    assert f"rank 0 (coordinator, 127.0.0.1:{port}) unreachable from rank 1" in end["reason"]
    assert f"start-up timeout of {startup_s} s" in end["reason"]
    assert startup_s <= elapsed < startup_s + 30, elapsed


def autoencoder_first_loss(data, seed: int, batch: int) -> float:
    """The AutoEncoder's loss on the first global batch from the shared weights, in numpy
    (the canonical layout: y = x W^T + b), as the torch reference defines it."""
    shards = ShardSet(data)
    index = next(GlobalBatchSlices(shards.num_samples, batch, 1, 0, seed))
    x = shards.take(index)[0].reshape(batch, -1).astype(np.float64) / 255.0
    weights = initweights.initial_weights("autoencoder", seed)
    y = x
    for layer in range(8):
        part = f"{'enc' if layer < 4 else 'dec'}{layer % 4 + 1}"
        y = y @ weights[f"{part}.weight"].T.astype(np.float64) + weights[f"{part}.bias"]
        if layer % 4 != 3:
            y = 1.0 / (1.0 + np.exp(-y))
    return float(np.mean(np.maximum(y, 0) - y * x + np.log1p(np.exp(-np.abs(y)))))


def test_autoencoder_starts_from_the_shared_loss_and_evaluates_its_reconstruction(
    jax_py, mnist_shards, tmp_path
):
    settings = {**SHARED, "iterations": 3}
    path, events = run_ok(jax_py, mnist_shards, tmp_path, model="autoencoder", batch=64, **settings)
    tables.load_events([path])
    losses = [e["loss"] for e in events if e["event"] == "iteration"]
    assert losses[0] == pytest.approx(autoencoder_first_loss(mnist_shards, 1234, 64), rel=1e-5)
    assert losses[-1] < losses[0]
    (last_eval,) = [e for e in events if e["event"] == "eval"]
    assert last_eval["metric"] == "mse" and last_eval["samples"] == 10_000 and 0 < last_eval["value"] < 0.25


#: In the jax venv: each model's held-out sums, the whole set at once and in 2 and 3 ranks'
#: shares (each rank's HeldOut converts its own), on the same weights.
SHARDED = (
    SCRIPT_HEAD
    + """
import jax
from dlscale.runners.jax.data import Batches
from dlscale.runners.jax.evaluate import HeldOut
from dlscale.runners.jax.models import framework_init, model
out = {}
for spec, ctx in contexts():
    layout, apply = model(spec.model)
    params = jax.device_put(framework_init(spec.model, 3))
    forward = lambda p, x, layout=layout, apply=apply: apply(layout.unflatten(p), x, None)
    batches = Batches(ctx)
    found = {"whole": HeldOut(ctx, batches, forward, jax).evaluate(params)}
    for world in (2, 3):
        sums = sum(HeldOut(ctx, batches, forward, jax, rank, world).sums(params) for rank in range(world))
        found[world] = HeldOut(ctx, batches, forward, jax).results(sums)
    out[spec.model] = found
print(json.dumps(out))
"""
)


def test_shares_summed_give_the_whole_sets_metric_on_the_same_weights(jax_py, mnist_shards, tmp_path):
    """What a multi-rank run records (every rank's share, the sums added by a collective)
    is the metric of the whole set evaluated at once, on the same weights (LeNet and AutoEncoder)."""
    specs = [spec(model=m) for m in ("lenet", "autoencoder")]
    run_and_check(jax_py, SHARDED, specs, mnist_shards, tmp_path)

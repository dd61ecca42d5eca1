"""The PyTorch runner's side of the parity check (``init: shared``), for real.

torch's semantics are the reference: its SGD (v = m v + g; w -= lr v) and mean losses are
what every other runner is made to compute. These tests pin what the reference run
computes: it starts from ``dlscale.data.initweights`` (digest recorded), trains on the global
batch sequence (``GlobalBatchSlices``), its AutoEncoder's first loss is the mean over pixels
and images of the sigmoid cross-entropy of the shared weights on the first batch, and 2
ranks of 32 compute what 1 rank of 64 does (``dlscale.analysis.parity.check`` passes).

``tests/data/parity/torch-lenet.json`` holds the reference LeNet run's 20 losses, for the
other frameworks' parity work to compare with; ``torch-lenet-threads.json`` the same run at
1 and 2 threads per rank (float32 summation order, the spread the tolerance derives from).
``DLSCALE_WRITE_PARITY=1`` rewrites both from a run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import REPO
from helpers.torch_runs import launch, spec

from dlscale.analysis import parity
from dlscale.analysis.parity import tolerance_for
from dlscale.data import initweights
from dlscale.data.shards import GlobalBatchSlices, ShardSet
from dlscale.events import read_events

PARITY_DATA = REPO / "tests" / "data" / "parity"
#: The reference run the parity engineer compares with: 1 rank, no warm-up.
REFERENCE = {"iterations": 20, "warmup": 0, "batch": 64, "lr": 0.01, "seed": 1234, "init": "shared"}
WRITE = os.environ.get("DLSCALE_WRITE_PARITY") == "1"
ONCE = ("--contended-retries", "0")  # every attempt computes the same losses


def shared_run(torch_py, data, root, **settings):
    """Launch ``spec(**settings)`` (must end ok); its events path and events."""
    run_spec = spec(**settings)
    events_path = root / run_spec["run_id"] / "events.jsonl"
    proc = launch(torch_py, run_spec, data, events_path, args=ONCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events_path, events


def losses(events, rank=0):
    return [e["loss"] for e in events if e["event"] == "iteration" and e["rank"] == rank]


def record(events, **extra):
    start = events[0]
    keep = ("model", "nodes", "world_size", "batch", "global_batch", "threads_per_rank")
    return {
        "framework": "torch",
        **{k: start[k] for k in keep},
        **{k: start["spec"][k] for k in ("learning_rate", "momentum", "seed", "warmup", "init")},
        "versions": {k: start["versions"][k] for k in ("torch", "numpy")},
        "init_sha256": next(e["init_sha256"] for e in events if e.get("init_sha256")),
        **extra,
    }


@pytest.fixture(scope="module")
def reference_run(torch_py, mnist_shards, tmp_path_factory):
    return shared_run(torch_py, mnist_shards, tmp_path_factory.mktemp("reference"), **REFERENCE)


def test_reference_lenet_starts_from_the_shared_weights_and_keeps_its_losses(reference_run):
    path, events = reference_run
    iterations = [e for e in events if e["event"] == "iteration"]
    assert [e["iteration"] for e in iterations] == list(range(20))
    digest = initweights.digest(initweights.initial_weights("lenet", 1234))
    assert iterations[0]["init_sha256"] == digest
    assert all("init_sha256" not in e for e in iterations[1:])
    got = losses(events)
    assert 2.2 < got[0] < 2.4 and got[-1] < got[0]  # ln 10 = 2.303 from small weights
    stored = PARITY_DATA / "torch-lenet.json"
    if WRITE:
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text(json.dumps(record(events, losses=got), indent=1) + "\n")
    reference = json.loads(stored.read_text())
    assert reference["init_sha256"] == digest and len(reference["losses"]) == 20
    np.testing.assert_allclose(got, reference["losses"], rtol=tolerance_for("lenet", 64), atol=0)


def test_two_ranks_compute_what_one_rank_of_the_global_batch_does(
    torch_py, mnist_shards, tmp_path, reference_run
):
    """2 ranks x 32 against 1 rank x 64: the parity check's N-node row passes (the mean of
    the ranks' slice losses is the global batch's loss, gradients averaged)."""
    path, events = shared_run(torch_py, mnist_shards, tmp_path, **{**REFERENCE, "nodes": 2, "batch": 32})
    assert len(losses(events, 0)) == len(losses(events, 1)) == 20
    assert losses(events, 0) != losses(events, 1)  # each rank its own slice
    table = parity.check([parity.read_run(reference_run[0]), parity.read_run(path)])
    [row] = table.to_dict("records")
    assert row["world_size"] == 2 and row["global_batch"] == 64 and row["init_matches"] is True
    assert row["passes"], row["reason"]


def bce_first_loss(data: Path, seed: int, batch: int) -> float:
    """The AutoEncoder's first loss, in float64 numpy: the shared weights on the first
    global batch, sigmoid cross-entropy against the [0, 1] pixels, mean over both axes."""
    shards = ShardSet(data)
    index = next(GlobalBatchSlices(shards.num_samples, batch, 1, 0, seed))
    x = shards.take(index)[0].reshape(batch, -1).astype(np.float64) / 255.0
    w = initweights.initial_weights("autoencoder", seed)
    h = x
    for name in [f"enc{i}" for i in range(1, 5)] + [f"dec{i}" for i in range(1, 5)]:
        h = h @ w[f"{name}.weight"].astype(np.float64).T + w[f"{name}.bias"]
        if name not in ("enc4", "dec4"):  # the code layer is linear; dec4 gives logits
            h = 1.0 / (1.0 + np.exp(-h))
    return float(np.mean(np.maximum(h, 0) - h * x + np.log1p(np.exp(-np.abs(h)))))


def test_autoencoder_loss_is_the_mean_over_pixels_and_images(torch_py, mnist_shards, tmp_path):
    settings = {**REFERENCE, "model": "autoencoder", "iterations": 3}
    _, events = shared_run(torch_py, mnist_shards, tmp_path, **settings)
    first = events[1]
    assert first["iteration"] == 0
    assert first["init_sha256"] == initweights.digest(initweights.initial_weights("autoencoder", 1234))
    assert first["loss"] == pytest.approx(bce_first_loss(mnist_shards, 1234, 64), rel=1e-5)


@pytest.mark.skipif(not WRITE, reason="measures the summation-order spread: DLSCALE_WRITE_PARITY=1")
def test_write_thread_spread(torch_py, mnist_shards, tmp_path, reference_run):
    """The reference run again at 2 threads per rank: the same computation in another float32
    summation order. Writes both loss sequences and their relative difference per iteration."""
    _, events = shared_run(torch_py, mnist_shards, tmp_path, **{**REFERENCE, "threads_per_rank": 2})
    one, two = losses(reference_run[1]), losses(events)
    diffs = [abs(a - b) / abs(a) for a, b in zip(one, two, strict=True)]
    out = record(
        events,
        threads_per_rank=[1, 2],
        losses={"1": one, "2": two},
        rel_diff=diffs,
        max_rel_diff=max(diffs),
    )
    (PARITY_DATA / "torch-lenet-threads.json").write_text(json.dumps(out, indent=1) + "\n")

"""The Caffe runner's side of the parity check (run spec ``init: shared``), for real.

A 1-rank LeNet run from the shared initialisation records that initialisation's digest
and reproduces the losses kept in tests/data/parity/caffe-lenet.json (the file the parity
engineer compares frameworks with; ``DLSCALE_WRITE_PARITY=1`` rewrites it from this run);
2 ranks of 32 train on the halves of the same global batches of 64, so the mean of their
losses is the 1-rank run's.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from helpers.caffe_runs import launch, spec
from helpers.paths import REPO

from dlscale.data import initweights
from dlscale.events import read_events

PARITY = REPO / "tests" / "data" / "parity" / "caffe-lenet.json"
SETTING = {"batch": 64, "iterations": 20, "warmup": 0, "lr": 0.01, "seed": 1234, "init": "shared"}


def losses_of(caffe_py, mnist_shards, tmp_path, **fields):
    events_path = tmp_path / "events.jsonl"
    proc = launch(caffe_py, spec(**fields), mnist_shards, events_path, retries=0)
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    iterations = [e for e in events if e["event"] == "iteration"]
    by_rank: dict[int, list[float]] = {}
    for e in iterations:
        by_rank.setdefault(e["rank"], []).append(e["loss"])
    return iterations, by_rank


@pytest.fixture(scope="module")
def one_rank(caffe_py, mnist_shards, tmp_path_factory):
    return losses_of(caffe_py, mnist_shards, tmp_path_factory.mktemp("one"), **SETTING)


def test_shared_init_lenet_losses(one_rank):
    iterations, by_rank = one_rank
    digest = initweights.digest(initweights.initial_weights("lenet", SETTING["seed"]))
    assert iterations[0]["init_sha256"] == digest
    assert all("init_sha256" not in e for e in iterations[1:])
    losses = by_rank[0]
    assert len(losses) == 20 and all(math.isfinite(v) for v in losses)
    assert 2.0 < losses[0] < 2.6, losses[0]  # ~ln 10 from a small uniform initialisation
    assert sum(losses[-5:]) / 5 < 0.8 * losses[0], losses
    if os.environ.get("DLSCALE_WRITE_PARITY") == "1":
        record = {
            "framework": "caffe", "model": "lenet", "world_size": 1, "batch": 64, "learning_rate": 0.01,
            "momentum": 0.9, "seed": SETTING["seed"], "warmup": 0, "init_sha256": digest, "losses": losses,
        }  # fmt: skip
        PARITY.parent.mkdir(parents=True, exist_ok=True)
        PARITY.write_text(json.dumps(record, indent=1) + "\n")
    kept = json.loads(PARITY.read_text())
    assert kept["init_sha256"] == digest
    # The same build and BLAS thread count: equal up to float32 rounding of the summation order.
    for i, (now, then) in enumerate(zip(losses, kept["losses"], strict=True)):
        assert math.isclose(now, then, rel_tol=1e-4), (i, now, then)


def test_two_ranks_of_half_the_batch_match_one_rank(one_rank, caffe_py, mnist_shards, tmp_path):
    _, single = one_rank
    _, by_rank = losses_of(caffe_py, mnist_shards, tmp_path, **{**SETTING, "batch": 32, "nodes": 2})
    assert by_rank[0] != by_rank[1]  # each rank its own half of the global batch
    mean = [(a + b) / 2 for a, b in zip(by_rank[0], by_rank[1], strict=True)]
    for i, (two, one) in enumerate(zip(mean, single[0], strict=True)):
        assert math.isclose(two, one, rel_tol=1e-4), (i, two, one)

"""The BigDL runner's side of the parity check (issue 34): ``init: shared``, for real.

A 1-rank LeNet run starting from ``dlscale.initweights``' arrays (in BigDL's layout),
trained on its slice of the run's global batch sequence, with torch's SGD (momentum, no
dampening) and the mean loss. Its first losses are what ``dlscale.parity`` compares with
the other frameworks'; two differences are BigDL's by design and stay (the parity check
names them): its FP16 parameter exchange (the replicas compute with weights rounded to
half precision, also with one executor) and its own order of mini-batches drawn from the
cached training RDD. ``DLSCALE_WRITE_PARITY=1`` writes the losses to
tests/data/parity/bigdl-lenet.json for the parity engineer.
"""

from __future__ import annotations

import json
import math
import os

from helpers.bigdl_runs import launch, spec
from helpers.paths import REPO

from dlscale import initweights
from dlscale.events import read_events

PARITY = REPO / "tests" / "data" / "parity" / "bigdl-lenet.json"
SETTINGS = {"iterations": 20, "warmup": 0, "batch": 64, "lr": 0.01, "seed": 1234}


def test_shared_init_lenet_starts_from_the_shared_weights_and_learns(bigdl_py, mnist_shards, no_leftovers):  # noqa: F811
    settings = dict(SETTINGS)
    seed = settings.pop("seed")
    run_spec = {**spec(nodes=1, **settings), "seed": seed, "init": "shared"}
    events_path = no_leftovers / "parity" / "events.jsonl"
    proc = launch(bigdl_py, run_spec, mnist_shards, events_path, retries=0)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    assert events[0]["spec"].get("init") == "shared"
    iters = [e for e in events if e["event"] == "iteration"]
    assert [e["iteration"] for e in iters] == list(range(20))
    digest = initweights.digest(initweights.initial_weights("lenet", seed))
    assert iters[0]["init_sha256"] == digest and all("init_sha256" not in e for e in iters[1:])
    losses = [e["loss"] for e in iters]
    assert all(math.isfinite(x) for x in losses)
    # Small uniform weights and zero biases: near-uniform class scores, loss close to ln 10.
    assert abs(losses[0] - math.log(10)) < 0.1, losses[:3]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    if os.environ.get("DLSCALE_WRITE_PARITY") == "1":
        PARITY.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "framework": "bigdl",
            "model": "lenet",
            "nodes": 1,
            "settings": {**SETTINGS, "momentum": run_spec["momentum"], "init": "shared"},
            "init_sha256": digest,
            "losses": losses,
            "designed_differences": [
                "FP16 parameter exchange: each replica computes with the weights rounded to half"
                " precision (BigDL's AllReduceParameter, also with one executor)",
                "mini-batches drawn by BigDL from its cached training RDD in its own order: the"
                " same samples as the global batch sequence's first 20 batches, not in that order",
            ],
            "versions": {k: events[0]["versions"][k] for k in ("bigdl", "pyspark")},
        }
        PARITY.write_text(json.dumps(record, indent=1) + "\n")

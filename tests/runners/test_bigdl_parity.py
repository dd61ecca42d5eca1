"""The BigDL runner's side of the parity check (issue 34): ``init: shared``, for real.

A 1-rank LeNet run starting from ``dlscale.data.initweights``' arrays (in BigDL's layout),
trained on its slice of the run's global batch sequence, with torch's SGD (momentum, no
dampening) and the mean loss. Its first losses are what ``dlscale.analysis.parity`` compares with
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

from helpers.bigdl_runs import SHARED_INIT
from helpers.paths import REPO

from dlscale.data import initweights

PARITY = REPO / "tests" / "data" / "parity" / "bigdl-lenet.json"
#: The settings of the losses compared: the first 20 iterations of the shared run
#: (helpers.bigdl_runs.SHARED_INIT, which trains on to 40 for its evaluation).
SETTINGS = {"iterations": 20, "warmup": 0, "batch": 64, "lr": 0.01, "seed": 1234}


def test_shared_init_lenet_starts_from_the_shared_weights_and_learns(bigdl_shared_init_run):
    _, events, _ = bigdl_shared_init_run  # its first K losses; it trains on to be evaluated too
    assert events[0]["spec"].get("init") == "shared" and events[0]["spec"]["seed"] == SETTINGS["seed"]
    for key in ("batch", "warmup"):
        assert events[0]["spec"][key] == SETTINGS[key], key
    assert events[0]["spec"]["learning_rate"] == SETTINGS["lr"]
    iters = [e for e in events if e["event"] == "iteration"]
    assert [e["iteration"] for e in iters] == list(range(SHARED_INIT["iterations"]))
    digest = initweights.digest(initweights.initial_weights("lenet", SETTINGS["seed"]))
    assert iters[0]["init_sha256"] == digest and all("init_sha256" not in e for e in iters[1:])
    losses = [e["loss"] for e in iters[: SETTINGS["iterations"]]]
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
            "settings": {**SETTINGS, "momentum": events[0]["spec"]["momentum"], "init": "shared"},
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

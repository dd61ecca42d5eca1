"""The TensorFlow runner's side of the parity check (issue 34): ``init: shared``, for real.

With the run spec's ``init: shared`` the runner starts from ``dlscale.data.initweights``' arrays
in Keras' layout, trains every rank on its slice of one global batch sequence, with
torch's SGD-momentum and the mean loss over the global batch. These tests check the
layout against a forward pass written in numpy on the canonical arrays, pin the first 20
losses of a 1-rank LeNet run (``tests/data/parity/tensorflow-lenet.json``, which the parity
engineer compares across frameworks; ``DLSCALE_WRITE_PARITY=1`` rewrites it), and check
that 2 ranks of 64 compute what 1 rank of 128 does. The tolerance is the parity check's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from helpers.paths import REPO, framework_python
from helpers.tensorflow_runs import iterations_of, launch, spec

from dlscale.analysis.parity import tolerance_for
from dlscale.data import initweights
from dlscale.events import read_events

PARITY_FILE = REPO / "tests" / "data" / "parity" / "tensorflow-lenet.json"
SEED = 1234


@pytest.fixture(scope="session")
def tf_py() -> Path:
    return framework_python("tensorflow")


def shared_run(tf_py: Path, data: Path, tmp_path: Path, nodes: int = 1, batch: int = 64) -> list[dict]:
    run_spec = {**spec(nodes=nodes, batch=batch, iterations=20, warmup=0, lr=0.01), "init": "shared"}
    run_spec["seed"] = SEED
    tmp_path.mkdir(parents=True, exist_ok=True)
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, run_spec, data, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    assert events[0]["spec"]["init"] == "shared"
    return events


def losses_of(events: list[dict], rank: int = 0) -> list[float]:
    return [
        e["loss"] for e in sorted(iterations_of(events), key=lambda e: e["iteration"]) if e["rank"] == rank
    ]


NUMPY_FORWARD = r"""
import json, sys
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from dlscale.data import initweights
from dlscale.runners.tensorflow import sharedinit
from dlscale.runners.tensorflow.models import build_model

def conv(x, w, b):  # canonical: x (N, C, H, W), w (O, C, kh, kw)
    win = sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]

def pool(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

seed = int(sys.argv[1])
w = {k: v.astype(np.float64) for k, v in initweights.initial_weights("lenet", seed).items()}
# Non-zero biases, so that their placement is checked too.
rng = np.random.default_rng(0)
for name in w:
    if name.endswith(".bias"):
        w[name] = rng.normal(0, 0.1, w[name].shape)
x = rng.random((4, 1, 28, 28))
h = pool(conv(x, w["conv1.weight"], w["conv1.bias"]))
h = pool(conv(h, w["conv2.weight"], w["conv2.bias"])).reshape(4, -1)  # (C, H, W) flattening
h = np.maximum(h @ w["fc1.weight"].T + w["fc1.bias"], 0)
expected = h @ w["fc2.weight"].T + w["fc2.bias"]

model = build_model("lenet")
digest = sharedinit.load(model, "lenet", seed)
for var, name in zip(model.trainable_variables, w, strict=True):
    if name.endswith(".bias"):
        var.assign(w[name].astype(np.float32))
got = model(x.transpose(0, 2, 3, 1).astype(np.float32), training=False).numpy()
print(json.dumps({"digest": digest, "max_abs": float(np.abs(got - expected).max()),
                  "scale": float(np.abs(expected).max())}))
"""


def test_shared_lenet_is_the_canonical_network_in_keras_layout(tf_py):
    out = subprocess.run(
        [str(tf_py), "-c", NUMPY_FORWARD, str(SEED)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["digest"] == initweights.digest(initweights.initial_weights("lenet", SEED))
    assert result["scale"] > 0.01 and result["max_abs"] < 1e-4 * max(1.0, result["scale"]), result


def test_one_rank_lenet_shared_losses(tf_py, mnist_shards, tmp_path):
    events = shared_run(tf_py, mnist_shards, tmp_path)
    first = next(e for e in iterations_of(events) if e["iteration"] == 0)
    assert first["init_sha256"] == initweights.digest(initweights.initial_weights("lenet", SEED))
    losses = losses_of(events)
    assert len(losses) == 20 and all(math.isfinite(v) for v in losses)
    # Zero biases and small weights: the first loss is close to ln(10); SGD makes it fall.
    assert abs(losses[0] - math.log(10)) < 0.1, losses[0]
    assert sum(losses[-5:]) < sum(losses[:5]), losses
    if os.environ.get("DLSCALE_WRITE_PARITY") == "1":
        PARITY_FILE.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "framework": "tensorflow",
            "model": "lenet",
            "nodes": 1,
            "batch": 64,
            "learning_rate": 0.01,
            "momentum": 0.9,
            "seed": SEED,
            "init_sha256": first["init_sha256"],
            "versions": {k: events[0]["versions"].get(k) for k in ("tensorflow", "keras", "onednn")},
            "losses": losses,
        }
        PARITY_FILE.write_text(json.dumps(record, indent=1) + "\n")
    pinned = json.loads(PARITY_FILE.read_text())
    assert pinned["init_sha256"] == first["init_sha256"]
    for i, (got, want) in enumerate(zip(losses, pinned["losses"], strict=True)):
        assert abs(got - want) <= tolerance_for("lenet", 64) * abs(want), (i, got, want)


def test_two_ranks_compute_what_one_rank_of_the_global_batch_does(tf_py, mnist_shards, tmp_path):
    one = shared_run(tf_py, mnist_shards, tmp_path / "one", nodes=1, batch=128)
    two = shared_run(tf_py, mnist_shards, tmp_path / "two", nodes=2, batch=64)
    reference = losses_of(one)
    # Each rank reports its slice's mean; the global batch's loss is their mean.
    means = [(a + b) / 2 for a, b in zip(losses_of(two, 0), losses_of(two, 1), strict=True)]
    for i, (got, want) in enumerate(zip(means, reference, strict=True)):
        assert abs(got - want) <= tolerance_for("lenet", 128) * abs(want), (i, got, want)

"""A TensorFlow run spec, a run launched through ``dlscale.launch`` in the TensorFlow venv as
the training rule launches it, and its iteration events."""

from __future__ import annotations

import json
import os
import subprocess

from dlscale import catalog


def spec(model="lenet", nodes=1, batch=64, iterations=40, warmup=2, lr=0.01, **options):
    return {
        "framework": "tensorflow",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": batch,
        "repeat": 0,
        "run_id": f"tensorflow/{model}/n{nodes}x1/b{batch}/r0",
        "world_size": nodes,
        "scaling": "weak",
        "global_batch": batch * nodes,
        "dataset": catalog.model(model).datasets[0],
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": lr,
        "momentum": 0.9,
        "seed": 7,
        "timeout_s": 300,
        "options": {"strategy": "mwms", "num_ps": 1, "collective_timeout_s": 30, **options},
    }


def launch(python, run_spec, data, events, wait=True):
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec),
        "--data", str(data), "--events", str(events), "--python", str(python),
    ]  # fmt: skip
    env = {**os.environ, "DLSCALE_LAUNCHER": "local"}
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def iterations_of(events):
    return [e for e in events if e["event"] == "iteration"]

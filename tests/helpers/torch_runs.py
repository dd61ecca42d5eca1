"""A PyTorch run spec, and a run launched through ``dlscale.launch`` in the torch venv as the
training rule launches it."""

from __future__ import annotations

import json
import os
import subprocess

from dlscale import catalog


def spec(model="lenet", nodes=1, rpn=1, batch=32, iterations=20, warmup=2, lr=0.01, timeout_s=240, **extra):
    world = nodes * rpn
    return {
        "framework": "torch",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": rpn,
        "batch": batch,
        "repeat": 0,
        "run_id": f"torch/{model}/n{nodes}x{rpn}/b{batch}/r0",
        "world_size": world,
        "scaling": "weak",
        "global_batch": batch * world,
        "dataset": catalog.model(model).datasets[0],
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": lr,
        "momentum": 0.9,
        "seed": 7,
        "timeout_s": timeout_s,
        "options": {"channels_last": True, "timeout_s": 30},
        **extra,
    }


def launch(python, run_spec, data, events, env=None, wait=True, rank_python=None, args=()):
    cmd = [
        str(python),
        "-m",
        "dlscale.launch",
        "--spec-json",
        json.dumps(run_spec),
        "--data",
        str(data),
        "--events",
        str(events),
        "--python",
        str(rank_python or python),
        *args,
    ]
    full_env = {**os.environ, **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=600)

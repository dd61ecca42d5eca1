"""A JAX run spec, and a run launched through ``dlscale.launch`` in the jax venv as the
training rule launches it (the launch itself is torch_runs.launch: the same command)."""

from __future__ import annotations

from dlscale import catalog
from helpers.torch_runs import launch

__all__ = ["launch", "spec"]


def spec(model="lenet", nodes=1, rpn=1, batch=32, iterations=20, warmup=2, lr=0.01, timeout_s=240, **extra):
    world = nodes * rpn
    options = {"timeout_s": 30, **extra.pop("options", {})}
    return {
        "framework": "jax",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": rpn,
        "batch": batch,
        "repeat": 0,
        "run_id": f"jax/{model}/n{nodes}x{rpn}/b{batch}/r0",
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
        "options": options,
        **extra,
    }

"""A JAX run spec, and a run launched through ``dlscale.launch`` in the jax venv as the
training rule launches it (the launch itself is torch_runs.launch: the same command)."""

from __future__ import annotations

import json

from dlscale import catalog
from dlscale.analysis import parity
from helpers.paths import REPO
from helpers.torch_runs import launch
from helpers.torch_runs import spec as torch_spec

__all__ = ["launch", "parity_row", "reference_run", "spec"]

#: The torch reference run's recorded losses (tests/runners/test_torch_parity.py keeps them):
#: LeNet, 1 rank of 64, seed 1234, shared weights, fixed rate 0.01, no warm-up.
REFERENCE = json.loads((REPO / "tests" / "data" / "parity" / "torch-lenet.json").read_text())


def spec(model="lenet", nodes=1, rpn=1, batch=32, iterations=20, warmup=2, lr=0.01, timeout_s=240, **extra):
    """torch_runs.spec's run, in JAX (no torch options: JAX's own, runner timeout 30 s)."""
    options = {"timeout_s": 30, **extra.pop("options", {})}
    run = torch_spec(model, nodes, rpn, batch, iterations, warmup, lr, timeout_s, **extra)
    return {
        **run,
        "framework": "jax",
        "run_id": run["run_id"].replace("torch/", "jax/", 1),
        "options": options,
    }


def reference_run() -> parity.ParityRun:
    """The torch reference (1 rank of 64, fixed rate 0.01) as the parity check reads a run."""
    return parity.ParityRun(
        run_id="torch/lenet/n1x1/b64/r0",
        framework="torch",
        setup="torch",
        model="lenet",
        nodes=1,
        ranks_per_node=1,
        world_size=1,
        global_batch=REFERENCE["global_batch"],
        seed=REFERENCE["seed"],
        losses=tuple(REFERENCE["losses"]),
        init_sha256=REFERENCE["init_sha256"],
        schedule=(REFERENCE["learning_rate"],) * 2 + (0,),
        rates=(REFERENCE["learning_rate"],) * len(REFERENCE["losses"]),
    )


def parity_row(events_path, iterations: int = catalog.PARITY_ITERATIONS):
    """The parity check's row of a JAX run against the torch reference (its first ``iterations`` losses)."""
    table = parity.check([reference_run(), parity.read_run(events_path)], iterations=iterations)
    return table.set_index("framework").loc["jax"]

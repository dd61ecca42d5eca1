"""JAX on two SLURM nodes: placed by srun, meeting by node address, computing the reference.

Two nodes of the session's SLURM test cluster (tests/helpers/slurm_fixtures.py: each node
in its own network namespace, found by name through its hosts file); the job is exactly the
training rule's command (``python -m dlscale.launch`` in an ``sbatch`` allocation). Each
rank takes its rank, world and coordinator from SLURM's variables (``placement``), binds
gloo to its own node's address (``address_towards`` the master, not what its host name
resolves to) and the run, LeNet on 2 x 32 from the shared weights, must compute the torch
reference's first 20 losses (tests/data/parity/torch-lenet.json) within the parity tolerance.
"""

from __future__ import annotations

import subprocess

import pytest
from helpers.jax_runs import parity_row
from helpers.paths import framework_python
from helpers.slurm_cluster import launch_job

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SPEC = {
    "framework": "jax", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 32, "repeat": 0,
    "run_id": "jax/lenet/n2x1/b32/r0", "world_size": 2, "scaling": "strong", "global_batch": 64,
    "dataset": "mnist", "iterations": 20, "warmup": 0, "threads_per_rank": 1, "learning_rate": 0.01,
    "momentum": 0.9, "seed": 1234, "init": "shared", "timeout_s": 300, "options": {"timeout_s": 60},
}  # fmt: skip


def test_two_jax_ranks_under_srun_compute_the_reference(slurm, tmp_path, mnist_shards):
    jax_py = framework_python("jax")
    job = tmp_path / "job.sh"
    events = tmp_path / "run" / "events.jsonl"
    launch_job(job, jax_py, SPEC, mnist_shards, events)
    proc = subprocess.run(
        slurm.sbatch_wait(job, tmp_path / "job.log", nodes=2, mem_mb=2000, minutes=6),
        env=slurm.env(), capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else proc.stdout + proc.stderr
    assert not slurm.jobs()
    run = read_events(events)
    assert run[-1]["status"] == "ok", (run[-1], log[-3000:])
    start = run[0]
    assert start["launcher"] == "slurm" and sorted(start["hosts"]) == ["n1", "n2"]
    steps = [e for e in run if e["event"] == "iteration"]
    assert len(steps) == 40 and all(e["comm_s"] > 0 for e in steps)
    row = parity_row(events)
    assert row["passes"], row["reason"]

"""A killed Caffe rank under real SLURM: ``srun --mpi=pmix`` starts the MPI ranks on 2 nodes.

The cluster is the session's test cluster (tests/helpers/slurm_cluster.py, shared through
tests/helpers/slurm_fixtures.py: munge, slurmctld and one slurmd per node, each node in its own
network namespace on a bridged link, with its own hostname and the cluster's hosts file;
the job gets n1 and n2). The job is exactly what the training rule runs
inside an allocation, ``python -m dlscale.launch``, which sees SLURM and plans
``srun --mpi=pmix``: no Open MPI or address variable is set, so Open MPI finds its peers
the way it does on a real cluster (its TCP transport on the nodes' ``eth0``, never ``lo``).
Caffe's runs that end well, at 1 and 2 nodes, are part of the workflow's SLURM study
(tests/slurm/test_slurm_workflow.py).
"""

from __future__ import annotations

import subprocess

import pytest
from helpers.slurm_cluster import alive, launch_job

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SPEC = {
    "framework": "caffe", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "caffe/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 20, "warmup": 2, "threads_per_rank": 1, "learning_rate": 0.01,
    "momentum": 0.9, "seed": 7, "timeout_s": 300, "options": {},
}  # fmt: skip


def test_a_killed_caffe_rank_is_named_under_srun(slurm, tmp_path, caffe_py, mnist_shards):
    """SIGKILL one MPI rank of a 2-node ``srun --mpi=pmix`` run: the step ends with it and the
    run is recorded as failed with "rank 1 died at iteration k", as on the local profile."""
    from helpers.slurm_jobs import kill_rank_when_running

    spec = {**SPEC, "iterations": 400, "timeout_s": 300}
    job = tmp_path / "job.sh"
    events = tmp_path / "run" / "events.jsonl"
    launch_job(job, caffe_py, spec, mnist_shards, events)
    proc = subprocess.Popen(
        slurm.sbatch_wait(job, tmp_path / "job.log", nodes=2, mem_mb=1000, minutes=5),
        env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        killed = kill_rank_when_running(events.parent, rank=1, min_iterations=5, timeout=240)
        proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not slurm.jobs()
    assert not alive(killed)
    end = read_events(events)[-1]
    log = (tmp_path / "job.log").read_text()
    assert end["status"] == "failed", (end, log[-3000:])
    assert end["reason"].startswith("rank 1 died at iteration"), end["reason"]

"""A killed TensorFlow MWMS rank under SLURM is named, as on the local profile.

Two nodes of the session's SLURM test cluster (tests/helpers/slurm_fixtures.py); the job is exactly the training rule's
command (``python -m dlscale.launch`` in an ``sbatch`` allocation). Rank 1 is SIGKILLed
after a few iterations: ``srun --kill-on-bad-exit`` ends the step, and the run is recorded
as failed with "rank 1 died at iteration k" (torch: tests/slurm/test_slurm_workflow.py; Caffe:
tests/slurm/test_caffe_slurm.py).
"""

from __future__ import annotations

import subprocess

import pytest
from helpers.paths import framework_python
from helpers.slurm_cluster import alive, launch_job
from helpers.slurm_jobs import kill_rank_when_running

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SPEC = {
    "framework": "tensorflow", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "tensorflow/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 400, "warmup": 2, "threads_per_rank": 1, "learning_rate": 0.01,
    "momentum": 0.9, "seed": 7, "timeout_s": 300, "options": {"strategy": "mwms"},
}  # fmt: skip


def test_a_killed_tensorflow_rank_is_named_under_srun(slurm, tmp_path, mnist_shards):
    tf_py = framework_python("tensorflow")
    job = tmp_path / "job.sh"
    events = tmp_path / "run" / "events.jsonl"
    launch_job(job, tf_py, SPEC, mnist_shards, events)
    proc = subprocess.Popen(
        slurm.sbatch_wait(job, tmp_path / "job.log", nodes=2, mem_mb=2000, minutes=6),
        env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        killed = kill_rank_when_running(events.parent, rank=1, min_iterations=5, timeout=300)
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not slurm.jobs()
    assert not alive(killed)
    run = read_events(events)
    log = (tmp_path / "job.log").read_text()
    assert run[0]["launcher"] == "slurm" and sorted(run[0]["hosts"]) == ["n1", "n2"]
    assert run[-1]["status"] == "failed", (run[-1], log[-3000:])
    assert run[-1]["reason"].startswith("rank 1 died at iteration"), run[-1]["reason"]

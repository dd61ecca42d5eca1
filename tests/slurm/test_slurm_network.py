"""The SLURM test cluster's links are real links: a slower one shows in comm_s.

A 2-node torch LeNet run is submitted exactly as the training rule runs it
(``python -m dlscale.launch`` in an ``sbatch`` allocation, nothing test-only in the job) on
the session's test cluster, whose nodes talk over veth links shaped with ``tc tbf``
(tests/helpers/slurm_cluster.py, ``set_network`` between runs, unshaped again after the test). Four runs, ABBA-interleaved over
two presets, so that a drift of the host's load over time favours neither.

Why these two presets: LeNet has 431,080 float32 parameters, 1.72 MB of gradient per
step. A 2-rank all-reduce moves about that much each way over each node's link, so on
``100mbe`` (12.5 MB/s) a step's communication cannot take less than ~0.14 s, while on
``10gbe`` the veth moves it in a few milliseconds. Measured on 2 cores under a load
average of 17-21 (other jobs): median comm_s 0.128 and 0.128 s on 100mbe, 0.0076 and
0.0052 s on 10gbe (20 timed iterations a run): a 17-fold gap, far beyond what the host's
contention (tens of ms on single steps, less on medians) can bridge.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest
from helpers.paths import REPO
from helpers.slurm_cluster import SlurmCluster, launch_job

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SLOW, FAST = "100mbe", "10gbe"
SPEC = {
    "framework": "torch", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "torch/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 20, "warmup": 2, "threads_per_rank": 1, "learning_rate": 0.01,
    "momentum": 0.9, "seed": 7, "timeout_s": 240, "options": {},
}  # fmt: skip


def run_once(cluster: SlurmCluster, torch_py, data, out) -> list[dict]:
    """One 2-node run through sbatch, as the rule runs it; its events."""
    job = out / "job.sh"
    events = out / "events.jsonl"
    launch_job(job, torch_py, SPEC, data, events)
    proc = subprocess.run(
        cluster.sbatch_wait(job, out / "job.log", nodes=2, mem_mb=1000, minutes=5),
        env=cluster.env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = (out / "job.log").read_text() if (out / "job.log").exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-3000:]
    run = read_events(events)
    assert run[-1]["status"] == "ok", (run[-1], log[-3000:])
    return run


def median_comm(run: list[dict]) -> float:
    return statistics.median(e["comm_s"] for e in run if e["event"] == "iteration" and not e.get("warmup"))


def test_slower_link_shows_in_comm_s(slurm, tmp_path, torch_py, mnist_shards):
    medians: dict[str, list[float]] = {SLOW: [], FAST: []}
    try:
        for i, preset in enumerate((SLOW, FAST, FAST, SLOW)):
            slurm.set_network(preset)
            out = tmp_path / f"run{i}-{preset}"
            out.mkdir()
            run = run_once(slurm, torch_py, mnist_shards, out)
            assert sorted(run[0]["hosts"]) == ["n1", "n2"]
            medians[preset].append(median_comm(run))
    finally:
        slurm.set_network(None)  # the shared cluster's links back as they were
    assert not slurm.jobs()
    print(f"median comm_s per run: {medians}")
    # Every run on the slow link communicates longer than every run on the fast one.
    assert min(medians[SLOW]) > max(medians[FAST]), medians
    # And not faster than the slow link allows: 1.72 MB at 12.5 MB/s is 0.138 s (half of it
    # as the bound: the token bucket lets its 256 KiB burst through at once, refilled
    # while the step computes).
    assert min(medians[SLOW]) > 0.138 / 2, medians


def test_a_daemon_binds_the_address_its_node_reaches_the_master_from(slurm):
    """``python -m dlscale.host.placement --towards MASTER`` (how Spark's workers start under SLURM):
    on node n2 it is n2's address, not the host name's nor loopback; an unknown master is named."""
    on_n2 = [*slurm.netns_prefix("n2"), sys.executable, "-m", "dlscale.host.placement", "--towards"]
    said = subprocess.run(
        [*on_n2, "n1", "--", "sh", "-c", 'echo "{address} $SPARK_LOCAL_IP"'],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert said.stdout.split() == [slurm.address("n2")] * 2, said
    unknown = subprocess.run(
        [*on_n2, "nowhere.invalid", "--", "true"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert unknown.returncode == 2
    assert "n2 cannot reach nowhere.invalid" in unknown.stderr, unknown.stderr

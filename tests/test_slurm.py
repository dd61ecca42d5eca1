"""The workflow through the SLURM profile, on a real 4-node SLURM cluster on this host.

One study (torch and TensorFlow MWMS, LeNet, 1 and 4 nodes) runs through
``profiles/slurm``, exactly as a user types it (no test-only variable: the cluster's nodes
have their own names, addresses and links). The torch 4-node run's rank 2 is killed
mid-run, so the first invocation records it as failed and completes the rest; the second,
plain invocation submits exactly that one training job again and finishes the tables and
figures with 4 distinct hosts in the 4-node runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ENVS_DIR, REPO
from slurm_cluster import SlurmCluster, alive
from test_workflow import planned_jobs

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

STUDY = {
    "frameworks": ["torch", "tensorflow"],
    "models": ["lenet"],
    "nodes": [1, 4],
    "iterations": {"lenet": 100},  # the kill comes after 5; quiet steps take ~16 ms
    "warmup": 2,
    "mem_per_rank_mb": 500,
    "run_timeout_min": 10,
    "envs_dir": str(ENVS_DIR),
}
FOUR_NODES = Path("results/runs/torch/lenet/n4x1/b64/r0")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(nodes=4, cpus=2, mem_mb=4000) as running:
        yield running
    assert not [pid for pid in running.pids() if alive(pid)], "a SLURM or munge daemon was left running"
    assert running.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_cluster_is_wired_like_a_cluster_and_sealed(cluster):
    """Each node its own namespace, name and address on the bridge; no link to the host's.

    SLURM binds every interface, so the cluster's namespaces hold only loopbacks, the
    bridge and the veth pairs between them: nothing reaches (or is reached from) outside.
    """
    ports = {f"p{i}": "veth" for i in range(cluster.nodes)}
    assert cluster.interfaces() == {"lo": "loopback", "br0": "bridge", **ports}
    for node in cluster.node_names:
        assert cluster.interfaces(node) == {"lo": "loopback", "eth0": "veth"}
    host_links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert cluster.netns not in host_links
    # Every node is named after itself, and every name resolves to its node's address.
    probe = subprocess.run(
        [*cluster.netns_prefix("n2"), "sh", "-c", "hostname; getent hosts n1 n4 ctl"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = probe.stdout.split()
    assert lines[0] == "n2", probe
    assert dict(zip(lines[2::2], lines[1::2], strict=True)) == {
        "n1": cluster.address("n1"), "n4": cluster.address("n4"), "ctl": cluster.address("ctl"),
    }  # fmt: skip
    assert (cluster.base / "munge" / "munge.key").stat().st_mode & 0o077 == 0  # owner only


def snakemake(cluster: SlurmCluster, workdir: Path, *args: str, wait: bool = True):
    cmd = [
        *cluster.netns_prefix(), sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "slurm"), "--configfile", str(workdir / "study.yaml"), *args,
    ]  # fmt: skip
    env = cluster.env()  # what a user's shell has: nothing test-only for the jobs
    if not wait:
        return subprocess.Popen(
            cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True, timeout=900)


def kill_rank_when_running(run_dir: Path, rank: int, min_iterations: int, timeout: float) -> int:
    """SIGKILL one rank of a running job once it has done some iterations; its PID."""
    part = run_dir / ".work" / f"rank{rank}.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if part.exists():
            lines = part.read_text().splitlines()
            if sum('"event":"iteration"' in line for line in lines) >= min_iterations:
                pid = json.loads(lines[0])["pid"]
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.1)
    raise TimeoutError(f"rank {rank} of {run_dir} never ran {min_iterations} iterations")


def test_study_through_slurm_with_a_failure_and_a_rerun(cluster, tmp_path, torch_py, mnist_idx):
    # The namespace has no route to PyPI: MNIST comes from a local copy of the idx files.
    study = {**STUDY, "data": {"mnist": {"source": str(mnist_idx)}}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    first = snakemake(cluster, tmp_path, wait=False)
    try:
        killed = kill_rank_when_running(tmp_path / FOUR_NODES, rank=2, min_iterations=5, timeout=600)
        output, _ = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, output[-4000:]
    assert not alive(killed)

    runs = pd.read_csv(tmp_path / "results" / "runs.csv").set_index("run_id")
    failed = runs.loc["torch/lenet/n4x1/b64/r0"]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("rank 2 died at iteration"), failed["reason"]
    for ok in ("torch/lenet/n1x1/b64/r0", "tensorflow/lenet/n1x1/b64/r0", "tensorflow/lenet/n4x1/b64/r0"):
        assert runs.loc[ok, "status"] == "ok", runs.loc[ok, "reason"]
    assert not cluster.jobs(), "a job outlived the run"

    dry = snakemake(cluster, tmp_path, "--dry-run")
    assert planned_jobs(dry.stdout + dry.stderr) == {
        "train": 1,
        "aggregate": 1,
        "figures": 1,
        "perfmodel": 1,
        "all": 1,
    }
    one_node_before = (tmp_path / "results/runs/torch/lenet/n1x1/b64/r0/events.jsonl").stat().st_mtime_ns

    second = snakemake(cluster, tmp_path)
    assert second.returncode == 0, second.stderr[-4000:]
    submitted = (second.stdout + second.stderr).count("has been submitted with SLURM jobid")
    assert submitted == 1, second.stderr[-4000:]  # exactly one training job ran on the rerun
    assert (
        tmp_path / "results/runs/torch/lenet/n1x1/b64/r0/events.jsonl"
    ).stat().st_mtime_ns == one_node_before

    four_node_calls = [call for call in cluster.sbatch_calls() if "--nodes=4" in call and "torch" in call]
    assert len(four_node_calls) == 2  # the failed attempt and its rerun
    for option in ("--ntasks=4", "--cpus-per-task=1", "--mem 500", "-t 15"):
        assert option in four_node_calls[-1], four_node_calls[-1]
    print("sbatch line of the 4-node run:", four_node_calls[-1])

    runs = pd.read_csv(tmp_path / "results" / "runs.csv").set_index("run_id")
    assert (runs["status"] == "ok").all(), runs["reason"]
    events = read_events(tmp_path / FOUR_NODES / "events.jsonl")
    start = events[0]
    assert start["launcher"] == "slurm"
    assert sorted(start["hosts"]) == ["n1", "n2", "n3", "n4"]
    tf_start = read_events(tmp_path / "results/runs/tensorflow/lenet/n4x1/b64/r0/events.jsonl")[0]
    assert tf_start["launcher"] == "slurm" and sorted(tf_start["hosts"]) == ["n1", "n2", "n3", "n4"]
    assert {e["rank"] for e in events if e["event"] == "iteration"} == {0, 1, 2, 3}
    for name in ("throughput", "speedup", "breakdown", "loss"):
        assert (tmp_path / "results" / "figures" / f"{name}.png").stat().st_size > 0

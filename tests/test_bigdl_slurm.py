"""A BigDL run under real SLURM: the Spark master on the first node, a worker on each by srun.

The cluster is the project's test cluster (tests/slurm_cluster.py: munge, slurmctld and one
slurmd per node, each node in its own network namespace on a bridged link, with its own
hostname and the cluster's hosts file). The job is exactly what the training rule runs
inside an allocation, ``python -m dlscale.launch``, which sees SLURM; the BigDL driver then
starts the master where it runs and one worker per allocated node with a single ``srun``
step, each worker sized from the allocation and bound to its node's address. No Spark or
address variable is set by the job.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, framework_python
from slurm_cluster import SlurmCluster, alive, launch_job
from test_bigdl_runner import processes_mentioning

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SPEC = {
    "framework": "bigdl", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "bigdl/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 8, "warmup": 2, "threads_per_rank": 1, "learning_rate": 0.02,
    "momentum": 0.9, "seed": 7, "timeout_s": 420,
    "options": {"driver_memory": "1g", "executor_memory": "1g", "startup_timeout_s": 240},
}  # fmt: skip


def test_two_node_bigdl_lenet_with_workers_started_by_srun(tmp_path, mnist_shards):
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    bigdl_py = framework_python("bigdl")
    job = tmp_path / "job.sh"
    events = tmp_path / "run" / "events.jsonl"
    launch_job(job, bigdl_py, SPEC, mnist_shards, events)
    with SlurmCluster(base=tmp_path / "cluster", nodes=2, cpus=2, mem_mb=4000) as cluster:
        proc = subprocess.run(
            cluster.sbatch_wait(job, tmp_path / "job.log", nodes=2, mem_mb=3000, minutes=8),
            env=cluster.env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
        assert proc.returncode == 0, proc.stderr + log[-3000:]
        assert not cluster.jobs()
    assert not [pid for pid in cluster.pids() if alive(pid)]
    assert not processes_mentioning(str(tmp_path)), "a Spark daemon or executor outlived the job"
    run = read_events(events)
    start, end = run[0], run[-1]
    assert end["status"] == "ok", (end, log[-3000:])
    assert start["launcher"] == "slurm" and start["hosts"][0] and start["hosts"][1] == "node1"
    iterations = [e for e in run if e["event"] == "iteration"]
    assert [e["iteration"] for e in iterations] == list(range(10))
    assert all(e["samples"] == 128 and 0 < e["compute_s"] <= e["step_s"] for e in iterations)
    # The driver started two daemons (the master, and the srun step of the workers), and
    # BigDL trained on two executors, one per node.
    pids = re.search(r"daemon pids \[([\d, ]+)\]", log)
    assert pids and len(pids[1].split(",")) == 2, log[-3000:]
    driver_log = events.with_name("bigdl-driver.log").read_text(errors="replace")
    assert "Executor number is 2 and executor cores number is 1" in driver_log


def test_spark_daemons_authenticate_with_a_secret_on_no_command_line(tmp_path):
    """The run's Spark cluster accepts only processes that hold its secret, and shows it nowhere.

    A worker started with the cluster's settings but a wrong secret cannot register
    with the master; the secret is on no daemon's command line (``/proc/PID/cmdline`` is
    readable by every user) and in no log.
    """
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    from dlscale.runners.bigdl.spark import SECRET_ENV, ClusterShape, SparkCluster

    spark_home = next((REPO / ".venvs" / "bigdl" / "lib").glob("python3*/site-packages/pyspark"))
    env = {"JAVA_HOME": os.environ.get("JAVA_HOME", "")} if os.environ.get("JAVA_HOME") else {}
    cluster = SparkCluster(spark_home, tmp_path / "spark", ClusterShape(1, 1, "512m"), env=env)
    with cluster:
        assert len(cluster.secret) >= 32
        for pid in cluster.pids:
            assert cluster.secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        # An intruder: the same worker, started the same way, without the secret.
        intruder_env = {
            k: v for k, v in cluster._daemon_env(tmp_path / "intruder").items() if k != SECRET_ENV
        }
        intruder_env["_SPARK_AUTH_SECRET"] = "not-the-secret"
        intruder = cluster._spawn(
            "intruder",
            [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
             "--host", "127.0.0.1", "--cores", "1", "--memory", "512m",
             "--work-dir", str(tmp_path / "intruder"), "--webui-port", "0", str(cluster.master_url)],
            intruder_env,
        )  # fmt: skip
        deadline = time.time() + 120
        text = ""
        while time.time() < deadline:  # the worker retries: its first refusal is enough
            text = intruder.log.read_text(errors="replace")
            if "Successfully registered with master" in text or "SaslException" in text:
                break
            time.sleep(0.5)
        master_log = (cluster.logs_dir / "master.log").read_text(errors="replace")
    assert "Successfully registered with master" not in text, text[-2000:]
    assert "Failed to connect to master" in text and "SaslException" in text, text[-2000:]
    assert "authentication enabled" in master_log, master_log[-2000:]
    assert master_log.count("Registering worker") == 1  # ours, not the intruder
    for log in cluster.logs_dir.glob("*.log"):
        assert cluster.secret not in log.read_text(errors="replace"), log

"""A BigDL run under real SLURM: the Spark master on the first node, a worker on each by srun.

The cluster is the session's test cluster (tests/helpers/slurm_cluster.py: munge, slurmctld and one
slurmd per node, each node in its own network namespace on a bridged link, with its own
hostname and the cluster's hosts file). The job is exactly what the training rule runs
inside an allocation, ``python -m dlscale.launch``, which sees SLURM; the BigDL driver then
starts the master where it runs and one worker per allocated node with a single ``srun``
step, each worker sized from the allocation and bound to its node's address. No Spark or
address variable is set by the job.

A 2-node run's node-2 executor is SIGKILLed mid-run, which the driver (watching its
executors through Spark, as they are on other nodes) reports as "rank 1 died", as every
framework reports a dead rank. BigDL's runs that end well, at 1 and 2 nodes through
``profiles/slurm``, are part of the workflow's SLURM study (tests/slurm/test_slurm_workflow.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.bigdl_runs import processes_mentioning
from helpers.paths import REPO, framework_python
from helpers.slurm_cluster import alive, launch_job

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

SPEC = {
    "framework": "bigdl", "model": "lenet", "nodes": 2, "ranks_per_node": 1, "batch": 64, "repeat": 0,
    "run_id": "bigdl/lenet/n2x1/b64/r0", "world_size": 2, "scaling": "weak", "global_batch": 128,
    "dataset": "mnist", "iterations": 8, "warmup": 2, "threads_per_rank": 1, "learning_rate": 0.02,
    "momentum": 0.9, "seed": 7, "timeout_s": 420,
    "options": {"driver_memory": "1g", "executor_memory": "1g", "startup_timeout_s": 240},
}  # fmt: skip


def spec(nodes: int, iterations: int) -> dict:
    return {
        **SPEC, "nodes": nodes, "world_size": nodes, "global_batch": 64 * nodes,
        "run_id": f"bigdl/lenet/n{nodes}x1/b64/r0", "iterations": iterations,
    }  # fmt: skip


def executor_pid(run_dir: Path, address: str) -> int | None:
    """The PID of the run's executor JVM on the node at ``address`` (from /proc), if it runs."""
    for pid in processes_mentioning(str(run_dir)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        main = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
        if main in argv and address.encode() in argv[argv.index(main) :]:
            return pid
    return None


def iterations_done(run_dir: Path) -> int:
    part = run_dir / ".work" / "rank0.jsonl"  # the driver reports every iteration
    return part.read_text().count('"event":"iteration"') if part.exists() else 0


def test_a_killed_bigdl_executor_is_rank_k_died_under_slurm(slurm, tmp_path, mnist_shards):
    """SIGKILL node 2's executor JVM mid-run (its worker and the srun step stay up, and
    Spark's master would start another): the driver sees it gone from Spark's executor list
    and fails the run at once as "rank 1 died", naming the node; nothing of Spark is left.
    The session's 4-node cluster (``slurm``): a 2-node job gets n1 and n2."""
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    bigdl_py = framework_python("bigdl")
    job = tmp_path / "job.sh"
    run_dir = tmp_path / "run"
    launch_job(job, bigdl_py, spec(2, 200), mnist_shards, run_dir / "events.jsonl")
    proc = subprocess.Popen(
        slurm.sbatch_wait(job, tmp_path / "job.log", nodes=2, mem_mb=3000, minutes=8),
        env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    victim = slurm.address("n2")
    try:
        deadline = time.time() + 400
        killed = None
        while killed is None and time.time() < deadline and proc.poll() is None:
            pid = executor_pid(run_dir, victim)
            if pid is not None and iterations_done(run_dir) >= 3:
                os.kill(pid, signal.SIGKILL)
                killed = pid
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
    assert killed is not None, (out, log[-3000:])
    assert not alive(killed)
    assert not slurm.jobs()
    assert not processes_mentioning(str(tmp_path)), "a Spark daemon or executor outlived the job"
    run = read_events(run_dir / "events.jsonl")
    end = run[-1]
    assert run[0]["hosts"] == ["n1", "n2"], run[0]["hosts"]
    assert end["status"] == "failed", (end, log[-3000:])
    assert end["reason"].startswith("rank 1 died (the Spark executor of node 1, on n2 at 10.78.0.2"), end
    done = [e["iteration"] for e in run if e["event"] == "iteration"]
    at = re.search(r"\) at iteration (\d+)", end["reason"])
    assert 3 <= len(done) < 402 and at and int(at[1]) == done[-1] + 1, (done, end)


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
            refused = "Failed to connect to master" in text and "SaslException" in text
            if "Successfully registered with master" in text or refused:  # (SASL's trace comes first)
                break
            time.sleep(0.5)
        master_log = (cluster.logs_dir / "master.log").read_text(errors="replace")
    assert "Successfully registered with master" not in text, text[-2000:]
    assert "Failed to connect to master" in text and "SaslException" in text, text[-2000:]
    assert "authentication enabled" in master_log, master_log[-2000:]
    assert master_log.count("Registering worker") == 1  # ours, not the intruder
    for log in cluster.logs_dir.glob("*.log"):
        assert cluster.secret not in log.read_text(errors="replace"), log

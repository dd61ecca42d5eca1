"""BigDL's per-study Spark cluster for real (``cluster: per_study``,
dlscale.runners.bigdl.shared_cluster): runs share one master, a failed run in the middle
leaves it working, and it ends with its owner or on SIGTERM, leaving no JVM.

The owner is a process the test starts (``sleep``), standing in for Snakemake; the clusters'
folder is under the test's own, so every leftover is found (and killed by PID) by path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from helpers.bigdl_runs import kill_leftovers, launch, spec

from dlscale.events import read_events
from dlscale.runners.bigdl.launcher import java_env
from dlscale.runners.bigdl.shared_cluster import (
    ENV_CLUSTERS,
    ENV_OWNER_PID,
    LEASE,
    Lease,
    read_lease,
    start_time,
)

#: How long the supervisor and its daemons get to be gone: its poll, the daemons' stop
#: (SIGTERM, spark.STOP_GRACE_S, SIGKILL) and slack for a busy 2-core host.
GONE_WITHIN_S = 30.0
RUN = {"nodes": 1, "iterations": 4, "warmup": 1, "cluster": "per_study"}


def gone_within(lease: Lease, seconds: float) -> list[str]:
    """The lease's processes (supervisor, master, workers) still running after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = [f"{name} {pid}" for name, (pid, start) in lease.processes.items() if start_time(pid) == start]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def corrupted_copy(shards: Path, into: Path) -> Path:
    """The shard set with one label file altered (its sha256 no longer the index's): an
    executor fails its task after the application has started."""
    into.mkdir()
    for path in shards.iterdir():
        (into / path.name).symlink_to(path)
    bad = into / "shard-00000-labels.npy"
    data = bytearray(bad.resolve().read_bytes())
    data[-1] ^= 0xFF
    bad.unlink()
    bad.write_bytes(bytes(data))
    return into


def run(python: Path, data: Path, root: Path, name: str, **overrides) -> tuple[list[dict], dict, str]:
    events_path = root / name / "events.jsonl"
    proc = launch(python, {**spec(**{**RUN, **overrides})}, data, events_path, retries=0)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    settings_path = events_path.with_name("bigdl-settings.json")
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    return read_events(events_path), settings, output


def test_runs_share_one_cluster_which_outlives_a_failed_run_and_ends_with_its_owner(
    bigdl_py, mnist_shards, tmp_path, monkeypatch
):
    owner = subprocess.Popen(["sleep", "600"])
    clusters = tmp_path / "clusters"
    monkeypatch.setenv(ENV_CLUSTERS, str(clusters))
    monkeypatch.setenv(ENV_OWNER_PID, str(owner.pid))
    try:
        first, first_settings, _ = run(bigdl_py, mnist_shards, tmp_path, "first")
        assert first[-1]["status"] == "ok", first[-1]
        used = first_settings["cluster"]
        assert used["cluster"] == "per_study" and used["how"] == "started", used
        lease = read_lease(clusters / used["key"] / LEASE)
        assert lease is not None and lease.master_pid == used["master_pid"]
        # The run stayed on the study's loopback, where the cluster listens.
        assert "per_study" in first[0]["network_setup"]["isolation"]

        bad = corrupted_copy(mnist_shards, tmp_path / "corrupted")
        failed, _, output = run(bigdl_py, bad, tmp_path, "failed")
        assert failed[-1]["status"] == "failed", failed[-1]
        assert "reused" in output and "sha256" in failed[-1]["reason"], failed[-1]["reason"]

        second, second_settings, _ = run(bigdl_py, mnist_shards, tmp_path, "second")
        assert second[-1]["status"] == "ok", second[-1]
        again = second_settings["cluster"]
        assert again["how"] == "reused" and again["master_pid"] == used["master_pid"], again
        zeroth = next(e for e in second if e["event"] == "iteration" and e["iteration"] == 0)
        assert zeroth["spark_cluster"] == "reused", zeroth
        # Each application's folder in the workers' directories went with it (the jars).
        assert not list(Path(lease.root).glob("worker*/app-*"))
        assert list((tmp_path / "second").glob("*")), "the run's folder"

        owner.kill()
        owner.wait()
        assert gone_within(lease, GONE_WITHIN_S) == []
        assert read_lease(clusters / used["key"] / LEASE) is None
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        leftovers = kill_leftovers(tmp_path)
    assert not leftovers, f"processes left running: {leftovers}"


def test_sigterm_to_the_supervisor_stops_its_daemons(bigdl_py, tmp_path):
    owner = subprocess.Popen(["sleep", "600"])
    lease_path = tmp_path / "key" / LEASE
    root = tmp_path / "key" / "instance"
    root.mkdir(parents=True)
    env = {**os.environ, **java_env(os.environ), "SPARK_LOCAL_IP": "127.0.0.1", "TMPDIR": str(root)}
    shape = {"workers": 1, "cores_per_executor": 1, "executor_memory": "512m"}
    spark_home = subprocess.run(
        [str(bigdl_py), "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    supervisor = subprocess.Popen(
        [
            str(bigdl_py),
            "-m",
            "dlscale.runners.bigdl.supervisor",
            "--lease",
            str(lease_path),
            "--root",
            str(root),
            "--key",
            "key",
            "--spark-home",
            spark_home,
            "--shape",
            json.dumps(shape),
            "--owner",
            f"{owner.pid}:{start_time(owner.pid)}",
        ],  # fmt: skip
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while read_lease(lease_path) is None and supervisor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        lease = read_lease(lease_path)
        assert lease is not None, supervisor.communicate(timeout=30)[0].decode()[-3000:]
        assert sorted(lease.processes) == ["master", "supervisor", "worker0"]
        assert (Path(lease.secret_file).stat().st_mode & 0o777) == 0o600
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=GONE_WITHIN_S) == 0
        assert gone_within(lease, GONE_WITHIN_S) == []
        assert read_lease(lease_path) is None
        assert not list(root.glob("worker*")), "the workers' directories are removed"
    finally:
        for proc in (supervisor, owner):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        leftovers = kill_leftovers(tmp_path)
        shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"processes left running: {leftovers}"

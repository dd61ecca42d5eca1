"""The TensorFlow runner for real: Keras models, MWMS and parameter servers on loopback.

The distributed tests run the runner in the TensorFlow venv through the launcher, exactly
as the training rule does, on real MNIST. The cluster and plan tests are pure (no
TensorFlow) and run in the test process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.bigdl_runs import kill_leftovers
from helpers.paths import framework_python
from helpers.slurm_jobs import rank_pid_when_running
from helpers.tensorflow_runs import iterations_of, launch, spec

from dlscale import catalog
from dlscale.base.sysutil import free_ports
from dlscale.events import read_events
from dlscale.host import placement
from dlscale.runners.plan import LaunchContext
from dlscale.runners.tensorflow import cluster
from dlscale.runners.tensorflow import launcher as tf_launcher
from dlscale.runspec import RunSpec

TORCH_COUNTS = dict(catalog.PARAMETERS)  # the torch runner's, pinned by tests/runners/test_torch_runner.py


@pytest.fixture(scope="session")
def tf_py() -> Path:
    return framework_python("tensorflow")


def falls(losses):
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    return first > 2.0 and last < 0.8 * first and last < 1.2, (first, last)


def stop_run(proc: subprocess.Popen, root: Path) -> None:
    """End a launched run that a failed assertion left running: the launcher by SIGTERM
    (it stops its ranks), then by SIGKILL, then any rank still naming ``root`` (a killed
    launcher cannot stop its ranks: a 100,000-iteration run outlived one such test)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    kill_leftovers(root)


def part_iterations(path: Path) -> int:
    return sum('"iteration"' in line for line in path.read_text().splitlines()) if path.exists() else 0


# --- pure: cluster spec and plan -------------------------------------------------------


def test_ps_cluster_lists_chief_workers_and_servers():
    spec_ = cluster.ps_cluster(2, 1, [10, 11, 12, 13])
    assert spec_ == {
        "chief": ["127.0.0.1:10"],
        "worker": ["127.0.0.1:11", "127.0.0.1:12"],
        "ps": ["127.0.0.1:13"],
    }
    assert cluster.tf_config(spec_, "worker", 1)["task"] == {"type": "worker", "index": 1}
    with pytest.raises(ValueError, match="not in the cluster"):
        cluster.tf_config(spec_, "worker", 2)


def test_mwms_cluster_from_slurm_placement_uses_every_rank_host():
    env = {
        "SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "cn[01-02]",
        "SLURM_TASKS_PER_NODE": "2(x2)", "DLSCALE_MASTER_PORT": "29000",
    }  # fmt: skip
    spec_ = cluster.cluster_of({}, placement.from_slurm(env))
    assert spec_ == {"worker": ["cn01:29001", "cn01:29002", "cn02:29003", "cn02:29004"]}


def test_ps_plan_has_chief_workers_and_servers(tmp_path):
    run = RunSpec.from_dict(spec(nodes=3, strategy="ps", num_ps=2))
    ctx = LaunchContext(run, sys.executable, tmp_path, tmp_path, 29500)
    plan = tf_launcher.plan(ctx)
    assert [p.label for p in plan.processes] == ["chief", "worker 0", "worker 1", "worker 2", "ps 0", "ps 1"]
    assert plan.reporting_ranks == 1  # the chief reports global samples
    spec_ = json.loads(plan.processes[0].env[cluster.ENV_CLUSTER])
    assert (len(spec_["chief"]), len(spec_["worker"]), len(spec_["ps"])) == (1, 3, 2)
    assert all(
        p.env[cluster.ENV_CLUSTER] == plan.processes[0].env[cluster.ENV_CLUSTER] for p in plan.processes
    )
    assert plan.processes[0].env["KERAS_HOME"] == str(tmp_path / "keras")


def test_mwms_plan_is_one_process_per_rank(tmp_path):
    run = RunSpec.from_dict(spec(nodes=2, intra_op_threads=3))
    ctx = LaunchContext(run, sys.executable, tmp_path, tmp_path, 29500)
    plan = tf_launcher.plan(ctx)
    assert [p.rank for p in plan.processes] == [0, 1] and plan.reporting_ranks == 2
    assert plan.processes[1].env["DLSCALE_TF_INTRA_OP_THREADS"] == "3"
    assert plan.processes[1].env["TF_ENABLE_ONEDNN_OPTS"] == "1"


# --- real TensorFlow -------------------------------------------------------------------


def test_parameter_counts_match_torch(tf_py):
    code = (
        "from dlscale.runners.tensorflow.models import MODELS, build_model, parameter_count;"
        "import json; print(json.dumps({m: parameter_count(build_model(m)) for m in MODELS}))"
    )
    out = subprocess.run(
        [str(tf_py), "-c", code],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == TORCH_COUNTS


def test_only_a_worker_alone_exits_without_teardown():
    """A lone MWMS worker has no peer that could still read its buffers; with peers, or with
    parameter servers, the teardown stays (``exits_without_teardown``)."""
    from dlscale.runners.tensorflow import train

    def of(nodes, strategy):
        return RunSpec.from_dict(spec(nodes=nodes, strategy=strategy))

    assert train.exits_without_teardown(of(1, "mwms"))
    assert not train.exits_without_teardown(of(2, "mwms"))
    assert not train.exits_without_teardown(of(1, "ps"))


#: A rank whose interpreter teardown aborts: only an exit without teardown ends it with 0.
ABORTING_TEARDOWN = (
    "import atexit, os, runpy; atexit.register(os.abort);"
    " runpy.run_module('dlscale.runners.tensorflow', run_name='__main__')"
)


def test_a_worker_alone_that_wrote_its_end_exits_without_teardown(tf_py, mnist_shards, tmp_path):
    """Once ``rank_end`` is written a lone worker exits at once: TensorFlow's teardown (0.65-0.80
    s a run) is skipped, so an exit handler never runs."""
    work = tmp_path / "work"
    work.mkdir()
    alone = {k: v for k, v in os.environ.items() if not k.startswith(("DLSCALE_", "SLURM_", "TF_CONFIG"))}
    proc = subprocess.run(
        [str(tf_py), "-c", ABORTING_TEARDOWN, "--spec-json", json.dumps(spec(iterations=3, warmup=1)),
         "--data", str(mnist_shards), "--work-dir", str(work)],
        capture_output=True, text=True, timeout=300, env=alone,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = [json.loads(line) for line in (work / "rank0.jsonl").read_text().splitlines()]
    [end] = [e for e in part if e["event"] == "rank_end"]
    assert end["status"] == "ok", end


def test_mwms_two_workers_learn_lenet_on_real_mnist(tf_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, spec(nodes=2, iterations=60), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    start, end = events[0], events[-1]
    assert end["status"] == "ok", end
    assert start["world_size"] == 2 and start["hosts"][0] != start["hosts"][1]
    versions = start["versions"]
    assert versions["tensorflow"] == "2.21.0" and versions["strategy"] == "mwms"
    assert versions["intra_op_threads"] == "1" and versions["inter_op_threads"] == "2"
    assert versions["onednn"] == "1"
    iters = iterations_of(events)
    assert len(iters) == 2 * 62
    for e in iters:
        assert e["compute_s"] > 0 and e["comm_s"] > 0 and e["step_s"] >= e["compute_s"]
        assert e["samples"] == 64 and e["comm_bytes"] == TORCH_COUNTS["lenet"] * 4
    assert all(e["setup_s"] > 0 for e in iters if e["iteration"] == 0)
    ok, numbers = falls([e["loss"] for e in iters if e["rank"] == 0])
    assert ok, numbers
    # Same broadcast start and the same averaged gradient: the replicas end identical.
    sums = {e["rank"]: e["weights_sum"] for e in iters if e["iteration"] == 61}
    assert sums[0] == sums[1]
    assert not (tmp_path / ".work").exists()


def test_ps_two_workers_one_server_learn_lenet_on_real_mnist(tf_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, spec(nodes=2, iterations=50, strategy="ps", num_ps=1), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for label in ("worker 0", "worker 1", "ps 0"):
        assert f"[{label}] pid" in proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    assert events[0]["versions"]["strategy"] == "ps"
    iters = iterations_of(events)
    assert len(iters) == 52 and {e["rank"] for e in iters} == {0}  # the chief reports
    for e in iters:
        assert e["samples"] == 2 * 64  # global: one batch per worker
        assert e["workers"] == 2 and e["parameter_servers"] == 1
        assert e["compute_s"] > 0 and e["comm_s"] > 0 and len(e["worker_losses"]) == 2
    ok, numbers = falls([e["loss"] for e in iters])
    assert ok, numbers


def test_killed_worker_fails_the_mwms_run(tf_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, spec(nodes=2, iterations=100000), mnist_shards, events_path, wait=False)
    try:
        os.kill(rank_pid_when_running(tmp_path, rank=1, min_iterations=10, timeout=180), signal.SIGKILL)
        proc.wait(timeout=90)
    finally:
        stop_run(proc, tmp_path)
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    # The launcher usually sees the death first; rank 0's failed all-reduce may win the race.
    expected = ("rank 1 died (SIGKILL) at iteration", "rank 0: CollectiveFailed")
    assert end["reason"].startswith(expected), end["reason"]


def test_sigterm_ends_an_mwms_rank_with_its_own_end(tf_py, mnist_shards, tmp_path):
    """SIGTERM to one MWMS worker (SLURM's time limit reaches every rank): it writes its own
    end and exits. TensorFlow's runtime installs a SIGTERM handler of its own (its
    coordination service's preemption notifier), which took the signal and let the rank
    train on until the launcher's SIGKILL; the rank takes it back at its first step
    (dlscale.runners.common.reclaim_sigterm)."""
    events_path = tmp_path / "events.jsonl"
    proc = launch(tf_py, spec(nodes=2, iterations=100000), mnist_shards, events_path, wait=False)
    try:
        os.kill(rank_pid_when_running(tmp_path, rank=0, min_iterations=10, timeout=180), signal.SIGTERM)
        proc.wait(timeout=60)  # a hang guard: the rank used to train on for minutes
    finally:
        stop_run(proc, tmp_path)
    (kept,) = (tmp_path / "attempts").glob("failed-*/work/rank0.jsonl")
    end = json.loads(kept.read_text().splitlines()[-1])
    assert end["event"] == "rank_end" and end["status"] == "failed", end
    assert end["reason"].startswith("terminated by SIGTERM (time limit or cancellation)"), end["reason"]
    assert read_events(events_path)[-1]["reason"].startswith("terminated by SIGTERM"), read_events(
        events_path
    )[-1]


def test_killed_worker_fails_the_ps_run(tf_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(
        tf_py, spec(nodes=2, iterations=100000, strategy="ps"), mnist_shards, events_path, wait=False
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        part = tmp_path / ".work" / "rank0.jsonl"
        deadline = time.time() + 180
        while time.time() < deadline and part_iterations(part) < 5:
            time.sleep(0.2)
        assert part_iterations(part) >= 5, "the chief never started iterating"
        # The worker's own line reaches us through the launcher's pipe, which may trail the
        # chief's iterations in the part file: wait for it, bounded.
        pids: list[int] = []
        while time.time() < deadline and not pids:
            pids = [int(pid) for pid in re.findall(r"\[worker 1\] pid (\d+)", "".join(list(lines)))]
            time.sleep(0.2)
        assert pids, "worker 1 never said its pid:\n" + "".join(lines[-40:])
        pid = pids[0]
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=90)
    finally:
        stop_run(proc, tmp_path)
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    assert end["reason"].startswith("worker 1 died (SIGKILL) at iteration"), end["reason"]


def test_frozen_peer_fails_an_unwatched_mwms_rank_in_bounded_time(tf_py, mnist_shards, tmp_path):
    """Without a launcher watching (srun, another node): a peer that stops answering
    (SIGSTOP: alive, silent) fails the other rank through the collective timeout and
    TensorFlow's heartbeats, instead of hanging it forever."""
    run_spec = spec(nodes=2, iterations=100000, warmup=1, collective_timeout_s=10)
    ports = free_ports(2)
    base = {
        **os.environ, "TMPDIR": str(tmp_path),
        cluster.ENV_CLUSTER: json.dumps(cluster.mwms_cluster(["127.0.0.1"] * 2, ports)),
    }  # fmt: skip
    argv = [
        str(tf_py), "-m", "dlscale.runners.tensorflow", "--spec-json", json.dumps(run_spec),
        "--data", str(mnist_shards), "--work-dir", str(tmp_path),
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            argv,
            env={**base, **placement.local_rank_env(rank, 2, 1, 29400)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in range(2)
    ]
    try:
        deadline = time.time() + 180
        while time.time() < deadline and part_iterations(tmp_path / "rank1.jsonl") < 10:
            time.sleep(0.2)
        assert part_iterations(tmp_path / "rank1.jsonl") >= 10, "rank 1 never started iterating"
        os.kill(procs[1].pid, signal.SIGSTOP)
        assert procs[0].wait(timeout=120) == 1  # bounded: not a hang
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    end = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()][-1]
    assert end["event"] == "rank_end" and end["status"] == "failed"
    assert "all-reduce failed at iteration" in end["reason"], end["reason"]

"""TensorFlow's parameter-server mode inside a SLURM allocation (issue 18).

The pure part (no SLURM): where the node agents (``dlscale.runners.tensorflow.slurm_ps``)
put the chief, the workers and the parameter servers, on which ports, and the plan's one
srun step. The real part: a 2-node ps-mode LeNet run on the project's SLURM test cluster,
started as the training rule starts it (``python -m dlscale.launch`` in an ``sbatch``
allocation): once to the end, and once with worker 1 (rank 1's process) SIGKILLed after
a few iterations, which must be recorded as "rank 1 died (worker 1, SIGKILL) at iteration
i". The session's cluster (tests/helpers/slurm_fixtures.py) serves both runs.
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
from helpers.paths import framework_python
from helpers.slurm_cluster import SlurmCluster, alive, launch_job

from dlscale.events import read_events
from dlscale.host import placement
from dlscale.launch.failures import describe_group_failure
from dlscale.launch.records import read_parts
from dlscale.runners.plan import LaunchContext
from dlscale.runners.tensorflow import cluster as cluster_mod
from dlscale.runners.tensorflow import launcher as tf_launcher
from dlscale.runners.tensorflow import slurm_ps
from dlscale.runspec import RunSpec


def spec(
    nodes: int = 2,
    ranks_per_node: int = 1,
    iterations: int = 12,
    num_ps: int = 1,
    learning_rate: float = 0.01,
) -> dict:
    world = nodes * ranks_per_node
    return {
        "framework": "tensorflow", "model": "lenet", "nodes": nodes, "ranks_per_node": ranks_per_node,
        "batch": 64, "repeat": 0, "run_id": f"tensorflow/lenet/n{nodes}x{ranks_per_node}/b64/r0",
        "world_size": world, "scaling": "weak", "global_batch": 64 * world, "dataset": "mnist",
        "iterations": iterations, "warmup": 2, "threads_per_rank": 1, "learning_rate": learning_rate,
        "momentum": 0.9, "seed": 7, "timeout_s": 300, "options": {"strategy": "ps", "num_ps": num_ps},
    }  # fmt: skip


# --- pure: the layout of the agents and the plan ----------------------------------------


def test_layout_spreads_servers_over_nodes_like_the_local_plan():
    # 2 nodes x 2 ranks, 3 parameter servers: ps j on node j mod 2, started by the node's
    # local rank 0 (ranks 0 and 2); ports master + 1 + position in the spec.
    hosts = ["cn01", "cn01", "cn02", "cn02"]
    lay = slurm_ps.layout(hosts, num_ps=3, master_port=29000)
    assert lay.cluster() == {
        "chief": ["cn01:29001"],
        "worker": ["cn01:29002", "cn01:29003", "cn02:29004", "cn02:29005"],
        "ps": ["cn01:29006", "cn02:29007", "cn01:29008"],
    }
    assert [t.label for t in lay.of_rank(0)] == ["chief", "worker 0", "ps 0", "ps 2"]
    assert [t.label for t in lay.of_rank(1)] == ["worker 1"]
    assert [t.label for t in lay.of_rank(2)] == ["worker 2", "ps 1"]
    assert [t.label for t in lay.of_rank(3)] == ["worker 3"]
    # Every process of one node on its own port.
    for node in ("cn01", "cn02"):
        ports = [t.port for t in lay.tasks if t.host == node]
        assert len(ports) == len(set(ports))


def test_layout_matches_the_local_plans_nodes():
    # The local plan puts ps j on node j mod n; the SLURM layout does the same for 3 nodes.
    run = RunSpec.from_dict(spec(nodes=3, num_ps=4))
    ctx = LaunchContext(run, sys.executable, Path("/data"), Path("/work"), 29500)
    local = tf_launcher.plan(ctx)
    local_ps_nodes = [p.node for p in local.processes if p.label.startswith("ps ")]
    lay = slurm_ps.layout(["a", "b", "c"], num_ps=4, master_port=29500)
    assert (
        [["a", "b", "c"].index(t.host) for t in lay.tasks if t.job == "ps"] == local_ps_nodes == [0, 1, 2, 0]
    )


def test_layout_from_the_slurm_placement_is_the_same_on_every_task():
    env = {
        "SLURM_NTASKS": "4", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "DLSCALE_MASTER_PORT": "31000",
    }  # fmt: skip
    clusters = [
        slurm_ps.layout(slurm_ps.rank_hosts_of(placement.from_slurm({**env, "SLURM_PROCID": str(r)})), 1, 31000)
        .cluster()
        for r in range(4)
    ]  # fmt: skip
    assert all(c == clusters[0] for c in clusters)
    assert clusters[0]["worker"] == ["n1:31002", "n1:31003", "n2:31004", "n2:31005"]


def test_layout_refuses_ports_past_the_range():
    with pytest.raises(ValueError, match="no room"):
        slurm_ps.layout(["a", "b"], num_ps=1, master_port=65533)


def test_ps_plan_under_slurm_is_one_srun_step_of_agents(tmp_path):
    run = RunSpec.from_dict(spec(nodes=2, ranks_per_node=2, num_ps=2))
    ctx = LaunchContext(
        run, "/venv/bin/python", tmp_path, tmp_path, 29500, mode="slurm", master_addr="10.0.0.1"
    )
    plan = tf_launcher.plan(ctx)
    assert plan.reporting_ranks == 1  # the chief reports the global samples
    (process,) = plan.processes
    assert process.rank is None  # srun speaks for every rank: launch asks the part files
    argv = process.argv
    assert argv[0] == "srun" and "--ntasks=4" in argv and "--ntasks-per-node=2" in argv
    assert "--kill-on-bad-exit=1" in argv
    assert argv[argv.index("-m") + 1] == "dlscale.runners.tensorflow.slurm_ps"
    assert process.env["DLSCALE_MASTER_PORT"] == "29500" and process.env["DLSCALE_TF_STRATEGY"] == "ps"
    assert cluster_mod.ENV_CLUSTER not in process.env  # derived on the nodes, not probed here


def test_a_worker_death_recorded_by_its_agent_is_the_cause():
    # rank 0 (the chief) was killed by the step's end before writing its own end: its
    # silence is the consequence of worker 1's death, which rank 1's agent recorded.
    parts = {
        0: [{"event": "rank_start"}, {"event": "iteration", "iteration": 6}],
        1: [
            {"event": "rank_start"},
            {
                "event": "rank_end",
                "status": "failed",
                "reason": "rank 1 died (worker 1, SIGKILL) at iteration 7",
            },
        ],
    }
    assert describe_group_failure("srun", 1, parts) == "rank 1 died (worker 1, SIGKILL) at iteration 7"


def test_agent_reasons_name_the_process_and_the_iteration(tmp_path):
    (tmp_path / "rank0.jsonl").write_text(
        '{"event":"rank_start"}\n{"event":"iteration","iteration":0}\n{"event":"iteration","iteration":1}\n{"ev'
    )
    worker = slurm_ps.Task("worker", 1, 1, "n2", 29003)
    ps = slurm_ps.Task("ps", 0, 0, "n1", 29004)
    assert slurm_ps.child_failure(worker, -9, tmp_path) == "rank 1 died (worker 1, SIGKILL) at iteration 2"
    assert (
        slurm_ps.child_failure(worker, 1, tmp_path)
        == "rank 1 failed (worker 1, exit status 1) at iteration 2"
    )
    assert slurm_ps.child_failure(ps, -9, tmp_path).startswith("parameter server 0 died (SIGKILL, on n1")
    assert slurm_ps.iteration_phrase(tmp_path / "nowhere") == "before the first iteration"


def slurm_task(
    rank: int, hosts: str = "localhost", per_node: str = "2", world: int = 2
) -> placement.Placement:
    """Task ``rank``'s placement as srun would describe it (by default 2 tasks on localhost)."""
    env = {
        "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_STEP_NODELIST": hosts,
        "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURMD_NODENAME": "localhost", "DLSCALE_MASTER_PORT": "31000",
    }  # fmt: skip
    return placement.from_slurm(env)


def agent_with(tmp_path: Path, rank: int, commands: dict[str, str], **where) -> slurm_ps.Agent:
    """An agent whose children run ``commands`` (label -> Python code) instead of TensorFlow."""
    agent = slurm_ps.Agent([], slurm_task(rank, **where), 1, tmp_path)
    agent.argv_of = lambda task: [sys.executable, "-c", commands[task.label]]
    return agent


@pytest.fixture
def own_sigterm():
    """Agent.run installs a SIGTERM handler: the test process gets its own back."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_agent_fails_at_once_when_a_child_dies_and_names_it(tmp_path, own_sigterm):
    (tmp_path / "rank0.jsonl").write_text('{"event":"iteration","iteration":2}\n')
    slow = "import time; time.sleep(60)"
    agent = agent_with(
        tmp_path, 0, {"chief": slow, "worker 0": "import os; os.kill(os.getpid(), 9)", "ps 0": slow}
    )
    assert agent.run() == 1
    assert [proc.returncode for _, proc in agent.children] == [
        -signal.SIGTERM,
        -signal.SIGKILL,
        -signal.SIGTERM,
    ]
    ends = [e for e in part_events(tmp_path / "rank0.jsonl") if e.get("event") == "rank_end"]
    # The chief (here a stand-in that wrote nothing) left no end: the agent's is rank 0's story.
    assert ends[-1]["reason"] == "rank 0 died (worker 0, SIGKILL) at iteration 3"


def test_agent_forwards_sigterm_and_ends_its_rank(tmp_path, own_sigterm):
    agent = agent_with(tmp_path, 1, {"worker 1": "import time; time.sleep(60)"})
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert agent.run() == 1
    finally:
        timer.cancel()
    assert [proc.returncode for _, proc in agent.children] == [-signal.SIGTERM]
    events = part_events(tmp_path / "rank1.jsonl")
    assert events[0]["event"] == "rank_start" and events[0]["host"] == "localhost"
    assert events[0]["processes"] == {"worker 1": agent.children[0][1].pid}
    assert (
        events[-1]["reason"]
        == "terminated by SIGTERM (time limit or cancellation) before the first iteration"
    )


def test_agent_ends_ok_when_every_child_does(tmp_path, own_sigterm):
    agent = agent_with(tmp_path, 1, {"worker 1": "pass"})
    assert agent.run() == 0
    assert [e["event"] for e in part_events(tmp_path / "rank1.jsonl")] == ["rank_start", "rank_end"]
    assert part_events(tmp_path / "rank1.jsonl")[-1]["status"] == "ok"


def test_agent_refuses_a_peer_name_that_does_not_resolve(tmp_path, own_sigterm):
    # Issue 22: before any server starts, with MWMS's words; nothing is started.
    agent = agent_with(tmp_path, 1, {}, hosts="localhost,no-such-node.invalid", per_node="1(x2)")
    assert agent.run() == 2
    assert agent.children == []
    reason = part_events(tmp_path / "rank1.jsonl")[-1]["reason"]
    assert reason.startswith("worker 1 (no-such-node.invalid:31003) unreachable from rank 1: name"), reason
    assert "no-such-node.invalid does not resolve" in reason
    parts = read_parts(tmp_path)
    assert describe_group_failure("srun", 1, parts) == reason


# --- real: SLURM test cluster ------------------------------------------------------------


def part_events(path: Path) -> list[dict]:
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def run_job(cluster: SlurmCluster, tmp_path: Path, run_spec: dict, data: Path, on_running=None):
    """Submit the run as the training rule would and wait for it; what ``on_running``
    returns (it gets the run's work dir while the job runs), the events and the job log."""
    tf_py = framework_python("tensorflow")
    job = tmp_path / "job.sh"
    events = tmp_path / "run" / "events.jsonl"
    launch_job(job, tf_py, run_spec, data, events)
    log = tmp_path / "job.log"
    proc = subprocess.Popen(
        cluster.sbatch_wait(job, log, nodes=run_spec["nodes"], mem_mb=2000, minutes=5),
        env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: dict = {}
    try:
        if on_running:
            seen = on_running(events.parent / ".work")
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not cluster.jobs(), "a job outlived the run"
    text = log.read_text() if log.exists() else out
    # Every agent names its own PID and its children's when it has started them.
    started = [
        int(pid)
        for line in text.splitlines()
        if "[tf ps agent" in line
        for pid in re.findall(r"pid (\d+)", line)
    ]
    assert not [pid for pid in [*started, *seen.values()] if alive(pid)], "a process of the run was left"
    return seen, read_events(events), text


def processes_of(work: Path, world: int, timeout: float = 240) -> dict[str, int]:
    """Every PID the agents and the chief name (rank_start), once all have started."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found: dict[str, int] = {}
        for rank in range(world):
            for event in part_events(work / f"rank{rank}.jsonl"):
                if event.get("event") == "rank_start":
                    found[f"rank {rank}"] = event["pid"]
                    found.update(event.get("processes") or {})
        if len(found) >= world + 1:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"the ranks of {work} never all started")


def test_ps_mode_runs_to_the_end_under_slurm(slurm, tmp_path, mnist_shards):
    """4 nodes, 2 parameter servers: the chief and ps 0 on n1, ps 1 on n2, a worker on each."""
    # Each worker applies its own update (asynchronously, with momentum): 4 workers at the
    # 2-worker rate of 0.01 diverged (NaN loss at iteration 13, once in two runs).
    run_spec = spec(nodes=4, iterations=12, num_ps=2, learning_rate=0.0025)
    seen, run, log = run_job(slurm, tmp_path, run_spec, mnist_shards, lambda work: processes_of(work, 4))
    assert run[-1]["status"] == "ok", (run[-1], log[-3000:])
    start = run[0]
    assert start["launcher"] == "slurm" and start["hosts"] == ["n1", "n2", "n3", "n4"]
    assert start["versions"]["strategy"] == "ps"
    iterations = [e for e in run if e["event"] == "iteration"]
    assert len(iterations) == run_spec["warmup"] + run_spec["iterations"]  # one reporting rank: the chief
    assert {e["rank"] for e in iterations} == {0}
    assert all(
        e["samples"] == 4 * 64 and e["workers"] == 4 and e["parameter_servers"] == 2 for e in iterations
    )
    assert "started chief" in log and "ps 1" in log and "worker 3" in log


def test_a_killed_worker_is_named_under_slurm(slurm, tmp_path, mnist_shards):
    run_spec = spec(iterations=100000)

    def kill_worker_1(work: Path) -> dict:
        pids = processes_of(work, 2)
        deadline = time.time() + 240
        while sum(e.get("event") == "iteration" for e in part_events(work / "rank0.jsonl")) < 4:
            assert time.time() < deadline, "the chief never ran 4 iterations"
            time.sleep(0.2)
        os.kill(pids["worker 1"], signal.SIGKILL)
        return pids

    seen, run, log = run_job(slurm, tmp_path, run_spec, mnist_shards, kill_worker_1)
    assert run[0]["hosts"] == ["n1", "n2"]
    assert run[-1]["status"] == "failed", (run[-1], log[-3000:])
    assert run[-1]["reason"].startswith("rank 1 died (worker 1, SIGKILL) at iteration "), run[-1]["reason"]

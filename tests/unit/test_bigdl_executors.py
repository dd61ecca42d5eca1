"""How the BigDL driver names a dead executor or worker under SLURM, without a cluster.

The real thing runs in tests/slurm/test_bigdl_slurm.py (a SIGKILLed executor on the SLURM test
cluster); these pin down the pieces it is made of: an executor's host mapped to the
allocation's node, Spark's executor list read through a stand-in for the py4j objects (the
JVM's list is the only input), the driver log's ``Lost executor`` line when the context is
stopped, and srun's words when the workers' step ends.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

from dlscale.runners.bigdl.executors import RemoteExecutors, allocation_nodes, node_of
from dlscale.runners.bigdl.spark import ClusterShape, Daemon, SparkCluster

NODES = [("n1", "10.78.0.1"), ("n2", "10.78.0.2"), ("n3", "10.78.0.3")]
DRIVER = "10.78.0.1:40000"


class FakeJVM:
    """The three calls RemoteExecutors makes on the driver's SparkContext, over a list of
    ``host:port`` strings that a test changes as Spark would."""

    def __init__(self, listed: list[str]) -> None:
        self.listed = listed
        self.stopped = False

    def sc(self) -> FakeJVM:
        return self

    def isStopped(self) -> bool:  # noqa: N802 - the JVM's name
        return self.stopped

    def env(self) -> SimpleNamespace:
        manager_id = SimpleNamespace(hostPort=lambda: DRIVER)
        return SimpleNamespace(blockManager=lambda: SimpleNamespace(blockManagerId=lambda: manager_id))

    def statusTracker(self) -> SimpleNamespace:  # noqa: N802 - the JVM's name
        infos = []
        for entry in [] if self.stopped else self.listed:
            host, port = entry.split(":")
            infos.append(SimpleNamespace(host=lambda h=host: h, port=lambda p=port: int(p)))
        return SimpleNamespace(getExecutorInfos=lambda: infos)


def watching(listed: list[str]) -> tuple[FakeJVM, RemoteExecutors]:
    jvm = FakeJVM(listed)
    remote = RemoteExecutors(SimpleNamespace(_jsc=jvm), NODES)
    remote.wait(3, timeout_s=0)
    return jvm, remote


def test_the_allocation_nodes_in_slurm_order_with_their_addresses():
    nodes = allocation_nodes({"SLURM_JOB_NODELIST": "localhost,no-such-node-[2-3]"})
    assert nodes == [("localhost", "127.0.0.1"), ("no-such-node-2", None), ("no-such-node-3", None)]
    assert allocation_nodes({}) == []
    assert node_of("10.78.0.3", NODES) == (2, "n3")
    assert node_of("n2", NODES) == (1, "n2")
    assert node_of("192.0.2.7", NODES) == (None, "192.0.2.7")


def test_executors_are_recorded_by_node_without_the_driver_or_unregistered_ones():
    listed = [DRIVER, "10.78.0.3:41000", "10.78.0.1:41001", "10.78.0.2:41002", "10.78.0.2:0"]
    _, remote = watching(listed)
    assert [(e.node, e.name, e.port) for e in remote.expected] == [
        (0, "n1", 41001),
        (1, "n2", 41002),
        (2, "n3", 41000),
    ]
    assert remote.lost() is None
    assert remote.expected[1].where() == "on n2 at 10.78.0.2"


def test_a_vanished_executor_is_lost_and_a_relaunched_one_does_not_hide_it():
    jvm, remote = watching([DRIVER, "10.78.0.1:41001", "10.78.0.2:41002", "10.78.0.3:41003"])
    jvm.listed = [DRIVER, "10.78.0.1:41001", "10.78.0.3:41003"]
    executor, replaced = remote.lost()
    assert (executor.node, executor.name, replaced) == (1, "n2", False)
    jvm.listed = [DRIVER, "10.78.0.1:41001", "10.78.0.3:41003", "10.78.0.2:45555"]
    executor, replaced = remote.lost()
    assert (executor.node, replaced) == (1, True)
    # Two gone at once: the one the driver log named first is the cause, else the lowest node.
    jvm.listed = [DRIVER, "10.78.0.3:41003"]
    assert remote.lost()[0].node == 0
    assert remote.lost(["10.78.0.2", "10.78.0.1"])[0].node == 1


def test_a_stopped_context_says_nothing_and_the_driver_log_names_the_executor():
    jvm, remote = watching([DRIVER, "10.78.0.1:41001", "10.78.0.2:41002", "10.78.0.3:41003"])
    jvm.stopped = True  # its list is empty now: that is no executor's death
    assert remote.lost() is None and remote.blind
    line = "2026-11-30 22:12:14.606 ERROR TaskSchedulerImpl: Lost executor 0 on 10.78.0.2: Command exited with code 137"
    lost = remote.lost_in_log(line)
    assert (lost.node, lost.name) == (1, "n2")
    assert remote.lost_in_log(line.replace("10.78.0.2", "192.0.2.9")) is None  # not one of ours
    assert remote.lost_in_log("INFO DistriOptimizer$: [Epoch 1 128/60000][Iteration 3]") is None


def test_an_ended_worker_step_is_named_by_the_task_srun_reports(tmp_path: Path):
    cluster = SparkCluster(tmp_path, tmp_path, ClusterShape(3, 1, "1g"), mode="slurm")
    log = tmp_path / "workers.log"
    log.write_text("srun: error: n3: task 2: Killed\nsrun: Terminating StepId=5.0\n")
    step = subprocess.Popen(["sh", "-c", "exit 137"])
    step.wait()
    cluster.daemons.append(Daemon("workers", step, log))
    assert cluster.dead_workers() == [(2, "the Spark worker of node 2, n3, ended: Killed")]
    log.write_text("")
    assert cluster.dead_workers() == [
        (None, f"the srun step of the Spark workers, pid {step.pid}, exited (137)")
    ]
    alive = subprocess.Popen(["sleep", "30"])
    try:
        cluster.daemons[:] = [Daemon("workers", alive, log)]
        assert cluster.dead_workers() == []
    finally:
        alive.kill()
        alive.wait()


def test_locally_each_node_has_its_worker_and_the_master_is_no_rank(tmp_path: Path):
    cluster = SparkCluster(tmp_path, tmp_path, ClusterShape(2, 1, "1g"))
    ended = subprocess.Popen(["sh", "-c", "exit 143"])
    ended.wait()
    log = tmp_path / "x.log"
    cluster.daemons += [Daemon("master", ended, log), Daemon("worker1", ended, log)]
    assert cluster.dead_workers() == [(1, f"the Spark worker of node 1, pid {ended.pid}, exited (143)")]

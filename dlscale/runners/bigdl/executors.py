"""Under SLURM, the BigDL driver watches its executors through Spark, not through /proc.

Locally every executor is a process on this host, watched by its PID
(``SparkCluster.executor_pids``). Under SLURM they run on the allocation's other nodes, out
of sight of /proc; what the driver does see is Spark's own view of them: the driver JVM's
status tracker (``SparkStatusTracker.getExecutorInfos``, public API) lists every live
executor's block manager by host and port, the driver's own included. ``RemoteExecutors``
records that list once every executor has registered, and says when one of them is gone,
whether or not Spark's standalone master has already launched a replacement (a new JVM:
another port) on the same node.

Once the SparkContext is stopped the list is empty (BigDL stops it when a job fails, which
can come before the next look), so a stopped context tells nothing; then the driver's log
does: Spark logs ``Lost executor ID on HOST: reason`` as it removes one
(``lost_in_log``), which ``LiveLog`` reads anyway.

An executor's host is its node's address (every worker binds the address its node reaches
the master from: ``python -m dlscale.host.placement --towards``), so node k of the run is the
executor whose host is the address of the k-th node of the allocation (SLURM_JOB_NODELIST,
in SLURM's order, each name resolved as the workers' peers resolve it). Ranks follow:
node k holds ranks ``k x ranks_per_node ..``.

The calls go through py4j from the ``LiveLog`` thread while the main thread waits in
BigDL's ``optimize``: PySpark's gateway (py4j's ClientServer, the default pinned-thread
mode) gives every Python thread its own connection and JVM thread, which py4j documents as
what makes it thread-safe; ``cancelAllJobs`` is called from another thread the same way.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlscale.host.placement import expand_hostlist

POLL_S = 0.2
LOST = re.compile(r"Lost executor (\S+) on ([^\s:]+): ")  # TaskSchedulerImpl, at ERROR


@dataclass(frozen=True)
class Executor:
    """One executor as the driver knows it: its block manager's ``host:port``, and the node
    of the allocation it runs on (``None`` for a host that is no node of the allocation)."""

    host: str
    port: int
    node: int | None
    name: str  # the node's name in the allocation, or the host where none matches

    @property
    def key(self) -> str:
        return f"{self.host}:{self.port}"

    def where(self) -> str:
        return self.host if self.name == self.host else f"on {self.name} at {self.host}"


def allocation_nodes(env: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """The allocation's nodes in SLURM's order, each ``(name, address)``: the address the
    name resolves to here (None where it does not), which is what a worker binds."""
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    nodes: list[tuple[str, str | None]] = []
    for name in expand_hostlist(nodelist) if nodelist else []:
        try:
            nodes.append((name, socket.gethostbyname(name)))
        except OSError:
            nodes.append((name, None))
    return nodes


def node_of(host: str, nodes: list[tuple[str, str | None]]) -> tuple[int | None, str]:
    """Which node of ``nodes`` an executor's ``host`` is, and that node's name.

    By address first (what workers bind); then, for a host given as a name or an address
    of another interface, by the name it (reverse-)resolves to, short names compared.
    """
    for index, (name, address) in enumerate(nodes):
        if host in (address, name):
            return index, name
    try:
        resolved = socket.gethostbyaddr(host)[0]
    except OSError:
        return None, host
    short = resolved.split(".")[0]
    for index, (name, _) in enumerate(nodes):
        if name.split(".")[0] == short:
            return index, name
    return None, host


class RemoteExecutors:
    """The run's executors as the driver JVM lists them; ``lost()`` names one that is gone."""

    def __init__(self, sc: Any, nodes: list[tuple[str, str | None]]) -> None:
        self._jsc = sc._jsc.sc()
        self.nodes = nodes
        self.expected: list[Executor] = []
        self.blind = False  # the last look could not be made (context stopped, JVM gone)

    def current(self) -> list[Executor]:
        """The live executors whose block manager has registered (a port), the driver left out.

        An executor that registered with the scheduler but not yet its block manager is
        listed with port 0: not counted yet.
        """
        driver = str(self._jsc.env().blockManager().blockManagerId().hostPort())
        found = []
        for info in self._jsc.statusTracker().getExecutorInfos():
            host, port = str(info.host()), int(info.port())
            if port and f"{host}:{port}" != driver:
                found.append(Executor(host, port, *node_of(host, self.nodes)))
        return sorted(found, key=lambda e: (e.node is None, e.node or 0, e.key))

    def wait(self, count: int, timeout_s: float) -> list[Executor]:
        """Wait until ``count`` executors have registered (or ``timeout_s``); record them.

        After a time-out the executors found so far are the ones watched (BigDL then fails
        or trains with what it has, and says so itself).
        """
        deadline = time.time() + timeout_s
        while True:
            found = self.current()
            if len(found) >= count or time.time() > deadline:
                self.expected = found
                return found
            time.sleep(POLL_S)

    def lost(self, order: Sequence[str] = ()) -> tuple[Executor, bool] | None:
        """A recorded executor no longer listed, and whether another one has taken its place
        on the same host (Spark's master relaunches executors); None if all live.

        When several are gone (a worker step's end takes every node's), the first one Spark
        lost is the cause: ``order`` lists hosts in the order the driver's log said Spark lost
        executors there; without it, the lowest node.

        A driver JVM that no longer answers says nothing here (``blind``): its end is
        reported by the training call that fails with it.
        """
        if not self.expected:
            return None
        try:
            self.blind = bool(self._jsc.isStopped())
            live = [] if self.blind else self.current()
        except Exception:  # noqa: BLE001 - py4j's errors when the JVM is going or gone
            self.blind = True
        if self.blind:
            return None
        keys = {e.key for e in live}
        missing = [e for e in self.expected if e.key not in keys]
        if not missing:
            return None
        order = list(order)
        executor = min(missing, key=lambda e: order.index(e.host) if e.host in order else len(order))
        recorded = {e.key for e in self.expected}
        return executor, any(e.host == executor.host and e.key not in recorded for e in live)

    def lost_in_log(self, line: str) -> Executor | None:
        """The executor a driver log line says Spark lost, if it says so and it is one of
        the run's (by host: the line has no port)."""
        said = LOST.search(line)
        if not said or not any(e.host == said[2] for e in self.expected):
            return None
        return Executor(said[2], 0, *node_of(said[2], self.nodes))

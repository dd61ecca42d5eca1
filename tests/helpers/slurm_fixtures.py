"""The suite's one SLURM test cluster: started once per pytest session, stopped however it ends.

Starting the cluster (munged, slurmctld, a slurmd per node, their network namespaces) is
the same work for every test that submits jobs, so the session starts it once
(``slurm_guard``) and each test borrows it through ``slurm``, which finds it idle and
hands it back idle: no job queued, every node idle, the links unshaped (``reset``). A test
that needs shaped links sets them with ``set_network`` and puts them back; ``slurm``
restores them if the test could not.

pytest tears fixtures down on a normal end and on KeyboardInterrupt, but SIGTERM (what
``timeout`` and CI runners send) kills the interpreter outright, leaving the daemons
running and their namespaces behind. ``StopOnExit`` turns SIGTERM and SIGINT into
KeyboardInterrupt, so pytest runs every teardown, and registers an atexit fallback;
both stop only what the cluster started (its daemons' PIDs, their descendants, its own
namespaces). tests/slurm/test_slurm_teardown.py proves it on a session killed by each signal.

tests/conftest.py re-exports the fixtures; a bare session loads them with
``-p helpers.slurm_fixtures`` (tests/ on its import path).
"""

from __future__ import annotations

import atexit
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.slurm_cluster import SlurmCluster, alive

#: The session cluster's shape: 4 nodes (the study's largest run), 2 CPUs each (a 1-node
#: and a 2-node job can share a node), memory for BigDL's driver and executor on one node.
SHAPE = {"nodes": 4, "cpus": 2, "mem_mb": 4000}
SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The signals that ended this session early (its tests' leftovers are then no finding).
INTERRUPTED: list[str] = []


class StopOnExit:
    """Start a cluster and stop it when the block ends, on SIGTERM or SIGINT, or at exit.

    A signal during the start is held until the start is over (a half-made network or a
    daemon between fork and record would escape the stop); a signal during the stop is
    ignored, so that a second Ctrl-C cannot leave half the cluster running. Code under
    test may install its own SIGTERM handler (a launcher, an agent): ``rearm`` puts ours
    back, and the atexit fallback covers a handler that exits.
    """

    def __init__(self, cluster: SlurmCluster):
        self.cluster = cluster
        self.phase = "starting"
        self.pending: str | None = None
        self.previous: dict[int, object] = {}

    def _interrupt(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.phase == "starting":
            self.pending = name
        elif self.phase == "running":
            INTERRUPTED.append(name)
            raise KeyboardInterrupt(f"{name}: stopping the SLURM test cluster")

    def rearm(self) -> None:
        for sig in SIGNALS:
            if signal.getsignal(sig) is not self._interrupt:
                signal.signal(sig, self._interrupt)

    def __enter__(self) -> StopOnExit:
        self.previous = {sig: signal.signal(sig, self._interrupt) for sig in SIGNALS}
        atexit.register(self.cluster.stop)
        try:
            try:
                self.cluster.start()
            finally:
                self.phase = "running"
            if self.pending:
                INTERRUPTED.append(self.pending)
                raise KeyboardInterrupt(f"{self.pending}: stopping the SLURM test cluster during its start")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.phase = "stopping"
        try:
            self.cluster.stop()
        finally:
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
            atexit.unregister(self.cluster.stop)


def leftovers(cluster: SlurmCluster) -> list[str]:
    """What of a stopped cluster is still there: live daemons, existing namespaces."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return [f"pid {pid}" for pid in cluster.pids() if alive(pid)] + [
        f"namespace {name}" for name in cluster.namespaces() if name in names
    ]


@pytest.fixture(scope="session")
def slurm_guard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StopOnExit]:
    """The session's SLURM test cluster (``SHAPE``) under its guard; tests take ``slurm``."""
    cluster = SlurmCluster(base=Path(tmp_path_factory.mktemp("slurm")) / "cluster", **SHAPE)
    with StopOnExit(cluster) as guard:
        yield guard
    left = leftovers(cluster)
    assert not left, f"the SLURM test cluster left {left}"


@pytest.fixture
def slurm(slurm_guard: StopOnExit) -> Iterator[SlurmCluster]:
    """The session's cluster for one test: idle when it starts, put back idle and unshaped
    after; a test that leaves a job queued fails here (the job is cancelled first), unless
    a signal cut it short."""
    slurm_guard.rearm()
    cluster = slurm_guard.cluster
    cluster.wait_idle()
    yield cluster
    left = cluster.reset()
    assert not left or INTERRUPTED, f"the test left jobs {left} on the shared SLURM cluster (cancelled)"

"""Data parallelism the way Caffe-oMPI (the MPI Caffe of Du et al. 2018) does it.

One MPI rank per worker, each with a full replica of the net. Rank 0's initial weights are
broadcast so every replica starts identical; after each backward pass every learnable
gradient is summed with ``MPI_Allreduce`` and divided by the number of ranks, so each
replica applies the same averaged gradient and the replicas stay bit-identical. That is
the synchronous SGD of one process on the global batch (ranks x per-rank batch), up to
float32 rounding of the sum.

The all-reduce runs in pycaffe's solver callback ``on_gradients_ready`` (called by
``Solver::Step`` between backward and the update), on numpy views of Caffe's own gradient
memory: no copies, one ``MPI_Allreduce`` per parameter blob (layer-wise, as Caffe-oMPI). A barrier comes first, so the timed all-reduce is the transfer itself,
not waiting for a slower peer (skew-free ``comm_s``); the barrier's wait is kept apart.

Nothing here imports caffe: it works on any object with pycaffe's ``net.params`` shape,
and the MPI communicator is passed in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dlscale.runners.caffe.models import learnable_blobs
from dlscale.runners.common import startup_part


def import_mpi() -> Any:
    """mpi4py's MPI module, initialised for one MPI-calling thread at a time, no auto-finalize.

    The collectives run in a helper thread while the main thread waits (see
    ``interruptible``), never two at once: MPI_THREAD_SERIALIZED suffices
    and avoids the locking of mpi4py's default THREAD_MULTIPLE. MPI_Finalize waits for the
    peers, so a rank that fails alone (a NaN on its own batch, an unreadable shard) must
    not call it at exit: it would wait forever for peers that wait in the next all-reduce.
    It exits without finalizing instead, mpirun (or srun) ends the job, and only a rank
    that finished its work finalizes (``finish``).
    """
    import mpi4py

    mpi4py.rc.thread_level = "serialized"
    mpi4py.rc.finalize = False
    with startup_part("rendezvous_s"):  # MPI_Init_thread: the rank joins mpirun's (srun's) job
        from mpi4py import MPI

    return MPI


def interruptible(call: Callable[[], None]) -> None:
    """Run a blocking MPI call in a helper thread while this thread waits in Python.

    When a peer dies, mpirun sends SIGTERM to the survivors, which sit in a collective
    that never completes; a Python signal handler cannot run while the main thread is
    inside that C call. Waiting here instead lets the harness's handler raise, so the
    survivor records "terminated by SIGTERM at iteration N" and the launcher can tell
    the dead rank (no end recorded) from its victims. The helper is a daemon thread:
    abandoned in its hung collective, it does not keep the process alive.
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(err)

    helper = threading.Thread(target=run, name="mpi-collective", daemon=True)
    helper.start()
    while helper.is_alive():
        helper.join(0.05)
    if errors:
        raise errors[0]


def finish(comm: Any, mpi: Any) -> None:
    """After the last step on every rank: wait for all, then finalize MPI."""
    if comm.Get_size() > 1:
        interruptible(comm.Barrier)
    mpi.Finalize()


class GradientAllreduce:
    """Allreduce-average the gradients of ``solver.net`` after every backward pass.

    ``last`` holds the timings of the most recent step's synchronisation (seconds):
    ``barrier_s`` (waiting for the slowest rank), ``comm_s`` (the all-reduce and the
    division) and ``started``/``finished`` (perf_counter stamps), and ``comm_bytes``.
    """

    def __init__(self, solver: Any, comm: Any, mpi: Any):
        self.solver, self.comm, self.mpi = solver, comm, mpi
        self.world = int(comm.Get_size())
        net = solver.net
        # Views into Caffe's gradient memory, fixed for the life of the net (CPU mode, no
        # reshape): taken once, written in place.
        self.diffs = [blob.diff for _, _, blob in learnable_blobs(net)]
        for diff in self.diffs:
            if not diff.flags.c_contiguous or not diff.flags.writeable:
                raise RuntimeError("pycaffe returned a gradient view that cannot be all-reduced in place")
        self.comm_bytes = sum(int(d.nbytes) for d in self.diffs) if self.world > 1 else 0
        self.last: dict[str, float] = {}
        if self.world > 1:
            solver.add_callback(self._on_start, self._on_gradients_ready)

    def broadcast_weights(self) -> None:
        """Every blob of rank 0's net (weights and BatchNorm statistics) to all ranks."""
        if self.world == 1:
            return
        for params in self.solver.net.params.values():
            for blob in params:
                self.comm.Bcast(blob.data, root=0)

    def _on_start(self) -> None:
        self.last = {}

    def _on_gradients_ready(self) -> None:
        t1 = time.perf_counter()
        interruptible(self.comm.Barrier)
        t2 = time.perf_counter()
        interruptible(self._allreduce)
        t3 = time.perf_counter()
        self.last = {"started": t1, "barrier_s": t2 - t1, "comm_s": t3 - t2, "finished": t3}

    def _allreduce(self) -> None:
        scale = 1.0 / self.world
        for diff in self.diffs:
            self.comm.Allreduce(self.mpi.IN_PLACE, diff, op=self.mpi.SUM)
            diff *= scale

    def sync_time(self) -> tuple[float, float]:
        """(barrier_s, comm_s) of the last step; zeros on one rank."""
        return self.last.get("barrier_s", 0.0), self.last.get("comm_s", 0.0)

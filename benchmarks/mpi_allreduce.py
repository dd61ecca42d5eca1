"""MPI all-reduce of each gradient size (``mpirun -n 2 python -m benchmarks.mpi_allreduce
allreduce``; arguments and output: benchmarks.worker_cli).

Runs in the small bench-mpi venv (mpi4py + numpy). Per size: one warm-up Allreduce, then
``inner`` timed ones, each after a barrier so the time is the transfer, not a peer's lag
(the same protocol as the gloo benchmark). Rank 0 prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from mpi4py import MPI

from benchmarks import worker_cli


def allreduce(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    comm = MPI.COMM_WORLD
    for nbytes in args.sizes:
        buffer = np.ones(nbytes // 4, dtype=np.float32)
        comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        times = []
        for _ in range(args.inner):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
            buffer /= comm.Get_size()
            times.append(time.perf_counter() - t0)
        if comm.Get_rank() == 0:
            yield {"transport": "mpi", "nbytes": buffer.nbytes, "seconds": statistics.median(times)}


COMMANDS = {"allreduce": allreduce}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)

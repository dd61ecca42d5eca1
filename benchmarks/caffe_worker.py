"""Benchmark work inside the Caffe venv (``python -m benchmarks.caffe_worker``; pycaffe made
importable by the driver as a Caffe run's, by dlscale.runners.caffe.launcher.caffe_env).

Sub-commands (arguments and output: benchmarks.worker_cli):

* ``training``: the runner's own loop (``dlscale.runners.caffe.train.train`` as a lone MPI
  rank, in this process) against a bare loop and the matmul peak, rotated per repeat.
  The bare loop is Caffe's plainest: the runner's net and SGD solver (same prototxt), per
  iteration a fresh batch gathered from the normalised set in memory
  (``bare_common.Dataset``) and written into the Input blobs, then ``solver.step(1)``, no
  callbacks; then the float32 matmul peak of numpy's BLAS with the same threads.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import worker_cli
from benchmarks.bare_common import Dataset, bare_loop, matmul_peak, numpy_matmul
from benchmarks.runner_arm import rotate_arms, runner_arm
from dlscale.runspec import RunSpec


def bare(spec: RunSpec, dataset: Dataset) -> dict[str, float]:
    from dlscale.runners.caffe.train import feed, make_solver

    with tempfile.TemporaryDirectory(prefix="caffe-bench-") as tmp:
        solver = make_solver(spec, spec.batch, Path(tmp))
    batches = dataset.batches(spec.batch, spec.seed)

    def step() -> None:
        images, labels = next(batches)
        feed(solver.net, images, labels.astype(np.float32))
        solver.step(1)

    return bare_loop(spec, step)


def training(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Runner (dlscale.runners.caffe.train.train as a lone MPI rank, in this process) vs
    bare vs peak. The runner finalizes MPI when it is done, which a process can do once:
    here that one call waits until every arm has run (MPI is finalized at the end)."""
    from dlscale.runners.caffe import parallel
    from dlscale.runners.caffe import train as runner

    spec: RunSpec = args.spec
    finalize = parallel.finish
    parallel.finish = lambda comm, mpi: None
    dataset = Dataset(args.data, spec.model, nchw=True)
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-caffe-") as tmp:
        yield from rotate_arms(spec, args.repeats, {
            "runner": lambda r: runner_arm(runner.train, spec, args.data, Path(tmp), r),
            "bare": lambda r: bare(spec, dataset),
            "peak": lambda r: matmul_peak(numpy_matmul),
        })  # fmt: skip
    mpi = parallel.import_mpi()
    finalize(mpi.COMM_WORLD, mpi)


COMMANDS = {"training": training}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)

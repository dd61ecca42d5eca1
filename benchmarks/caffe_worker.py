"""Benchmark work inside the Caffe venv (``python -m benchmarks.caffe_worker``; pycaffe on
PYTHONPATH, as dlscale.runners.caffe.launcher.caffe_env sets it).

* ``training``: the runner's own loop (``dlscale.runners.caffe.train.train`` as a lone MPI
  rank, in this process) against a bare loop and the matmul peak, rotated per repeat.
  The bare loop is Caffe's plainest: the runner's net and SGD solver (same prototxt), one
  fixed batch written into the Input blobs once, ``solver.step(1)`` per iteration, no
  callbacks; then the float32 matmul peak of numpy's BLAS with the same threads.
* ``allreduce`` (under ``mpirun -n 2``): each model's learnable blobs, all-reduced one
  MPI_Allreduce per blob after a barrier, as the runner's GradientAllreduce does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bare_common import (
    emit,
    first_batch,
    intervals_throughput,
    matmul_peak,
    normalised,
    numpy_matmul,
    timed_loop,
)


def bare(spec: dict, data: Path) -> dict[str, float]:
    from dlscale.runners.caffe.train import feed, make_solver

    name, batch = spec["model"], int(spec["batch"])
    images, labels, mean, std = first_batch(data, name, batch)
    with tempfile.TemporaryDirectory(prefix="caffe-bench-") as tmp:
        solver = make_solver(spec, batch, Path(tmp))
    feed(solver.net, normalised(images, name, mean, std, nchw=True), labels.astype(np.float32))
    total = int(spec["warmup"]) + int(spec["iterations"])
    stamps, cpu = timed_loop(lambda: solver.step(1), total)
    first = int(spec["warmup"]) - 1
    return {"samples_per_s": intervals_throughput(batch, stamps, first),
            "samples_per_cpu_s": intervals_throughput(batch, cpu, first)}  # fmt: skip


def training(args: argparse.Namespace) -> None:
    """Runner (dlscale.runners.caffe.train.train as a lone MPI rank, in this process) vs
    bare vs peak. The runner finalizes MPI when it is done, which a process can do once:
    here that one call waits until every arm has run (MPI is finalized at exit)."""
    import tempfile

    from benchmarks.runner_arm import rotate_arms, runner_arm
    from dlscale.runners.caffe import parallel
    from dlscale.runners.caffe import train as runner

    finalize = parallel.finish
    parallel.finish = lambda comm, mpi: None
    spec = json.loads(args.spec_json)
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-caffe-") as tmp:
        rotate_arms(spec, args.repeats, {
            "runner": lambda r: runner_arm(runner.train, spec, args.data, Path(tmp), r),
            "bare": lambda r: bare(spec, args.data),
            "peak": lambda r: matmul_peak(numpy_matmul),
        })  # fmt: skip
    mpi = parallel.import_mpi()
    finalize(mpi.COMM_WORLD, mpi)


def allreduce(args: argparse.Namespace) -> None:
    import caffe

    from dlscale.runners.caffe.models import learnable_blobs, net_prototxt
    from dlscale.runners.caffe.parallel import import_mpi

    mpi = import_mpi()
    comm = mpi.COMM_WORLD
    caffe.set_mode_cpu()
    world = comm.Get_size()
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="caffe-bench-") as tmp:
            path = Path(tmp) / "net.prototxt"
            path.write_text(net_prototxt(model, 1))
            net = caffe.Net(str(path), caffe.TRAIN)
        diffs = [blob.diff for _, _, blob in learnable_blobs(net)]
        for diff in diffs:
            diff[...] = 1.0

        def sync(diffs: list = diffs) -> None:
            for diff in diffs:
                comm.Allreduce(mpi.IN_PLACE, diff, op=mpi.SUM)
                diff *= 1.0 / world

        sync()
        times = []
        for _ in range(args.inner):
            comm.Barrier()
            t0 = time.perf_counter()
            sync()
            times.append(time.perf_counter() - t0)
        if comm.Get_rank() == 0:
            nbytes = sum(int(d.nbytes) for d in diffs)
            emit(
                transport="caffe",
                nbytes=nbytes,
                seconds=statistics.median(times),
                blobs=len(diffs),
                model=model,
            )
        del net, diffs
    comm.Barrier()
    mpi.Finalize()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train_p = sub.add_parser("training")
    train_p.add_argument("--spec-json", required=True)
    train_p.add_argument("--data", required=True, type=Path)
    train_p.add_argument("--repeats", type=int, default=5)
    ar = sub.add_parser("allreduce")
    ar.add_argument("--models", nargs="+", required=True)
    ar.add_argument("--inner", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    {"training": training, "allreduce": allreduce}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

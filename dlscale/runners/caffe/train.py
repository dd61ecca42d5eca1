"""Caffe runner: pycaffe SGD with MPI gradient all-reduce (Caffe-oMPI style), timed per step.

One MPI rank per worker (started by mpirun, or srun under SLURM). Each rank builds the
model's net (``models.py``) in a pycaffe ``SGDSolver``, receives rank 0's initial weights,
and trains on its own part of the shards. ``solver.step(1)`` runs forward, backward, the
all-reduce (solver callback, ``parallel.py``) and the update; the step is split as the
study compares frameworks:
  comm_s    = the all-reduce of every learnable gradient, after a barrier (skew-free)
  compute_s = the rest of the step: forward + backward + update
  step_s    = the whole step, barrier included
  input_s   = getting the step's batch into the net before the step: converting and copying
              it into the input blobs (``input: memory``), or waiting for the prefetch
              thread's next slot of the MemoryData layer (``input: pipeline``, ``data.py``)
After its first step each rank records the BLAS library it really loaded (``blas.loaded``:
/proc/self/maps, the library's own version string; run_start ``measured.blas``).
The solver's update is Caffe's SGD (v = m v + lr g; w -= v), which equals torch's
(v = m v + g; w -= lr v) at a fixed learning rate; weight decay is 0 in both. A warm-up
ramp of the study's learning-rate rule keeps torch's rule through ``schedule.py``.

After each iteration where ``ctx.eval_due``, outside the timed step, every rank evaluates
its share of the held-out set and rank 0 records the sum (``evaluate.py``); with a quality
target every rank stops after the first evaluation that met it. With ``init: shared`` every rank starts from
``dlscale.data.initweights`` (``initial.py``; its digest goes into iteration 0's event as
``init_sha256``) and trains on its slice of one global batch sequence (``data.py``); the
losses are already the mean over the rank's batch (the autoencoder's over its pixels too,
``models.py``) and the gradients the mean over ranks (``parallel.py``), as the reference's.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.runners.caffe.blas import loaded as blas_loaded
from dlscale.runners.caffe.data import Batches, PrefetchFeed
from dlscale.runners.caffe.data import preprocess as preprocess  # re-exported: tests and captures use it
from dlscale.runners.caffe.evaluate import Evaluator, evaluate_due
from dlscale.runners.caffe.initial import load_shared
from dlscale.runners.caffe.models import LOSS_SCALE, net_prototxt
from dlscale.runners.caffe.schedule import TorchMomentum, solver_rates
from dlscale.runners.common import RunContext, startup_part
from dlscale.runspec import RunSpec


def versions() -> dict[str, str]:
    import caffe
    import google.protobuf

    from dlscale.runners.caffe.parallel import import_mpi

    MPI = import_mpi()
    return {
        "caffe": str(getattr(caffe, "__version__", "unknown")),
        "caffe_home": os.environ.get("DLSCALE_CAFFE_HOME", str(Path(caffe.__file__).parents[2])),
        "mpi4py": __import__("mpi4py").__version__,
        "mpi_thread_level": str(MPI.Query_thread()),
        "mpi": MPI.Get_library_version().splitlines()[0].strip().rstrip("\x00"),
        "numpy": np.__version__,
        "protobuf": google.protobuf.__version__,
        "backend": "mpi",
    }


def solver_prototxt(net_path: Path, spec: RunSpec) -> str:
    """A fixed-rate SGD solver (no test net, no snapshots) over the net file; a warm-up
    ramp's rates and momentum are applied by ``schedule.TorchMomentum``."""
    base_lr, momentum = solver_rates(spec)
    return "\n".join(
        [
            f'net: "{net_path}"',
            'type: "SGD"',
            f"base_lr: {base_lr!r}",
            'lr_policy: "fixed"',
            f"momentum: {momentum!r}",
            "weight_decay: 0",
            f"max_iter: {spec.total_iterations}",
            f"display: {spec.options['log_every']}",
            "snapshot: 0",
            "snapshot_after_train: false",
            f"random_seed: {spec.seed}",
            "solver_mode: CPU",
            "",
        ]
    )


def make_solver(spec: RunSpec, batch: int, directory: Path, data_layer: str = "Input") -> Any:
    """A pycaffe SGDSolver for ``spec.model`` at a per-rank ``batch``; files go in ``directory``.

    ``data_layer``: the net's first layer, ``Input`` or ``MemoryData`` (``models.net_prototxt``).
    """
    import caffe

    caffe.set_mode_cpu()
    net_path = directory / f"{spec.model}.prototxt"
    net_path.write_text(net_prototxt(spec.model, batch, data_layer))
    solver_path = directory / "solver.prototxt"
    solver_path.write_text(solver_prototxt(net_path, spec))
    return caffe.SGDSolver(str(solver_path))


def feed(net: Any, x: np.ndarray, y: np.ndarray) -> None:
    """Write a mini-batch into the net's Input blobs (the Input layer's forward keeps them)."""
    net.blobs["data"].data[...] = x
    if "label" in net.blobs:
        net.blobs["label"].data[...] = y


def peers(ctx: RunContext) -> list[tuple[str, str]]:
    """None besides the master: Open MPI's ranks exchange their addresses through mpirun
    (or srun's PMI), never by host name."""
    return []


def train(ctx: RunContext) -> None:
    from dlscale.runners.caffe.parallel import GradientAllreduce, finish, import_mpi

    MPI = import_mpi()

    spec = ctx.spec
    comm = MPI.COMM_WORLD
    if comm.Get_size() != ctx.world_size or comm.Get_rank() != ctx.rank:
        raise RuntimeError(
            f"MPI says rank {comm.Get_rank()} of {comm.Get_size()}, placement says"
            f" {ctx.rank} of {ctx.world_size}: started without mpirun/srun --mpi?"
        )
    batch, seed, model = spec.batch, spec.seed, spec.model
    loss_scale = LOSS_SCALE.get(model, 1.0)
    pipeline, shared = spec.input == "pipeline", spec.init == "shared"
    with startup_part("data_setup_s"):
        batches = (
            None if pipeline else Batches(ctx.data_dir, ctx.rank, ctx.world_size, batch, seed, model, shared)
        )
    with startup_part("model_setup_s"), tempfile.TemporaryDirectory(prefix="caffe-") as tmp:
        solver = make_solver(spec, batch, Path(tmp), "MemoryData" if pipeline else "Input")
        net = solver.net
        init_sha256 = load_shared(net, model, seed) if shared else None
    sync = GradientAllreduce(solver, comm, MPI)
    with startup_part("rendezvous_s"):  # every rank waits here for rank 0's weights
        sync.broadcast_weights()
    # After the all-reduce's callback: the momentum buffer takes the averaged gradient.
    ramp = TorchMomentum(solver, spec) if spec.warmup_ramp else None
    with startup_part("data_setup_s"):
        prefetch = (
            PrefetchFeed(net, ctx.data_dir, ctx.rank, ctx.world_size, batch, seed, model, shared=shared)
            if pipeline
            else None
        )
    # The Input blobs, as arrays over their memory (an Input layer never reallocates them):
    # memory mode gathers each batch straight into them.
    inputs = (net.blobs["data"].data, net.blobs["label"].data if "label" in net.blobs else None)

    try:
        # Every rank's share, before training: the held-out net shares the training net's
        # weights and normalises with the training set's statistics.
        stats = prefetch if prefetch is not None else batches
        with startup_part("data_setup_s"):  # its net's construction: model_setup_s
            evaluator = (
                Evaluator(model, batch, net, ctx.heldout_dir, stats.mean, stats.std, ctx.rank, ctx.world_size)
                if ctx.evaluates
                else None
            )
        for iteration in range(ctx.total_iterations):
            waited = time.perf_counter()
            if prefetch is not None:
                slot = prefetch.wait()
            else:
                batches.into(*inputs)
            input_s = time.perf_counter() - waited  # outside step_s: the step starts with its batch
            t0 = time.perf_counter()
            solver.step(1)
            t4 = time.perf_counter()
            if ramp is not None and ramp.step != iteration + 1:
                raise RuntimeError(
                    f"the learning-rate schedule saw {ramp.step} steps after iteration {iteration}"
                )
            if prefetch is not None:
                prefetch.done(slot)
            if iteration == 0:  # measured, not assumed: what this rank's first step loaded
                ctx.record_measured(blas=blas_loaded())
            barrier_s, comm_s = sync.sync_time()
            ctx.record_iteration(
                iteration,
                samples=batch,
                step_s=t4 - t0,
                compute_s=max(0.0, (t4 - t0) - barrier_s - comm_s),
                comm_s=comm_s,
                loss=float(net.blobs["loss"].data) * loss_scale,
                barrier_s=barrier_s,
                comm_bytes=sync.comm_bytes,
                input_s=input_s,
                lr=ramp.last_rate if ramp is not None else solver_rates(spec)[0],  # this step's rate
                **({"init_sha256": init_sha256} if init_sha256 is not None and iteration == 0 else {}),
            )
            if ctx.eval_due(iteration) and evaluate_due(ctx, evaluator, iteration, comm, MPI):
                break
    finally:
        if prefetch is not None:
            prefetch.close()
    finish(comm, MPI)  # only after success: see parallel.import_mpi

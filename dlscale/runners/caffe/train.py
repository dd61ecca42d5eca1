"""Caffe runner: pycaffe SGD with MPI gradient all-reduce (Caffe-oMPI style), timed per step.

One MPI rank per worker (started by mpirun, or srun under SLURM). Each rank builds the
model's net (``models.py``) in a pycaffe ``SGDSolver``, receives rank 0's initial weights,
and trains on its own part of the shards. ``solver.step(1)`` runs forward, backward, the
all-reduce (solver callback, ``parallel.py``) and the update; the step is split as the
study compares frameworks:
  comm_s    = the all-reduce of every learnable gradient, after a barrier (skew-free)
  compute_s = the rest of the step: forward + backward + update
  step_s    = the whole step, barrier included
The solver's update is Caffe's SGD (v = m v + lr g; w -= v), which equals torch's
(v = m v + g; w -= lr v) at a fixed learning rate; weight decay is 0 in both.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.data.shards import ShardSet
from dlscale.runners.caffe.models import net_prototxt
from dlscale.runners.common import RunContext


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


def preprocess(images: np.ndarray, model: str, mean: float, std: float) -> np.ndarray:
    """uint8 NHWC -> float32 NCHW in [0, 1], normalised except for the autoencoder.

    The same transform as the torch runner, so both train on identical numbers.
    """
    x = images.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    if model != "autoencoder":
        x = (x - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x, dtype=np.float32)


class Batches:
    """Endless mini-batches from this rank's own part of the shards, reshuffled per epoch."""

    def __init__(self, ctx: RunContext):
        shards = ShardSet(ctx.data_dir, verify=True)  # a corrupted shard fails the run, loudly
        self.images, self.labels = shards.load_part(ctx.rank, ctx.world_size)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = int(ctx.spec["batch"])
        self.model = ctx.spec["model"]
        self.rng = np.random.default_rng(int(ctx.spec["seed"]) + ctx.rank)
        self.order = self.rng.permutation(len(self.labels))
        self.position = 0
        if len(self.labels) < self.batch:
            raise ValueError(
                f"rank {ctx.rank} holds {len(self.labels)} samples, fewer than its batch of {self.batch}:"
                " make the dataset larger or the batch smaller"
            )

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        if self.position + self.batch > len(self.order):
            self.order = self.rng.permutation(len(self.labels))
            self.position = 0
        index = np.sort(self.order[self.position : self.position + self.batch])
        self.position += self.batch
        x = preprocess(self.images[index], self.model, self.mean, self.std)
        return x, self.labels[index].astype(np.float32)


def solver_prototxt(net_path: Path, spec: dict[str, Any]) -> str:
    """A fixed-rate SGD solver (no test net, no snapshots) over the net file."""
    display = int(spec["options"].get("log_every", 0))
    return "\n".join(
        [
            f'net: "{net_path}"',
            'type: "SGD"',
            f"base_lr: {float(spec['learning_rate'])!r}",
            'lr_policy: "fixed"',
            f"momentum: {float(spec['momentum'])!r}",
            "weight_decay: 0",
            f"max_iter: {int(spec['warmup']) + int(spec['iterations'])}",
            f"display: {display}",
            "snapshot: 0",
            "snapshot_after_train: false",
            f"random_seed: {int(spec['seed'])}",
            "solver_mode: CPU",
            "",
        ]
    )


def make_solver(spec: dict[str, Any], batch: int, directory: Path) -> Any:
    """A pycaffe SGDSolver for ``spec['model']`` at a per-rank ``batch``; files go in ``directory``."""
    import caffe

    caffe.set_mode_cpu()
    net_path = directory / f"{spec['model']}.prototxt"
    net_path.write_text(net_prototxt(spec["model"], batch))
    solver_path = directory / "solver.prototxt"
    solver_path.write_text(solver_prototxt(net_path, spec))
    return caffe.SGDSolver(str(solver_path))


def feed(net: Any, x: np.ndarray, y: np.ndarray) -> None:
    """Write a mini-batch into the net's Input blobs (the Input layer's forward keeps them)."""
    net.blobs["data"].data[...] = x
    if "label" in net.blobs:
        net.blobs["label"].data[...] = y


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
    batches = Batches(ctx)
    with tempfile.TemporaryDirectory(prefix="caffe-") as tmp:
        solver = make_solver(spec, int(spec["batch"]), Path(tmp))
    net = solver.net
    sync = GradientAllreduce(solver, comm, MPI)
    sync.broadcast_weights()

    for iteration in range(ctx.total_iterations):
        feed(net, *batches.next())
        t0 = time.perf_counter()
        solver.step(1)
        t4 = time.perf_counter()
        barrier_s, comm_s = sync.sync_time()
        ctx.record_iteration(
            iteration,
            samples=int(spec["batch"]),
            step_s=t4 - t0,
            compute_s=max(0.0, (t4 - t0) - barrier_s - comm_s),
            comm_s=comm_s,
            loss=float(net.blobs["loss"].data),
            barrier_s=barrier_s,
            comm_bytes=sync.comm_bytes,
        )
    finish(comm, MPI)  # only after success: see parallel.import_mpi

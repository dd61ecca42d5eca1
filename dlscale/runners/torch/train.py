"""PyTorch runner: data-parallel training with DDP over gloo, timed per iteration.

One synchronous step is split the way the study compares frameworks:
  compute_s = forward + backward under ``DDP.no_sync()`` (no gradient traffic) + update
  comm_s    = all-reduce of the whole flat gradient, started after a barrier so that the
              time is the transfer itself, not waiting for a slower peer (skew-free)
  step_s    = wall time of the whole step, barrier included
DDP's bucketed all-reduce would overlap communication with backward; it is deliberately
not used for the timed step, so that compute and communication can be measured apart, as
Caffe-MPI and TensorFlow's collectives expose them on CPU. DDP still broadcasts rank 0's
initial weights, so every replica starts identical.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import numpy as np

from dlscale.data.shards import IndexBatches, ShardSet
from dlscale.runners.common import RunContext

MNIST_MODELS = ("lenet", "autoencoder")


def versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "numpy": np.__version__, "backend": "gloo"}


class Batches:
    """Endless mini-batches from this rank's own part of the shards, reshuffled per epoch.

    ``input: memory`` (the default): the part is loaded before training; MNIST parts are
    converted to tensors whole, ImageNet-shaped batches one at a time, so memory stays
    bounded by one batch of floats. ``input: pipeline``: nothing is loaded up front; a
    torch DataLoader with ``input_workers`` worker processes reads each batch from the
    shards (memory maps) and converts it, overlapped with training, which is how a real
    job feeds a large set. Both modes draw the same index sequence (same seed), so they
    train on the same batches and only the time the step waits for input differs.
    """

    def __init__(self, ctx: RunContext, torch: Any):
        self.torch = torch
        shards = ShardSet(ctx.data_dir, verify=True)  # a corrupted shard fails the run, loudly
        start, stop = shards.rank_range(ctx.rank, ctx.world_size)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = int(ctx.spec["batch"])
        self.model = ctx.spec["model"]
        self.channels_last = bool(ctx.spec["options"].get("channels_last", True))
        if stop - start < self.batch:
            raise ValueError(
                f"rank {ctx.rank} holds {stop - start} samples, fewer than its batch of {self.batch}:"
                " make the dataset larger or the batch smaller"
            )
        self.indices = IndexBatches(stop - start, self.batch, int(ctx.spec["seed"]) + ctx.rank)
        self.loader: Any = None
        if ctx.spec.get("input", "memory") == "pipeline":
            workers = int(ctx.spec.get("input_workers", 1))
            loader = torch.utils.data.DataLoader(
                _ShardBatches(self, shards, start),
                batch_size=None,  # the sampler yields whole batches of indices
                sampler=self.indices,
                num_workers=workers,
                prefetch_factor=2,
                worker_init_fn=_worker_init,
                # Its own generator: the loader's seed draw must not move the global RNG
                # that initialises the model (both modes start from the same weights).
                generator=torch.Generator().manual_seed(int(ctx.spec["seed"]) + ctx.rank),
            )
            self.loader = iter(loader)  # forks the workers now, before any collective starts
        else:
            self.images, self.labels = shards.load_part(ctx.rank, ctx.world_size)

    def _tensor(self, images: np.ndarray) -> Any:
        torch = self.torch
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)
        if self.model == "autoencoder":
            return x  # the autoencoder reconstructs raw [0, 1] pixels
        x = x.sub_(self.mean).div_(self.std)
        if self.channels_last and self.model not in MNIST_MODELS:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def convert(self, images: np.ndarray, labels: np.ndarray) -> tuple[Any, Any]:
        x = self._tensor(images)
        if self.model == "autoencoder":
            return x, x.flatten(1)
        return x, self.torch.from_numpy(labels.astype(np.int64))

    def next(self) -> tuple[Any, Any]:
        if self.loader is not None:
            return next(self.loader)
        index = next(self.indices)
        return self.convert(self.images[index], self.labels[index])

    def close(self) -> None:
        """Stop the pipeline's workers (nothing to do in memory mode)."""
        if self.loader is not None:
            # What the iterator's __del__ does, done now: workers must not outlive the run.
            self.loader._shutdown_workers()
            self.loader = None


class _ShardBatches:
    """The pipeline's map-style dataset: a batch of rank-local indices -> converted tensors.

    Runs in the DataLoader's workers: each reads its rows through its own memory maps
    (``ShardSet.take``) and converts them exactly as memory mode does.
    """

    def __init__(self, batches: Batches, shards: ShardSet, start: int):
        self.batches, self.shards, self.start = batches, shards, start

    def __getitem__(self, index: np.ndarray) -> tuple[Any, Any]:
        images, labels = self.shards.take(self.start + index)
        return self.batches.convert(images, labels)


def _worker_init(worker_id: int) -> None:
    import tempfile

    import torch

    torch.set_num_threads(1)  # a worker converts batches; the rank's threads train
    # A worker hands each batch's tensors over by passing file descriptors through a Unix
    # socket that multiprocessing creates under TMPDIR, and socket paths are limited to 107
    # bytes. The launcher points TMPDIR into the run's own directory, which on a cluster
    # (or under pytest) is often too deep: the socket cannot be bound, and the rank waits
    # for its batch forever. Such a worker keeps its few bytes of sockets in /tmp instead.
    if len(tempfile.gettempdir()) > 64 and os.access("/tmp", os.W_OK):
        tempfile.tempdir = "/tmp"


#: glibc mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def tune_allocator(mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 31) -> bool:
    """Let glibc's malloc keep and reuse freed memory instead of returning it every step.

    torch's CPU tensors come from malloc. By default glibc serves each large block (an
    activation, a gradient set to None each step, a batch) with a fresh mmap and gives
    it back on free, or trims the heap top, so the next step page-faults it all in
    again: 100-1,200 page faults per LeNet step, a cost that also depended on what the
    process had allocated before (the 0.954 of benchmarks/harness_overhead: whichever
    arm ran after a large free paid for it). With fixed, high thresholds the blocks stay
    mapped and are reused: steady steps with about no page faults. Memory stays at the
    run's peak, as a training process's does anyway. Returns False where this is not
    glibc (then it does nothing).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def rendezvous(ctx: RunContext) -> str:
    """Where the ranks meet: a file in the run's work dir on one host, TCP across nodes.

    torch's TCPStore listens on every interface, with no way to bind it to loopback; on
    one host a FileStore needs no socket at all, so local runs stay off the network.
    """
    where = ctx.placement
    if where.launcher == "local":
        return f"file://{(ctx.writer.path.parent / 'torch-rendezvous').resolve()}"
    return f"tcp://{where.master_addr}:{where.master_port}"


def train(ctx: RunContext) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from dlscale.runners.torch.models import build_model

    spec = ctx.spec
    tune_allocator()
    torch.set_num_threads(int(spec["threads_per_rank"]))
    torch.manual_seed(int(spec["seed"]))
    distributed = ctx.world_size > 1
    batches = Batches(ctx, torch)

    model = build_model(spec["model"])
    if spec["options"].get("channels_last", True) and spec["model"] not in MNIST_MODELS:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    # One flat gradient buffer; every parameter's .grad is a view into it, so the
    # all-reduce moves the whole gradient in one call with no packing copies. A single
    # rank has nothing to reduce and keeps autograd's own gradients (set to None each
    # step): zeroing the buffer and accumulating into it cost 5-8% of an AutoEncoder
    # step (benchmarks/harness_overhead.py).
    flat_grad = torch.zeros(sum(p.numel() for p in params) if distributed else 0)
    offset = 0
    for p in params if distributed else ():
        # Same strides as the parameter (channels_last weights too), as autograd wants.
        p.grad = flat_grad.as_strided(p.size(), p.stride(), offset)
        offset += p.numel()

    if distributed:
        where = ctx.placement
        dist.init_process_group(
            "gloo",
            init_method=rendezvous(ctx),
            rank=where.rank,
            world_size=where.world_size,
            timeout=timedelta(seconds=int(spec["options"].get("timeout_s", 300))),
        )
        ddp = DistributedDataParallel(model, forward_sync_buffers=False)
        forward, no_sync = ddp, ddp.no_sync
    else:
        forward, no_sync = model, None

    if spec["model"] == "autoencoder":
        loss_fn = torch.nn.BCEWithLogitsLoss()
    else:
        loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(params, lr=float(spec["learning_rate"]), momentum=float(spec["momentum"]))
    model.train()

    try:
        for iteration in range(ctx.total_iterations):
            waited = time.perf_counter()
            x, y = batches.next()
            input_s = time.perf_counter() - waited  # outside step_s: the step starts with its batch
            if distributed:
                flat_grad.zero_()
            else:
                optimizer.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            if no_sync is not None:
                with no_sync():
                    loss = loss_fn(forward(x), y)
                    loss.backward()
            else:
                loss = loss_fn(forward(x), y)
                loss.backward()
            t1 = time.perf_counter()
            if distributed:
                dist.barrier()
                t2 = time.perf_counter()
                dist.all_reduce(flat_grad)
                flat_grad.div_(ctx.world_size)
                t3 = time.perf_counter()
            else:
                t2 = t3 = t1
            optimizer.step()
            t4 = time.perf_counter()
            ctx.record_iteration(
                iteration,
                samples=int(spec["batch"]),
                step_s=t4 - t0,
                compute_s=(t1 - t0) + (t4 - t3),
                comm_s=(t3 - t2) if distributed else 0.0,
                loss=float(loss.detach()),
                barrier_s=t2 - t1,
                comm_bytes=flat_grad.numel() * flat_grad.element_size() if distributed else 0,
                input_s=input_s,
            )
        if distributed:
            dist.barrier()  # nobody tears gloo down while a peer still talks to it
    finally:
        batches.close()
        if distributed and dist.is_initialized():
            dist.destroy_process_group()

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

import time
from datetime import timedelta
from typing import Any

import numpy as np

from dlscale.data.shards import ShardSet
from dlscale.runners.common import RunContext

MNIST_MODELS = ("lenet", "autoencoder")


def versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "numpy": np.__version__, "backend": "gloo"}


class Batches:
    """Endless mini-batches from this rank's own part of the shards, reshuffled per epoch.

    MNIST parts are small and converted to tensors once; ImageNet-shaped parts are
    converted batch by batch, so memory stays bounded by one batch of floats.
    """

    def __init__(self, ctx: RunContext, torch: Any):
        self.torch = torch
        shards = ShardSet(ctx.data_dir, verify=True)  # a corrupted shard fails the run, loudly
        images, labels = shards.load_part(ctx.rank, ctx.world_size)
        self.images, self.labels = images, labels
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = int(ctx.spec["batch"])
        self.model = ctx.spec["model"]
        self.channels_last = bool(ctx.spec["options"].get("channels_last", True))
        self.rng = np.random.default_rng(int(ctx.spec["seed"]) + ctx.rank)
        self.order = self.rng.permutation(len(labels))
        self.position = 0
        if len(labels) < self.batch:
            raise ValueError(
                f"rank {ctx.rank} holds {len(labels)} samples, fewer than its batch of {self.batch}:"
                " make the dataset larger or the batch smaller"
            )

    def _tensor(self, images: np.ndarray) -> Any:
        torch = self.torch
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)
        if self.model == "autoencoder":
            return x  # the autoencoder reconstructs raw [0, 1] pixels
        x = x.sub_(self.mean).div_(self.std)
        if self.channels_last and self.model not in MNIST_MODELS:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def next(self) -> tuple[Any, Any]:
        if self.position + self.batch > len(self.order):
            self.order = self.rng.permutation(len(self.labels))
            self.position = 0
        index = np.sort(self.order[self.position : self.position + self.batch])
        self.position += self.batch
        x = self._tensor(self.images[index])
        if self.model == "autoencoder":
            return x, x.flatten(1)
        return x, self.torch.from_numpy(self.labels[index].astype(np.int64))


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
    torch.set_num_threads(int(spec["threads_per_rank"]))
    torch.manual_seed(int(spec["seed"]))
    distributed = ctx.world_size > 1
    batches = Batches(ctx, torch)

    model = build_model(spec["model"])
    if spec["options"].get("channels_last", True) and spec["model"] not in MNIST_MODELS:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    # One flat gradient buffer; every parameter's .grad is a view into it, so the
    # all-reduce moves the whole gradient in one call with no packing copies.
    flat_grad = torch.zeros(sum(p.numel() for p in params))
    offset = 0
    for p in params:
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
            x, y = batches.next()
            flat_grad.zero_()
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
            )
        if distributed:
            dist.barrier()  # nobody tears gloo down while a peer still talks to it
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()

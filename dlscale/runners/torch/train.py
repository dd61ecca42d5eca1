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

Between steps, where ``RunContext.eval_due``, the ranks measure held-out quality, each
its share, rank 0 recording the sum (``dlscale.runners.torch.evaluate``), outside every
timed step; with a quality target the
ranks stop together after the first evaluation that meets it. ``init: shared`` starts from
``dlscale.data.initweights`` and trains on slices of one global batch sequence; torch's SGD
(v = m v + g; w -= lr v) and mean losses are the reference semantics as they are.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import numpy as np

from dlscale.runners.common import RunContext, startup_part
from dlscale.runners.torch import settings as torch_settings
from dlscale.runners.torch.data import Batches
from dlscale.runners.torch.evaluate import HeldOut, evaluate_and_decide
from dlscale.runspec import RunSpec


def versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "numpy": np.__version__, "backend": "gloo"}


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


def rendezvous(ctx: RunContext, dist: Any, timeout: timedelta) -> Any:
    """Where the ranks meet: a file in the run's work dir on one host, TCP across nodes.

    torch's TCPStore listens on every interface, with no way to bind it to loopback; on
    one host a FileStore needs no socket at all, so local runs stay off the network. The
    store is made here, not from an init_method URL, so that the ranks can still use it
    after the process group is gone (``leave``).
    """
    where = ctx.placement
    if where.launcher == "local":
        path = (ctx.writer.path.parent / "torch-rendezvous").resolve()
        return dist.FileStore(str(path), where.world_size)
    return dist.TCPStore(
        where.master_addr, where.master_port, where.world_size, is_master=where.rank == 0, timeout=timeout
    )


def exits_without_teardown(spec: RunSpec) -> bool:
    """Every rank exits without the interpreter's teardown once its end is written
    (``common.exit_skipping_teardown``): gloo's native destructors aborted there after a
    whole 2-node run (docs/teardown.md), and ``leave`` has ordered the ranks' exit."""
    return True


#: Longest wait of rank 0 (the TCPStore's server) for the others to have left, after a
#: run whose every step completed; past it rank 0 exits anyway (the run's events are whole).
LEAVE_TIMEOUT_S = 30.0


def leave(store: Any, rank: int, world_size: int) -> None:
    """Rank 0 goes last: it hosts the TCPStore, and a rank still tearing its process group
    down when the store's server vanished aborted in C++ ("terminate called without an
    active exception", seen on 4 SLURM nodes after every iteration had completed)."""
    left = store.add("dlscale/left", 1)
    if rank != 0:
        return
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    while left < world_size and time.monotonic() < deadline:
        time.sleep(0.01)
        left = store.add("dlscale/left", 0)


def peers(ctx: RunContext) -> list[tuple[str, str]]:
    """None besides the master: the ranks meet at rank 0's store (``rendezvous``) and gloo
    exchanges their addresses through it."""
    return []


def lay_out(torch: Any, model: Any, channels_last: bool) -> Any:
    """The model in the run's memory format (``settings.channels_last``, the same as its
    batches'): the one place the runner converts it, so a test can measure what a run used."""
    return model.to(memory_format=torch.channels_last) if channels_last else model


def train(ctx: RunContext) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from dlscale.runners.torch.models import build_model, load_shared

    spec = ctx.spec
    tune_allocator()
    torch.set_num_threads(spec.threads_per_rank)
    torch_settings.apply(torch, spec)  # the tuned engine (dlscale.runners.torch.settings)
    torch.manual_seed(spec.seed)
    distributed = ctx.world_size > 1
    with startup_part("data_setup_s"):
        batches = Batches(ctx, torch)
        # Every rank's share of the held-out set, prepared before the ranks meet (DDP's
        # first broadcast), so that no rank's first step waits for it.
        heldout = HeldOut(ctx, batches, torch, ctx.rank, ctx.world_size) if ctx.evaluates else None

    with startup_part("model_setup_s"):
        model = build_model(spec.model)
        # init: shared: the parity check's weights, the same bytes as every other framework's.
        init_sha256 = load_shared(model, spec.model, spec.seed) if spec.init == "shared" else None
        model = lay_out(torch, model, batches.channels_last)
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
        timeout = timedelta(seconds=spec.options["timeout_s"])
        with startup_part("rendezvous_s"):  # the store and gloo's group
            store = rendezvous(ctx, dist, timeout)
            dist.init_process_group(
                "gloo", store=store, rank=where.rank, world_size=where.world_size, timeout=timeout
            )
        # The framework's: DDP's constructor imports torch._dynamo (1.1-1.5 s, docs/wall-time.md;
        # torch.optim's constructor would otherwise) before it broadcasts the weights (milliseconds).
        with startup_part("model_setup_s"):
            ddp = DistributedDataParallel(model, forward_sync_buffers=False)
        forward, no_sync = ddp, ddp.no_sync
    else:
        forward, no_sync = model, None

    if spec.model == "autoencoder":
        loss_fn = torch.nn.BCEWithLogitsLoss()
    else:
        loss_fn = torch.nn.CrossEntropyLoss()
    # The rate of the study's rule at this run's global batch (RunSpec.learning_rate_at);
    # during a warm-up ramp it is set before every step. The framework's start-up: torch.optim's
    # constructor imports torch._dynamo (~1.1 s, once a process) where DDP's has not already.
    with startup_part("model_setup_s"):
        optimizer = torch.optim.SGD(params, lr=spec.learning_rate_at(0), momentum=spec.momentum)
    ramp = spec.warmup_ramp
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
            if iteration <= ramp:  # the ramp, and the step that reaches the target
                for group in optimizer.param_groups:
                    group["lr"] = spec.learning_rate_at(iteration)
            optimizer.step()
            t4 = time.perf_counter()
            ctx.record_iteration(
                iteration,
                samples=spec.batch,
                step_s=t4 - t0,
                compute_s=(t1 - t0) + (t4 - t3),
                comm_s=(t3 - t2) if distributed else 0.0,
                loss=float(loss.detach()),
                barrier_s=t2 - t1,
                comm_bytes=flat_grad.numel() * flat_grad.element_size() if distributed else 0,
                input_s=input_s,
                lr=optimizer.param_groups[0]["lr"],  # the rate this step used
                **({"init_sha256": init_sha256} if init_sha256 and iteration == 0 else {}),
            )
            if ctx.eval_due(iteration) and evaluate_and_decide(
                ctx, iteration, heldout, model, torch, dist if distributed else None
            ):
                break  # the quality target is met: every rank stops here
        if distributed:
            dist.barrier()  # nobody tears gloo down while a peer still talks to it
            dist.destroy_process_group()
            leave(store, ctx.placement.rank, ctx.world_size)
    finally:
        batches.close()
        if distributed and dist.is_initialized():
            dist.destroy_process_group()

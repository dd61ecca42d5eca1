"""JAX runner: data-parallel training with jitted steps and an explicit all-reduce over gloo.

One synchronous step is split the way the study compares frameworks, as the torch runner's:
  compute_s = the jitted forward + backward (this rank's gradient, no collective) + the
              jitted update (torch's SGD with momentum: v = m v + g; w -= lr v)
  comm_s    = the jitted all-reduce of the whole flat gradient (a ``psum`` in a
              ``shard_map`` over the processes, divided by the world), started after a
              one-float ``psum`` barrier so that it is the transfer, not a wait for a
              slower peer (``barrier_s``)
  step_s    = wall time of the whole step, barrier included
Each part is waited for (``block_until_ready``) before the clock is read: JAX dispatches
asynchronously. Every function is compiled before the loop (ahead of time for the step's,
and the collectives and the evaluation's forward pass called once), so no timed step, the
first included, pays XLA's compiler or gloo's first connections; what they cost is recorded
in run_start's ``measured`` (``compile_s``, ``first_collective_s``, ``distributed_init_s``).

The parameters are one flat float32 vector (``models.Layout``), so the gradient is one
buffer and one all-reduce, like torch's flat gradient. ``init: shared`` starts from
``dlscale.data.initweights`` (in this runner's channels-last layout) and trains on slices of
one global batch sequence; the rate of every step is ``RunSpec.learning_rate_at`` (the
study's rule, warm-up ramp included), passed to the jitted update as an argument.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlscale.runners.common import RunContext, startup_part
from dlscale.runners.jax import distributed as dist
from dlscale.runners.jax.data import Batches
from dlscale.runners.jax.evaluate import HeldOut, evaluate_and_decide


def versions() -> dict[str, str]:
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__, "backend": "gloo"}


def peers(ctx: RunContext) -> list[tuple[str, str]]:
    """None besides the master: every rank registers with rank 0's coordination service,
    and gloo exchanges the ranks' addresses through it."""
    return []


def loss_function(model: str, jnp: Any, jax: Any) -> Any:
    """The model's mean loss from logits: torch's CrossEntropyLoss, or BCEWithLogitsLoss
    (the autoencoder's), in torch's numerically stable form."""
    if model == "autoencoder":

        def bce(z: Any, y: Any) -> Any:
            return jnp.mean(jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z))))

        return bce

    def cross_entropy(z: Any, y: Any) -> Any:
        logp = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    return cross_entropy


def train(ctx: RunContext) -> None:
    spec = ctx.spec
    distributed = ctx.world_size > 1
    fault = dist.injected_fault()
    if fault is not None and fault.rank == ctx.rank:
        ctx.warnings.append(fault.warning)
    import jax

    with startup_part("rendezvous_s"):
        measured: dict[str, float] = dist.connect(ctx, jax) if distributed else {}
    import jax.numpy as jnp

    from dlscale.runners.jax.models import framework_init, load_shared, model

    layout, apply = model(spec.model)
    with startup_part("data_setup_s"):
        batches = Batches(ctx)
    device = jax.local_devices()[0]
    init_sha256 = None
    if spec.init == "shared":  # the parity check's weights, the same bytes as every other framework's
        flat, init_sha256 = load_shared(spec.model, spec.seed)
    else:
        flat = framework_init(spec.model, spec.seed)
    params = jax.device_put(flat, device)
    velocity = jax.device_put(np.zeros_like(flat), device)
    loss_of_logits = loss_function(spec.model, jnp, jax)
    momentum = np.float32(spec.momentum)

    def forward(p: Any, x: Any) -> Any:  # inference: no dropout
        return apply(layout.unflatten(p), x, None)

    def gradient(p: Any, x: Any, y: Any, step: Any) -> tuple[Any, Any]:
        key = jax.random.fold_in(jax.random.key(spec.seed + ctx.rank), step)  # dropout's (AlexNet)
        loss, grad = jax.value_and_grad(lambda q: loss_of_logits(apply(layout.unflatten(q), x, key), y))(p)
        return loss, grad.reshape(1, -1)

    def update(p: Any, v: Any, g: Any, lr: Any) -> tuple[Any, Any]:
        v = momentum * v + g.reshape(-1)
        return p - lr * v, v

    started = time.perf_counter()
    with startup_part("model_setup_s"):  # XLA compiles the steps
        shape = (spec.batch, *batches.images.shape[1:])  # a batch of zeros: the sequence is untouched
        zeros = np.zeros(shape, np.float32)
        x0, y0 = (
            jax.device_put(a, device) for a in (zeros, batches.target(zeros, np.zeros(spec.batch, np.int64)))
        )
        grad_step = jax.jit(gradient).lower(params, x0, y0, np.int32(0)).compile()
        _, g0 = grad_step(params, x0, y0, np.int32(0))
        lr0 = np.float32(spec.learning_rate_at(0))
        update_step = jax.jit(update).lower(params, velocity, g0, lr0).compile()
        measured["compile_s"] = time.perf_counter() - started
    collectives = None
    if distributed:
        started = time.perf_counter()
        with startup_part("rendezvous_s"):
            collectives = dist.Collectives(jax, layout.size)
            collectives.barrier()
            collectives.mean(g0).block_until_ready()
        measured["first_collective_s"] = time.perf_counter() - started
    heldout = None
    if ctx.evaluates:  # every rank's share
        with startup_part("data_setup_s"):
            heldout = HeldOut(ctx, batches, forward, jax, ctx.rank, ctx.world_size)
        with startup_part("model_setup_s"):
            measured["eval_compile_s"] = heldout.compile(params)
    if ctx.rank == 0:  # rank 0's start-up, in run_start's measured (inside its startup_s)
        ctx.record_measured(**{k: round(v, 4) for k, v in measured.items()})
    comm_bytes = layout.size * 4 if distributed else 0

    for iteration in range(ctx.total_iterations):
        waited = time.perf_counter()
        x, y = (jax.device_put(a, device) for a in batches.next())
        x.block_until_ready()
        input_s = time.perf_counter() - waited  # outside step_s: the step starts with its batch
        lr = spec.learning_rate_at(iteration)
        t0 = time.perf_counter()
        loss, grad = grad_step(params, x, y, np.int32(iteration))
        grad.block_until_ready()
        t1 = time.perf_counter()
        if collectives is not None:
            if fault is not None and fault.applies(ctx.rank, iteration):
                grad = (grad * fault.factor).block_until_ready()
            collectives.barrier()
            t2 = time.perf_counter()
            grad = collectives.mean(grad)
            grad.block_until_ready()
            t3 = time.perf_counter()
        else:
            t2 = t3 = t1
        params, velocity = update_step(params, velocity, grad, np.float32(lr))
        params.block_until_ready()
        t4 = time.perf_counter()
        ctx.record_iteration(
            iteration,
            samples=spec.batch,
            step_s=t4 - t0,
            compute_s=(t1 - t0) + (t4 - t3),
            comm_s=(t3 - t2) if distributed else 0.0,
            loss=float(loss),
            barrier_s=t2 - t1,
            comm_bytes=comm_bytes,
            input_s=input_s,
            lr=lr,  # the rate this step used
            **({"init_sha256": init_sha256} if init_sha256 and iteration == 0 else {}),
        )
        if ctx.eval_due(iteration) and evaluate_and_decide(ctx, iteration, heldout, params, collectives):
            break  # the quality target is met: every rank stops here
    if collectives is not None:
        collectives.barrier()  # nobody leaves while a peer still talks to it
        jax.distributed.shutdown()

"""MultiWorkerMirroredStrategy mode: ring all-reduce between n x p worker processes.

Every worker trains its own replica in a custom loop of three tf.functions and reports
its own iterations (per-rank samples), the way the torch runner does (a single rank runs
one fused tf.function: forward, backward and update, all of it compute_s):
  compute_s = ``compute`` (forward + backward on the local replica, gradient flattened)
              + ``apply`` (torch's SGD-momentum update of the local variables)
  comm_s    = ``allreduce``: MWMS's ring all-reduce (``CommunicationImplementation.RING``)
              of the whole flat gradient, started after a barrier (a one-float
              all-reduce), so it is the transfer itself, not waiting for a slower peer
  step_s    = the whole step, barrier included
  input_s   = waiting for the step's batch from the feed (``batches.py``: memory, or a
              tf.data pipeline under ``input: pipeline``), before the step starts
The variables are the worker's own (not MirroredVariables): keeping them out of the
strategy's scope is what lets the local step run with no collective in it, so compute and
communication are measured apart. Replicas stay identical because the initial weights are
broadcast from worker 0 (an all-reduce with zeros elsewhere) and every worker applies the
same averaged gradient. That broadcast, the tracing of every function (by input signature,
without running a step) and a first all-reduce (collective group set-up) happen before the
loop, so no timed or warm-up iteration pays for them. ``setup_s`` on the first iteration
event is the process's start-up (connection, tracing, broadcast) until its first step,
less its timed parts (TensorFlow's import: ``import_s``); the launcher's ``startup_s`` is
the whole run's.

Held-out quality (``evaluate.py``): after each iteration the spec's ``eval_due`` names,
every worker evaluates its replica on its share of the held-out set and a float64 sum
all-reduce adds the shares, between steps (nothing of it is timed in any iteration);
rank 0 records the whole set's metric; with a quality target it shares its decision to stop through the same one-float all-reduce
as the barrier, so every rank stops after the same iteration.

A dead peer does not hang a worker: collectives carry ``timeout_seconds`` (the
``collective_timeout_s`` option), and MWMS's own health check aborts collectives when a
peer stops answering; locally, the launcher also stops the run as soon as a process dies.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dlscale import quality
from dlscale.runners.common import RunContext, startup_seconds
from dlscale.runners.tensorflow import batches as batches_mod
from dlscale.runners.tensorflow import cluster as cluster_mod
from dlscale.runners.tensorflow import sharedinit, steps
from dlscale.runners.tensorflow.evaluate import Evaluator


class CollectiveFailed(RuntimeError):
    """A gradient all-reduce failed: a peer died, or hung past ``collective_timeout_s``."""

    def __init__(self, iteration: int, err: Exception):
        # TensorFlow's message is a graph traceback; the error class says what happened
        # (UnavailableError: a peer is gone or stopped its heartbeats; DeadlineExceededError:
        # the collective timeout) and the worker's log holds the details.
        super().__init__(
            f"all-reduce failed at iteration {iteration + 1} with {type(err).__name__}:"
            " a peer died or stopped answering (collective timeout / heartbeat); see run.log"
        )


def make_strategy(tf: Any, ctx: RunContext) -> Any:
    """The MWMS of this worker, its TF_CONFIG built from the plan's cluster or the placement."""
    cluster = cluster_mod.cluster_of(os.environ, ctx.placement)
    os.environ["TF_CONFIG"] = json.dumps(cluster_mod.tf_config(cluster, "worker", ctx.rank))
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=ctx.spec.options["collective_timeout_s"],
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def train(ctx: RunContext, tf: Any) -> None:
    from dlscale.runners.tensorflow.models import build_model

    spec = ctx.spec
    world = ctx.world_size
    distributed = world > 1
    strategy = make_strategy(tf, ctx) if distributed else None
    tf.keras.utils.set_random_seed(spec.seed)
    batch = spec.batch
    batches = batches_mod.feed(tf, spec, str(ctx.data_dir), ctx.rank, world)

    model = build_model(spec.model, batches.image_shape)
    # init: shared: every rank loads the one seeded initialisation (then broadcast anyway).
    init_sha256 = sharedinit.load(model, spec.model, spec.seed) if spec.init == "shared" else None
    variables = list(model.trainable_variables)
    sgd = steps.SGD(tf, variables, spec.learning_rate_at(0), spec.momentum)
    ramp = spec.warmup_ramp  # steps whose rate the warm-up sets before they run
    loss_of = steps.loss_function(tf, spec.model)
    size = sum(steps.size_of(v.shape) for v in variables)
    x_spec = tf.TensorSpec([batch, *batches.image_shape], tf.float32)
    y_spec = tf.TensorSpec([batch], tf.int64)
    flat_spec = tf.TensorSpec([size], tf.float32)

    @tf.function(input_signature=[x_spec, y_spec])
    def compute(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_of(model(x, training=True), x, y)
        return loss, steps.flatten(tf, tape.gradient(loss, variables))

    @tf.function(input_signature=[flat_spec])
    def apply(flat_sum: Any) -> None:
        sgd.apply(steps.unflatten(tf, flat_sum / float(world), variables))

    @tf.function(input_signature=[x_spec, y_spec])
    def fused(x: Any, y: Any) -> Any:
        # One rank has nothing to synchronise: forward, backward and update in one graph,
        # with no flat gradient and no return to Python between them, as a plain training
        # loop would run (the split step cost 5-15% of a LeNet step: benchmarks/).
        with tf.GradientTape() as tape:
            loss = loss_of(model(x, training=True), x, y)
        sgd.apply(tape.gradient(loss, variables))
        return loss

    if distributed:
        compute.get_concrete_function()
        apply.get_concrete_function()
    else:
        fused.get_concrete_function()
    if distributed:
        allreduce = steps.sum_all_reduce(tf, strategy, flat_spec)
        barrier_fn = steps.sum_all_reduce(tf, strategy, tf.TensorSpec([], tf.float32))
        # Broadcast worker 0's initial weights; it also sets the collective group up.
        mine = steps.flatten(tf, [v.value if hasattr(v, "value") else v for v in variables])
        weights = allreduce(mine if ctx.rank == 0 else tf.zeros_like(mine))
        for var, value in zip(variables, steps.unflatten(tf, weights, variables), strict=True):
            var.assign(value)
        barrier_fn(tf.constant(0.0))
        # The held-out shares' sums (top-k hits, squared errors), added in float64: traced
        # here with the others, run only between steps.
        sums_spec = tf.TensorSpec([len(quality.metrics_of(spec.model))], tf.float64)
        shares_fn = steps.sum_all_reduce(tf, strategy, sums_spec)
        shares_fn.get_concrete_function()

        def add_shares(sums: Any) -> Any:
            return strategy.experimental_local_results(shares_fn(tf.constant(sums)))[0].numpy()
    else:
        add_shares = None
    # The rank's start to its first step: connect, trace, broadcast (its import: import_s)
    setup_s = time.time() - ctx.started - sum(startup_seconds().values())

    comm_bytes = size * 4 if distributed else 0
    last = ctx.total_iterations - 1
    targeted = spec.quality_target is not None
    evaluate = Evaluator(
        tf, ctx, model, batches.image_shape, batches.mean, batches.std,
        rank=ctx.rank, world=world, add_shares=add_shares,
    )  # fmt: skip

    def stops(iteration: int) -> bool:
        """Evaluate (every worker its share) after ``iteration``; whether every rank stops.

        Rank 0 alone decides, and with a target its decision reaches every rank through
        a sum all-reduce of one float (1 from rank 0 when the target is met, 0 elsewhere),
        outside every timed step: all ranks stop at the same iteration."""
        try:
            met = evaluate(iteration)
        except tf.errors.OpError as err:  # the shares' all-reduce
            raise CollectiveFailed(iteration, err) from None
        if not (targeted and distributed and iteration < last):
            return met
        try:
            flag = barrier_fn(tf.constant(1.0 if met else 0.0))
        except tf.errors.OpError as err:
            raise CollectiveFailed(iteration, err) from None
        return float(strategy.experimental_local_results(flag)[0]) > 0.5

    rate = float(sgd.lr.numpy())  # read back from the variable after each set, not every step
    try:
        for iteration in range(ctx.total_iterations):
            waited = time.perf_counter()
            x, y = batches.next()
            input_s = time.perf_counter() - waited  # outside step_s: the step starts with its batch
            if iteration <= ramp:  # the ramp, and the step that reaches the target
                sgd.set_rate(spec.learning_rate_at(iteration))
                rate = float(sgd.lr.numpy())
            t0 = time.perf_counter()
            if not distributed:
                loss_value = float(fused(x, y))
                t1 = t2 = t3 = t4 = time.perf_counter()
            else:
                loss, flat = compute(x, y)
                loss_value = float(loss)
                t1 = time.perf_counter()
                try:
                    barrier_fn(tf.constant(0.0))
                    t2 = time.perf_counter()
                    flat = allreduce(flat)
                except tf.errors.OpError as err:
                    raise CollectiveFailed(iteration, err) from None
                t3 = time.perf_counter()
                apply(flat)
                t4 = time.perf_counter()
            extra: dict[str, Any] = {"setup_s": setup_s} if iteration == 0 else {}
            if iteration == 0 and init_sha256 is not None:
                extra["init_sha256"] = init_sha256
            if iteration == last or (targeted and ctx.eval_due(iteration)):
                # Evidence that the replicas stayed identical: equal on every worker (also
                # where a target run may stop: each of its evaluations).
                extra["weights_sum"] = float(
                    sum(tf.reduce_sum(tf.cast(v.value, tf.float64)) for v in variables)
                )
            ctx.record_iteration(
                iteration,
                samples=batch,
                step_s=t4 - t0,
                compute_s=(t1 - t0) + (t4 - t3),
                comm_s=(t3 - t2) if distributed else 0.0,
                loss=loss_value,
                barrier_s=t2 - t1,
                comm_bytes=comm_bytes,
                input_s=input_s,
                lr=rate,  # the rate this step used, as the variable holds it
                **extra,
            )
            if ctx.eval_due(iteration) and stops(iteration):
                break
        if distributed:
            barrier_fn(tf.constant(0.0))  # nobody leaves while a peer still talks to it
    finally:
        batches.close()

"""ParameterServerStrategy mode: a chief drives workers; variables live on parameter servers.

How TensorFlow distributed training ran when the study was made (2018): variables are
placed round-robin on the parameter servers, every worker pulls them, computes the
gradient of its own mini-batch and pushes it back; the update runs on the server. Updates
are asynchronous, as they were by default then. The chief (rank 0 of the plan, the
``ClusterCoordinator``) runs the loop, and one iteration is one mini-batch per worker:
it schedules ``workers`` step closures and joins them, so an iteration ends when the
slowest worker's push has landed, like a synchronous step, and counts ``workers x batch``
samples (the chief reports the GLOBAL samples; the plan says 1 reporting rank).

The chief feeds the data: each closure carries its uint8 batch (part ``i`` of the shard
set for the ``i``-th closure), the way ``feed_dict`` fed workers in 2018; it travels
within the step, so it is part of the exposed communication, not of ``comm_s``. The
batches come from memory or, under ``input: pipeline``, from one tf.data pipeline per part
on the chief (``batches.py``); ``input_s`` is the chief's wait for every worker's batch,
before the step.

Per iteration, measured apart with every worker idle at the start of each (skew-free):
  step_s    = schedule + join of the ``workers`` step closures
  comm_s    = schedule + join of ``workers`` push/pull closures: each worker reads every
              variable from the servers and writes a same-sized update back (scaled by a
              zero passed in as an input, so nothing is folded away and nothing changes):
              the step's pull and push without its compute
  compute_s = the same step (forward, backward, momentum update) of a local replica on the
              chief, no server involved: the compute of a worker on identical hardware
The chief's extra closures and local step make an iteration cost about two steps; only
the step closures count in ``step_s``. A first push/pull round before the loop opens every
connection, so set-up is not timed.

The learning rate, as a rule: each worker applies its own update to the shared variables,
so one iteration applies ``workers`` updates where a synchronous step applies one averaged
gradient, and the effective rate grew with the workers (LeNet at 0.01 diverged with 4).
Each worker's update is therefore scaled by ``1 / workers`` (``update_scale``: its SGD
runs at ``learning_rate / workers``, momentum unchanged), recorded on every iteration event
as ``update_scale``; the study's ``learning_rate`` means the same in both modes and no
config divides it by hand. The updates stay asynchronous (by design: ``dlscale.analysis.parity``).

Held-out quality: the chief evaluates the variables on the servers (``evaluate.py``)
after the iterations the spec asks for, between iterations; with a quality target the loop
stops at the first evaluation that meets it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dlscale.runners.common import RunContext, startup_seconds
from dlscale.runners.tensorflow import batches as batches_mod
from dlscale.runners.tensorflow import cluster as cluster_mod
from dlscale.runners.tensorflow import sharedinit, steps
from dlscale.runners.tensorflow.evaluate import Evaluator
from dlscale.runspec import RunSpec


def make_coordinator(tf: Any) -> tuple[Any, Any, dict[str, list[str]]]:
    """The strategy and coordinator of the chief, from the plan's cluster spec."""
    if not os.environ.get(cluster_mod.ENV_CLUSTER):
        raise RuntimeError(
            "tensorflow.strategy ps needs the plan's cluster spec (DLSCALE_TF_CLUSTER): start it with"
            " python -m dlscale.launch (under SLURM its srun step runs dlscale.runners.tensorflow.slurm_ps)"
        )
    cluster = json.loads(os.environ[cluster_mod.ENV_CLUSTER])
    os.environ["TF_CONFIG"] = json.dumps(cluster_mod.tf_config(cluster, "chief", 0))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    return strategy, tf.distribute.coordinator.ClusterCoordinator(strategy), cluster


def update_scale(workers: int) -> float:
    """What each worker's update is scaled by: 1 / workers (see the module's docstring)."""
    return 1.0 / workers


class Replica:
    """A model, its variables, its SGD and its loss, built under whatever scope is active."""

    def __init__(self, tf: Any, spec: RunSpec, shape: tuple[int, ...], learning_rate: float):
        from dlscale.runners.tensorflow.models import build_model

        self.model = build_model(spec.model, shape)
        self.variables = list(self.model.trainable_variables)
        self.sgd = steps.SGD(tf, self.variables, learning_rate, spec.momentum)
        self.loss_of = steps.loss_function(tf, spec.model)
        self.size = sum(steps.size_of(v.shape) for v in self.variables)


def train(ctx: RunContext, tf: Any) -> None:
    spec = ctx.spec
    done = Path(ctx.writer.path).parent / cluster_mod.DONE_FILE
    try:
        _train(ctx, tf, spec)
    finally:
        done.touch()  # the servers may leave now


def _train(ctx: RunContext, tf: Any, spec: RunSpec) -> None:
    strategy, coordinator, cluster = make_coordinator(tf)
    workers = len(cluster["worker"])
    batch = spec.batch
    # One feed per worker, uint8 (the worker normalises): from memory, or one tf.data
    # pipeline per part under input: pipeline, all on the chief, which feeds the workers.
    parts = [
        batches_mod.feed(tf, spec, str(ctx.data_dir), i, workers, normalised=False) for i in range(workers)
    ]
    mean, std, model_name = parts[0].mean, parts[0].std, spec.model
    tf.keras.utils.set_random_seed(spec.seed)
    scale = update_scale(workers)
    worker_lr = spec.learning_rate_at(0) * scale  # each worker's own update, scaled: the rule above
    ramp = spec.warmup_ramp  # steps whose rate the warm-up sets before they run
    with strategy.scope():
        shared = Replica(tf, spec, parts[0].image_shape, worker_lr)  # variables on the parameter servers
    local = Replica(tf, spec, parts[0].image_shape, worker_lr)  # the chief's own replica, for compute_s
    init_sha256 = None
    if spec.init == "shared":  # the servers' variables start from the one seeded initialisation
        init_sha256 = sharedinit.load(shared.model, spec.model, spec.seed)
        sharedinit.load(local.model, spec.model, spec.seed)
    evaluate = Evaluator(tf, ctx, shared.model, parts[0].image_shape, mean, std)
    x_spec = tf.TensorSpec([batch, *parts[0].image_shape], tf.uint8)
    y_spec = tf.TensorSpec([batch], tf.int64)

    def step_of(replica: Replica) -> Any:
        def step(images: Any, labels: Any) -> Any:
            x = steps.normalise_graph(tf, images, model_name, mean, std)
            with tf.GradientTape() as tape:
                loss = replica.loss_of(replica.model(x, training=True), x, labels)
            replica.sgd.apply(tape.gradient(loss, replica.variables))
            return loss

        return step

    shared_step, local_step_fn = step_of(shared), step_of(local)

    @tf.function(input_signature=[x_spec, y_spec])
    def worker_step(images: Any, labels: Any) -> Any:
        return strategy.run(shared_step, args=(images, labels))

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def push_pull(scale: Any) -> Any:
        def replica(scale: Any) -> Any:
            for var in shared.variables:
                var.assign_add(tf.identity(var.value) * scale)
            return scale

        return strategy.run(replica, args=(scale,))

    local_step = tf.function(local_step_fn, input_signature=[x_spec, y_spec])

    local_step.get_concrete_function()
    zero = tf.constant(0.0)
    for _ in range(workers):
        coordinator.schedule(push_pull, args=(zero,))
    coordinator.join()
    # The rank's start to its first step: connect, trace, broadcast (its import: import_s)
    setup_s = time.time() - ctx.started - sum(startup_seconds().values())

    # The rule's rate (the chief's copy), read back from the variable after each set only.
    rate = float(local.sgd.lr.numpy()) / scale
    for iteration in range(ctx.total_iterations):
        waited = time.perf_counter()
        feeds = [part.next() for part in parts]
        input_s = time.perf_counter() - waited  # the chief gathers every worker's batch
        if iteration <= ramp:  # the ramp, and the step that reaches the target
            for replica in (shared, local):
                replica.sgd.set_rate(spec.learning_rate_at(iteration) * scale)
            rate = float(local.sgd.lr.numpy()) / scale
        t0 = time.perf_counter()
        results = [coordinator.schedule(worker_step, args=feed) for feed in feeds]
        coordinator.join()
        t1 = time.perf_counter()
        losses = [float(result.fetch()) for result in results]
        t2 = time.perf_counter()
        for _ in range(workers):
            coordinator.schedule(push_pull, args=(zero,))
        coordinator.join()
        t3 = time.perf_counter()
        float(local_step(*feeds[0]))
        t4 = time.perf_counter()
        extra: dict[str, Any] = {"setup_s": setup_s} if iteration == 0 else {}
        if iteration == 0 and init_sha256 is not None:
            extra["init_sha256"] = init_sha256
        ctx.record_iteration(
            iteration,
            samples=workers * batch,
            step_s=t1 - t0,
            compute_s=t4 - t3,
            comm_s=t3 - t2,
            loss=sum(losses) / len(losses),
            worker_losses=losses,
            comm_bytes=shared.size * 4,
            workers=workers,
            parameter_servers=len(cluster["ps"]),
            update_scale=scale,
            input_s=input_s,
            lr=rate,  # the rule's rate this step used
            **extra,
        )
        # The chief evaluates the servers' variables between iterations; with a target,
        # its decision to stop is the loop's (the workers only run what it schedules).
        if ctx.eval_due(iteration) and evaluate(iteration):
            break
    for part in parts:
        part.close()  # stop the pipelines' threads before the servers are told to leave

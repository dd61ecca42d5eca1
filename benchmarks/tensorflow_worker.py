"""Benchmark work inside the TensorFlow venv (``python -m benchmarks.tf_worker``).

* ``training``: the runner's own loop (``dlscale.runners.tensorflow.train.train`` as a lone
  rank, in this process) against a bare loop and the matmul peak, rotated per repeat.
  The bare loop is TensorFlow's plainest training loop on the runner's model, batch and thread
  pools: one ``tf.function`` train step (GradientTape, Keras SGD with momentum) called on
  one fixed batch; then tf.matmul's float32 peak with the same pools.
* ``allreduce``: one worker of a 2-worker MultiWorkerMirroredStrategy (ring, gRPC on
  loopback) all-reducing a flat float32 gradient of each size as the runner does
  (a one-float all-reduce as barrier, then the timed all-reduce).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.bare_common import (
    emit,
    first_batch,
    intervals_throughput,
    matmul_peak,
    normalised,
    timed_loop,
)


def import_tf(intra: int, inter: int):  # noqa: ANN201 - the tensorflow module
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    return tf


def thread_pools(spec: dict) -> tuple[int, int]:
    """(intra, inter) op pool sizes, as the TensorFlow launcher gives a rank."""
    options = spec.get("options", {})
    return int(options.get("intra_op_threads") or spec["threads_per_rank"]), int(
        options.get("inter_op_threads") or 2
    )


def bare(spec: dict, data: Path) -> dict[str, float]:
    """The bare loop's throughput (a fresh model and optimizer each call)."""
    tf = import_tf(*thread_pools(spec))
    from dlscale.runners.tensorflow.models import build_model

    name, batch = spec["model"], int(spec["batch"])
    images, labels, mean, std = first_batch(data, name, batch)
    x = tf.constant(normalised(images, name, mean, std, nchw=False))
    y = tf.constant(labels)
    tf.keras.utils.set_random_seed(int(spec["seed"]))
    model = build_model(name, tuple(images.shape[1:]))
    optimizer = tf.keras.optimizers.SGD(float(spec["learning_rate"]), momentum=float(spec["momentum"]))
    if name == "autoencoder":
        target = tf.reshape(x, [batch, -1])

        def loss_of(logits):  # noqa: ANN001, ANN202
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits))
    else:

        def loss_of(logits):  # noqa: ANN001, ANN202
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    @tf.function
    def step():  # noqa: ANN202
        with tf.GradientTape() as tape:
            loss = loss_of(model(x, training=True))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    total = int(spec["warmup"]) + int(spec["iterations"])
    stamps, cpu = timed_loop(step, total)
    first = int(spec["warmup"]) - 1
    return {"samples_per_s": intervals_throughput(batch, stamps, first),
            "samples_per_cpu_s": intervals_throughput(batch, cpu, first)}  # fmt: skip


def peak(spec: dict) -> dict[str, float]:
    tf = import_tf(*thread_pools(spec))

    def tf_matmul(n: int):  # noqa: ANN202
        a, b = tf.random.normal([n, n]), tf.random.normal([n, n])
        return lambda: tf.linalg.matmul(a, b).numpy()

    return matmul_peak(tf_matmul)


def training(args: argparse.Namespace) -> None:
    """Runner (dlscale.runners.tensorflow.train.train, in this process) vs bare vs peak."""
    import tempfile

    from benchmarks.runner_arm import rotate_arms, runner_arm

    spec = json.loads(args.spec_json)
    intra, inter = thread_pools(spec)
    os.environ["DLSCALE_TF_INTRA_OP_THREADS"], os.environ["DLSCALE_TF_INTER_OP_THREADS"] = (
        str(intra),
        str(inter),
    )
    import_tf(intra, inter)
    from dlscale.runners.tensorflow import train as runner

    with tempfile.TemporaryDirectory(prefix="dlscale-bench-tf-") as tmp:
        rotate_arms(spec, args.repeats, {
            "runner": lambda r: runner_arm(runner.train, spec, args.data, Path(tmp), r),
            "bare": lambda r: bare(spec, args.data),
            "peak": lambda r: peak(spec),
        })  # fmt: skip


def allreduce(args: argparse.Namespace) -> None:
    cluster = {"worker": [f"127.0.0.1:{port}" for port in args.ports]}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": args.rank}})
    tf = import_tf(1, 2)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING, timeout_seconds=300
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def reducer(spec):  # noqa: ANN001, ANN202 - as dlscale.runners.tensorflow.mwms does it
        @tf.function(input_signature=[spec])
        def all_reduce(t):  # noqa: ANN001, ANN202
            def replica(value):  # noqa: ANN001, ANN202
                value = tf.identity(value)
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)

            return strategy.run(replica, args=(t,))

        return all_reduce

    barrier = reducer(tf.TensorSpec([], tf.float32))
    barrier(tf.constant(0.0))
    for nbytes in args.sizes:
        flat = tf.ones([nbytes // 4], tf.float32)
        reduce = reducer(tf.TensorSpec([nbytes // 4], tf.float32))
        reduce(flat)  # tracing and the collective's set-up
        times = []
        for _ in range(args.inner):
            barrier(tf.constant(0.0))
            t0 = time.perf_counter()
            reduce(flat).numpy()
            times.append(time.perf_counter() - t0)
        if args.rank == 0:
            emit(transport="tensorflow", nbytes=nbytes // 4 * 4, seconds=statistics.median(times))
    barrier(tf.constant(0.0))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train_p = sub.add_parser("training")
    train_p.add_argument("--spec-json", required=True)
    train_p.add_argument("--data", required=True, type=Path)
    train_p.add_argument("--repeats", type=int, default=5)
    ar = sub.add_parser("allreduce")
    ar.add_argument("--rank", type=int, required=True)
    ar.add_argument("--ports", type=int, nargs="+", required=True)
    ar.add_argument("--sizes", type=int, nargs="+", required=True)
    ar.add_argument("--inner", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    {"training": training, "allreduce": allreduce}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

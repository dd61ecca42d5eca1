"""Benchmark work inside the TensorFlow venv (``python -m benchmarks.tensorflow_worker``).

Sub-commands (arguments and output: benchmarks.worker_cli):

* ``training``: the runner's own loop (``dlscale.runners.tensorflow.train.train`` as a lone
  rank, in this process) against a bare loop and the matmul peak, rotated per repeat.
  The bare loop is TensorFlow's plainest training loop on the runner's model, batch and thread
  pools: one ``tf.function`` train step (GradientTape; the runner's loss and SGD-momentum
  update, ``dlscale.runners.tensorflow.steps``: the step's arithmetic, not harness; Keras'
  SGD costs up to 17% more per AutoEncoder step, which would hide harness cost) called on
  a fresh batch per step, gathered from the normalised set in memory and made tensors
  (``bare_common.Dataset``), as a plain user loop does; then tf.matmul's float32 peak with
  the same pools. The pools are the
  runner's: the driver gives this process the launcher's TensorFlow environment, and
  TensorFlow is imported as the runner imports it.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import worker_cli
from benchmarks.bare_common import Dataset, bare_loop, matmul_peak
from benchmarks.runner_arm import rotate_arms, runner_arm
from dlscale.runners.tensorflow import steps
from dlscale.runners.tensorflow import train as runner
from dlscale.runspec import RunSpec


def bare(spec: RunSpec, dataset: Dataset) -> dict[str, float]:
    """The bare loop's throughput (a fresh model and optimizer each call)."""
    tf = runner.import_tensorflow()
    from dlscale.runners.tensorflow.models import build_model

    name, batch = spec.model, spec.batch
    tf.keras.utils.set_random_seed(spec.seed)
    model = build_model(name, dataset.image_shape)
    variables = list(model.trainable_variables)
    sgd = steps.SGD(tf, variables, spec.learning_rate, spec.momentum)
    loss_of = steps.loss_function(tf, name)
    x_spec = tf.TensorSpec([batch, *dataset.image_shape], tf.float32)
    y_spec = tf.TensorSpec([batch], tf.int64)

    @tf.function(input_signature=[x_spec, y_spec])
    def train_step(x, y):  # noqa: ANN001, ANN202
        with tf.GradientTape() as tape:
            loss = loss_of(model(x, training=True), x, y)
        sgd.apply(tape.gradient(loss, variables))
        return loss

    batches = dataset.batches(batch, spec.seed)

    def step():  # noqa: ANN202
        images, labels = next(batches)
        return train_step(tf.constant(images), tf.constant(labels))

    return bare_loop(spec, step)


def tf_matmul(n: int) -> Callable[[], Any]:
    tf = runner.import_tensorflow()
    a, b = tf.random.normal([n, n]), tf.random.normal([n, n])
    return lambda: tf.linalg.matmul(a, b).numpy()


def training(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Runner (dlscale.runners.tensorflow.train.train, in this process) vs bare vs peak."""
    spec: RunSpec = args.spec
    runner.import_tensorflow()  # the pools are fixed before the first arm, for every arm
    dataset = Dataset(args.data, spec.model, nchw=False)
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-tf-") as tmp:
        yield from rotate_arms(spec, args.repeats, {
            "runner": lambda r: runner_arm(runner.train, spec, args.data, Path(tmp), r),
            "bare": lambda r: bare(spec, dataset),
            "peak": lambda r: matmul_peak(tf_matmul),
        })  # fmt: skip


COMMANDS = {"training": training}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)

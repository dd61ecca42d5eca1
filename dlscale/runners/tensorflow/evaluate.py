"""Held-out quality of a TensorFlow run: the evaluation rank 0 (ps mode: the chief) runs.

Speed alone can be bought by doing less or different work, so every run is judged on the
held-out split beside its training shards (``RunContext.heldout_dir``) with TensorFlow's
own inference: the Keras model called with ``training=False`` inside one tf.function (no
dropout, batch norm on its moving averages, no gradient tape, no update), over the WHOLE
held-out set, in batches of the run's batch or, for MNIST-sized models, at least
``EVAL_BATCH``. The inputs go through the training feed's own ``batches.normalise`` with
the TRAINING set's mean and std, so the model sees what it was trained on.

Metrics (``dlscale.quality.MODEL_METRICS``): top1 (argmax of the logits is the label),
top5 (``tf.math.in_top_k``), and for the autoencoder mse, the mean over every pixel and
image of ``(sigmoid(output) - input)^2`` with pixels on [0, 1], the very target its
sigmoid cross-entropy loss is taken against. Counts and squared errors are summed exactly
(int64 / float64), so the value does not depend on the evaluation batch.

The caller evaluates between steps, never inside one: ``eval_s`` is the wall time of the
evaluation alone (the first one also loads the held-out set, normalises it into tensors
once for the run, and traces the function), and
it touches no step's timings nor ``ctx.train_s``. Nothing here imports TensorFlow: the
caller passes its module in.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlscale import quality
from dlscale.data.shards import ShardSet
from dlscale.runners.common import RunContext
from dlscale.runners.tensorflow.batches import normalise

#: The smallest evaluation batch of an MNIST-sized model (10 calls for MNIST's test set).
EVAL_BATCH = 1000


def eval_batch(spec: Any) -> int:
    """The evaluation batch: the run's, or at least ``EVAL_BATCH`` for MNIST-sized models."""
    return max(spec.batch, EVAL_BATCH) if spec.mnist_sized else spec.batch


class Evaluator:
    """Rank 0's evaluator of ``model`` on the run's held-out set (loaded at its first use).

    ``mean``/``std``: the training set's pixel statistics (its ShardSet's), which the
    held-out images are normalised with, as the training batches are.
    """

    def __init__(
        self, tf: Any, ctx: RunContext, model: Any, image_shape: tuple[int, ...], mean: float, std: float
    ):
        self.tf, self.ctx, self.model = tf, ctx, model
        self.image_shape = tuple(image_shape)
        self.mean, self.std = mean, std
        self.metrics = quality.metrics_of(ctx.spec.model)
        self.batch = eval_batch(ctx.spec)
        self.images: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        self.dataset = ""
        self.stats: Any = None
        self.inputs: list[tuple[Any, Any]] = []

    def _load(self) -> None:
        image_shape = self.image_shape
        heldout = ShardSet(self.ctx.heldout_dir, verify=True)  # a corrupted shard fails the run
        if tuple(heldout.image_shape) != tuple(image_shape):
            raise ValueError(
                f"held-out images {heldout.image_shape} in {heldout.path} differ from the training"
                f" set's {tuple(image_shape)}"
            )
        self.images, self.labels = heldout.load_all()
        self.dataset = str(heldout.index["dataset"])
        self.stats = self._stats_function(image_shape)
        # Once a run: the batches normalised and made tensors, which each evaluation reuses.
        tf, model_name = self.tf, self.ctx.spec.model
        self.inputs = [
            (
                tf.constant(normalise(self.images[lo : lo + self.batch], model_name, self.mean, self.std)),
                tf.constant(self.labels[lo : lo + self.batch]),
            )
            for lo in range(0, len(self.labels), self.batch)
        ]

    def _stats_function(self, image_shape: tuple[int, ...]) -> Any:
        """One tf.function: a batch's exact sums (correct counts, or squared errors)."""
        tf, model, metrics = self.tf, self.model, self.metrics
        x_spec = tf.TensorSpec([None, *image_shape], tf.float32)
        y_spec = tf.TensorSpec([None], tf.int64)

        @tf.function(input_signature=[x_spec, y_spec])
        def stats(x: Any, y: Any) -> dict[str, Any]:
            out = model(x, training=False)
            sums: dict[str, Any] = {}
            if "mse" in metrics:
                target = tf.reshape(x, [tf.shape(x)[0], -1])  # the loss's target: pixels on [0, 1]
                sums["mse"] = tf.reduce_sum(tf.cast(tf.square(tf.sigmoid(out) - target), tf.float64))
            if "top1" in metrics:
                sums["top1"] = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, axis=1), y), tf.int64))
            if "top5" in metrics:
                hits = tf.math.in_top_k(targets=y, predictions=out, k=5)
                sums["top5"] = tf.reduce_sum(tf.cast(hits, tf.int64))
            return sums

        return stats

    def evaluate(self) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of the model as it is now, on the whole held-out set."""
        if self.images is None:
            self._load()
        assert self.images is not None and self.labels is not None
        n = len(self.labels)
        totals = dict.fromkeys(self.metrics, 0.0)
        for x, y in self.inputs:
            sums = self.stats(x, y)
            for metric in self.metrics:
                totals[metric] += float(sums[metric].numpy())
        pixels = int(np.prod(self.images.shape[1:]))
        results = {}
        for metric in self.metrics:
            value = totals[metric] / (n * pixels) if metric == "mse" else totals[metric] / n
            results[metric] = (value, n)
        return results

    def __call__(self, iteration: int) -> bool:
        """Evaluate after ``iteration`` (0-based) has trained, record it, and say whether
        the run's quality target is met (``RunContext.record_eval``)."""
        started = time.perf_counter()
        results = self.evaluate()
        eval_s = time.perf_counter() - started
        return self.ctx.record_eval(iteration, results, eval_s, heldout=self.dataset)

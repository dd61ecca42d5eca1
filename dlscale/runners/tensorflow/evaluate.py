"""Held-out quality of a TensorFlow run: every MWMS worker evaluates its share (ps mode: the
chief evaluates the whole set).

Speed alone can be bought by doing less or different work, so every run is judged on the
held-out split beside its training shards (``RunContext.heldout_dir``) with TensorFlow's
own inference: the Keras model called with ``training=False`` inside one tf.function (no
dropout, batch norm on its moving averages, no gradient tape, no update), over the WHOLE
held-out set, in batches of the run's batch or, for MNIST-sized models, at least
``EVAL_BATCH``. The inputs go through the training feed's own ``batches.normalise`` with
the TRAINING set's mean and std, so the model sees what it was trained on.

In MWMS mode, as in the torch, Caffe and JAX runners, every worker evaluates its own
contiguous share of the set (``ShardSet.rank_range``; the replicas are identical) and one
float64 sum all-reduce on the run's strategy adds the shares' sums; rank 0 records the
whole set's metric. No worker waits idle while another evaluates the whole set. The ps
mode's workers have no collective between them, so its chief evaluates the whole set.

Metrics (``dlscale.quality.MODEL_METRICS``): top1 (argmax of the logits is the label),
top5 (``tf.math.in_top_k``), and for the autoencoder mse, the mean over every pixel and
image of ``(sigmoid(output) - input)^2`` with pixels on [0, 1], the very target its
sigmoid cross-entropy loss is taken against. Counts and squared errors are summed exactly
(int64 / float64), so the value does not depend on the evaluation batch or the shares
(top-1 the same count; MSE to float32 inference rounding).

The caller evaluates between steps, never inside one: ``eval_s`` is rank 0's wall time of
the evaluation alone, the all-reduce included (the first one also loads the share,
normalises it into tensors once for the run, and traces the function), and it touches no
step's timings nor ``ctx.train_s``. Nothing here imports TensorFlow: the caller passes its
module in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
    """A worker's evaluator of ``model`` on its share of the run's held-out set (loaded at
    its first use).

    ``mean``/``std``: the training set's pixel statistics (its ShardSet's), which the
    held-out images are normalised with, as the training batches are. ``rank``/``world``:
    whose share this is (``0, 1``: the whole set); ``add_shares``: every worker's float64
    vector of sums in, their sum out (the mwms runner's all-reduce), None for the whole set.
    """

    def __init__(
        self,
        tf: Any,
        ctx: RunContext,
        model: Any,
        image_shape: tuple[int, ...],
        mean: float,
        std: float,
        rank: int = 0,
        world: int = 1,
        add_shares: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.tf, self.ctx, self.model = tf, ctx, model
        self.image_shape = tuple(image_shape)
        self.mean, self.std = mean, std
        self.rank, self.world, self.add_shares = rank, world, add_shares
        self.metrics = quality.metrics_of(ctx.spec.model)
        self.batch = eval_batch(ctx.spec)
        self.samples = 0  # the whole set's, known once loaded
        self.pixels = 0  # per image
        self.dataset = ""
        self.stats: Any = None
        self.inputs: list[tuple[Any, Any]] | None = None

    def _load(self) -> None:
        image_shape = self.image_shape
        heldout = ShardSet(self.ctx.heldout_dir, verify=True)  # a corrupted shard fails the run
        if tuple(heldout.image_shape) != tuple(image_shape):
            raise ValueError(
                f"held-out images {heldout.image_shape} in {heldout.path} differ from the training"
                f" set's {tuple(image_shape)}"
            )
        images, labels = heldout.load_part(self.rank, self.world)
        self.samples, self.pixels = heldout.num_samples, int(np.prod(image_shape))
        self.dataset = str(heldout.index["dataset"])
        self.stats = self._stats_function(image_shape)
        # Once a run: the batches normalised and made tensors, which each evaluation reuses.
        tf, model_name = self.tf, self.ctx.spec.model
        self.inputs = [
            (
                tf.constant(normalise(images[lo : lo + self.batch], model_name, self.mean, self.std)),
                tf.constant(labels[lo : lo + self.batch]),
            )
            for lo in range(0, len(labels), self.batch)
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

    def sums(self) -> dict[str, float]:
        """This share's exact sums of the model as it is now (top-k hits, squared errors)."""
        if self.inputs is None:
            self._load()
        assert self.inputs is not None
        totals = dict.fromkeys(self.metrics, 0.0)
        for x, y in self.inputs:
            found = self.stats(x, y)
            for metric in self.metrics:
                totals[metric] += float(found[metric].numpy())
        return totals

    def results(self, sums: dict[str, float]) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) on the whole set, from the sums over every share."""
        if self.inputs is None:
            self._load()
        n = self.samples
        return {m: (sums[m] / (n * self.pixels) if m == "mse" else sums[m] / n, n) for m in self.metrics}

    def evaluate(self) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of the model as it is now, on the whole held-out set:
        this worker's share, added to the others' by the all-reduce where there are shares."""
        if self.world > 1 and self.add_shares is None:
            raise RuntimeError("a share of the held-out set has no metric of its own: sum the shares")
        sums = self.sums()
        if self.add_shares is not None:
            total = self.add_shares(np.array([sums[m] for m in self.metrics], dtype=np.float64))
            sums = dict(zip(self.metrics, (float(v) for v in total), strict=True))
        return self.results(sums)

    def __call__(self, iteration: int) -> bool:
        """Evaluate after ``iteration`` (0-based) has trained; rank 0 records it and says
        whether the run's quality target is met (``RunContext.record_eval``), the other
        workers only add their shares (False)."""
        started = time.perf_counter()
        results = self.evaluate()
        eval_s = time.perf_counter() - started
        if self.rank != 0:
            return False
        return self.ctx.record_eval(iteration, results, eval_s, heldout=self.dataset)

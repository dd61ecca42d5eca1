"""Held-out quality of a Caffe run, measured on rank 0 by Caffe's own inference.

The evaluation net is the model without its loss (``models.inference_prototxt``) in
Caffe's TEST phase, where Dropout passes its input through and BatchNorm uses its running
statistics. It shares every parameter blob with the solver's training net
(``Net.share_with``, what Caffe's own solver does for its test nets): the same memory, so
it always sees the latest weights and nothing is copied. It runs forward only: no
backward, no update, no gradient touched.

The held-out images get the training feed's transform (``data.preprocess``) with the
TRAINING set's mean and std, so the net sees the numbers it was trained on; the
autoencoder's input and target are the pixels on [0, 1], as its loss sees them. Batches
are the run's batch or larger (``EVAL_BATCH``); a last, partial batch is padded with zeros
and its padding ignored. Metrics (``dlscale.quality.MODEL_METRICS``) are counted in
float64 over the whole set.

With several ranks, ``evaluate_due`` shares rank 0's stop decision (its quality target
met) with every rank by an MPI broadcast right after the evaluation: every rank stops at
the same iteration, and no rank's next timed step waits for rank 0's evaluation inside
its barrier.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.data.shards import ShardSet
from dlscale.quality import MODEL_METRICS
from dlscale.runners.caffe.data import preprocess
from dlscale.runners.caffe.models import OUTPUT_BLOBS, inference_prototxt
from dlscale.runners.caffe.parallel import interruptible
from dlscale.runners.common import RunContext
from dlscale.runners.prepared import PREPARED_LIMIT_BYTES

#: Smallest evaluation batch per model (the run's batch when larger): large batches
#: amortise Caffe's per-layer overhead; MNIST's 10,000 test images are 10 of them.
EVAL_BATCH: dict[str, int] = {"lenet": 1000, "autoencoder": 1000}


def top_k_hits(logits: np.ndarray, labels: np.ndarray, k: int) -> int:
    """How many rows have their label among their ``k`` highest logits."""
    k = min(k, logits.shape[1])
    if k == 1:
        return int(np.count_nonzero(np.argmax(logits, axis=1) == labels))
    best = np.argpartition(logits, -k, axis=1)[:, -k:]
    return int(np.count_nonzero((best == labels[:, None]).any(axis=1)))


def squared_error(logits: np.ndarray, target: np.ndarray) -> float:
    """Sum over the rows of (sigmoid(logits) - target)^2, in float64."""
    z = logits.astype(np.float64)
    reconstruction = 0.5 * (1.0 + np.tanh(0.5 * z))  # the sigmoid, without overflow
    return float(np.square(reconstruction - target.reshape(len(z), -1).astype(np.float64)).sum())


class Evaluator:
    """Rank 0's held-out evaluation of ``train_net`` (a pycaffe Net), made once before training.

    ``mean``/``std``: the training set's pixel statistics (its ``ShardSet``).
    """

    def __init__(
        self, model: str, batch: int, train_net: Any, heldout: Path, mean: float, std: float
    ) -> None:
        import caffe

        self.model, self.mean, self.std = model, float(mean), float(std)
        self.metrics = MODEL_METRICS[model]
        self.shards = ShardSet(heldout, verify=True)  # a corrupted held-out shard fails the run
        self.dataset = str(self.shards.index["dataset"])
        self.batch = max(batch, EVAL_BATCH.get(model, 0))
        with tempfile.TemporaryDirectory(prefix="caffe-eval-") as tmp:
            path = Path(tmp) / f"{model}-eval.prototxt"
            path.write_text(inference_prototxt(model, self.batch))
            self.net = caffe.Net(str(path), caffe.TEST)
        self.net.share_with(train_net)
        data_shape = tuple(self.net.blobs["data"].data.shape[1:])
        height, width, channels = self.shards.image_shape
        if data_shape != (channels, height, width):
            raise ValueError(
                f"held-out set {heldout} holds {height}x{width}x{channels} images;"
                f" {model} takes {data_shape[1]}x{data_shape[2]}x{data_shape[0]}"
            )
        self.output = OUTPUT_BLOBS[model]
        self.x_all: np.ndarray | None = None
        if self.shards.num_samples * int(np.prod(self.shards.image_shape)) * 4 <= PREPARED_LIMIT_BYTES:
            # Converted once, as the training feed does (``dlscale.runners.prepared``).
            images, self.labels = self.shards.load_all()
            self.x_all = preprocess(images, model, self.mean, self.std)

    def _batch(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        if self.x_all is not None:
            return self.x_all[start:stop], self.labels[start:stop]
        images, labels = self.shards.take(np.arange(start, stop))
        return preprocess(images, self.model, self.mean, self.std), labels

    def evaluate(self) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) over the whole held-out set, with the net's current weights."""
        n = self.shards.num_samples
        hits = {k: 0 for k in (1, 5)}
        squared = 0.0
        data = self.net.blobs["data"].data
        for start in range(0, n, self.batch):
            stop = min(n, start + self.batch)
            x, labels = self._batch(start, stop)
            rows = stop - start
            data[:rows] = x
            data[rows:] = 0.0
            self.net.forward()
            logits = self.net.blobs[self.output].data[:rows]
            if self.model == "autoencoder":
                squared += squared_error(logits, x)
            else:
                for k in hits:
                    hits[k] += top_k_hits(logits, np.asarray(labels, dtype=np.int64), k)
        values = {
            "top1": hits[1] / n,
            "top5": hits[5] / n,
            "mse": squared / (n * int(np.prod(self.shards.image_shape))),
        }
        return {metric: (values[metric], n) for metric in self.metrics}


def evaluate_due(ctx: RunContext, evaluator: Evaluator | None, iteration: int, comm: Any) -> bool:
    """After ``iteration`` (0-based) has trained, when ``ctx.eval_due``: rank 0 evaluates and
    records; every rank learns whether training stops (the quality target met).

    Outside every timed step: ``eval_s`` is the evaluation's own wall time, and the
    broadcast (several ranks only) holds the other ranks until rank 0 is done.
    """
    stop = False
    if ctx.rank == 0:
        if evaluator is None:
            raise RuntimeError("rank 0 has no evaluator")
        started = time.perf_counter()
        results = evaluator.evaluate()
        eval_s = time.perf_counter() - started
        stop = ctx.record_eval(iteration, results, eval_s, heldout=evaluator.dataset)
    if ctx.world_size > 1:
        decided: list[bool] = []
        interruptible(lambda: decided.append(bool(comm.bcast(stop, root=0))))
        stop = decided[0]
    return stop

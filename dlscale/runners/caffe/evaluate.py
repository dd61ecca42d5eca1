"""Held-out quality of a Caffe run, measured by Caffe's own inference on every rank's share.

The evaluation net is the model without its loss (``models.inference_prototxt``) in
Caffe's TEST phase, where Dropout passes its input through and BatchNorm uses its running
statistics. It shares every parameter blob with the solver's training net
(``Net.share_with``, what Caffe's own solver does for its test nets): the same memory, so
it always sees the latest weights and nothing is copied. It runs forward only: no
backward, no update, no gradient touched. It is built once, before training.

Each rank evaluates its own contiguous share of the held-out set (``ShardSet.rank_range``)
and one ``MPI_Allreduce`` sums the shares' counts (top-k hits, squared errors): the metric
is the whole set's (top-1 exactly, the autoencoder's MSE to float rounding) at 1/world of
the inference per rank, and no rank busy-waits in MPI while rank 0 alone evaluates (Open
MPI's waiting rank spins a core: on a shared host it doubled rank 0's evaluation). The
share's images get the training feed's transform (``data.preprocess``) with the TRAINING
set's mean and std, once, before training (when it fits, ``dlscale.runners.prepared``), so
the net sees the numbers it was trained on; the autoencoder's input and target are the
pixels on [0, 1], as its loss sees them. Batches are the run's batch or larger
(``EVAL_BATCH``); a last, partial batch is padded with zeros and its padding ignored.
Metrics (``dlscale.quality.MODEL_METRICS``) are counted in float64.

Rank 0 records the metric, and ``evaluate_due`` shares its stop decision (its quality
target met) with every rank by an MPI broadcast right after: every rank stops at the same
iteration, and no rank's next timed step waits for the evaluation inside its barrier.
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
from dlscale.runners.common import RunContext, startup_part
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
    """A rank's held-out evaluation of ``train_net`` (a pycaffe Net), made once before training.

    ``mean``/``std``: the training set's pixel statistics (its ``ShardSet``);
    ``rank``/``world``: whose share of the held-out set this is (``0, 1``: the whole set).
    """

    def __init__(
        self, model: str, batch: int, train_net: Any, heldout: Path, mean: float, std: float,
        rank: int = 0, world: int = 1,
    ) -> None:  # fmt: skip
        import caffe

        self.model, self.mean, self.std = model, float(mean), float(std)
        self.metrics = MODEL_METRICS[model]
        self.shards = ShardSet(heldout, verify=True)  # a corrupted held-out shard fails the run
        self.dataset = str(self.shards.index["dataset"])
        self.batch = max(batch, EVAL_BATCH.get(model, 0))
        with startup_part("model_setup_s"), tempfile.TemporaryDirectory(prefix="caffe-eval-") as tmp:
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
        self.start, self.stop = self.shards.rank_range(rank, world)
        self.x_all: np.ndarray | None = None
        if (self.stop - self.start) * int(np.prod(self.shards.image_shape)) * 4 <= PREPARED_LIMIT_BYTES:
            # Converted once, as the training feed does (``dlscale.runners.prepared``).
            images, self.labels = self.shards.load_part(rank, world)
            self.x_all = preprocess(images, model, self.mean, self.std)

    def _batch(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """This share's samples ``[start, stop)`` (0-based within it), converted."""
        if self.x_all is not None:
            return self.x_all[start:stop], self.labels[start:stop]
        images, labels = self.shards.take(np.arange(self.start + start, self.start + stop))
        return preprocess(images, self.model, self.mean, self.std), labels

    def sums(self) -> np.ndarray:
        """This share's exact sums with the net's current weights, float64: top-1 hits,
        top-5 hits, squared errors, in that order."""
        n = self.stop - self.start
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
        return np.array([hits[1], hits[5], squared], dtype=np.float64)

    def results(self, sums: np.ndarray) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) on the whole held-out set, from every share's ``sums`` added."""
        n = self.shards.num_samples
        top1, top5, squared = (float(value) for value in sums)
        values = {
            "top1": top1 / n,
            "top5": top5 / n,
            "mse": squared / (n * int(np.prod(self.shards.image_shape))),
        }
        return {metric: (values[metric], n) for metric in self.metrics}

    def evaluate(self) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) over the whole held-out set (an evaluator of it all)."""
        if (self.start, self.stop) != (0, self.shards.num_samples):
            raise RuntimeError("a share of the held-out set has no metric of its own: sum the shares")
        return self.results(self.sums())


def evaluate_due(ctx: RunContext, evaluator: Evaluator | None, iteration: int, comm: Any, mpi: Any) -> bool:
    """After ``iteration`` (0-based) has trained, when ``ctx.eval_due``: every rank evaluates
    its share, the sums are all-reduced, rank 0 records; every rank learns whether training
    stops (the quality target met).

    Outside every timed step: ``eval_s`` is rank 0's wall time of the evaluation, the
    all-reduce included; the broadcast (several ranks only) holds every rank until rank 0
    has recorded.
    """
    if evaluator is None:
        raise RuntimeError(f"rank {ctx.rank} has no evaluator")
    stop = False
    started = time.perf_counter()
    sums = evaluator.sums()
    if ctx.world_size > 1:
        interruptible(lambda: comm.Allreduce(mpi.IN_PLACE, sums, op=mpi.SUM))
    results = evaluator.results(sums)
    eval_s = time.perf_counter() - started
    if ctx.rank == 0:
        stop = ctx.record_eval(iteration, results, eval_s, heldout=evaluator.dataset)
    if ctx.world_size > 1:
        decided: list[bool] = []
        interruptible(lambda: decided.append(bool(comm.bcast(stop, root=0))))
        stop = decided[0]
    return stop

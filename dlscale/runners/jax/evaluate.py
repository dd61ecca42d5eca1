"""The JAX runner's held-out evaluation: the model's own jitted inference, between steps.

Every rank runs the model's forward pass (the same ``apply`` the step differentiates, no
gradient, no update) over its own contiguous share of the held-out shard set beside the
training data (``ShardSet.rank_range``), each batch converted as a training batch
(``Batches.convert``), in batches of 1,000 (at least the run's batch) for the MNIST-sized
models, of the run's batch for AlexNet; one collective (``Collectives.sum``) adds the
shares' counts (top-k hits, squared errors), so rank 0 records the whole set's metric
(top-1 exactly; MSE to float rounding: the sum crosses the ranks in float32) at 1/world
of the inference per rank. A share that fits (``dlscale.runners.prepared``) is converted
and put on the device once, before training; a larger one is read and converted per batch
at each evaluation. The forward pass is compiled before training (``HeldOut.compile``), so
an evaluation's ``eval_s`` is inference, not XLA's compiler; a last, shorter batch
compiles once at the first evaluation. Nothing here runs inside a timed step; with a
quality target the other ranks learn rank 0's decision in one collective, outside the
timed step too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dlscale import quality
from dlscale.data.shards import ShardSet
from dlscale.runners.common import RunContext
from dlscale.runners.jax.data import Batches
from dlscale.runners.prepared import PREPARED_LIMIT_BYTES

#: Held-out samples per forward pass of an MNIST-sized model (never fewer than the run's batch).
EVAL_BATCH = 1000

#: What ``HeldOut.sums`` counts, in its order.
SUMS = ("top1", "top5", "mse", "pixels")


class HeldOut:
    """This rank's share of the held-out set and the metrics of the run's model
    (``dlscale.quality.MODEL_METRICS``); ``rank``/``world``: whose share (``0, 1``: all)."""

    def __init__(
        self, ctx: RunContext, batches: Batches, forward: Callable[[Any, Any], Any], jax: Any,
        rank: int = 0, world: int = 1,
    ) -> None:  # fmt: skip
        self.jax, self.batches = jax, batches
        self.shards = ShardSet(ctx.heldout_dir, verify=True)
        self.dataset = str(self.shards.index["dataset"])
        self.samples = self.shards.num_samples
        self.batch = max(ctx.spec.batch, EVAL_BATCH) if ctx.spec.mnist_sized else ctx.spec.batch
        self.metrics = quality.metrics_of(ctx.spec.model)
        self.forward = jax.jit(forward)
        self.device = jax.local_devices()[0]
        self.start, self.stop = self.shards.rank_range(rank, world)
        self.prepared: list[tuple[Any, np.ndarray]] | None = None
        if (self.stop - self.start) * int(np.prod(self.shards.image_shape)) * 4 <= PREPARED_LIMIT_BYTES:
            # Once a run, before training: the evaluation batches, converted, on the device.
            x, y = batches.convert(*self.shards.load_part(rank, world))
            self.prepared = [
                (jax.device_put(x[lo : lo + self.batch], self.device), y[lo : lo + self.batch])
                for lo in range(0, len(x), self.batch)
            ]

    def _batches(self) -> Iterator[tuple[Any, np.ndarray]]:
        """The share's evaluation batches (device input, target), prepared or converted now."""
        if self.prepared is not None:
            yield from self.prepared
            return
        for lo in range(self.start, self.stop, self.batch):
            x, y = self.batches.convert(*self.shards.take(np.arange(lo, min(lo + self.batch, self.stop))))
            yield self.jax.device_put(x, self.device), y

    def compile(self, params: Any) -> float:
        """Compile the forward pass for a whole evaluation batch; return the seconds it took."""
        started = time.perf_counter()
        n = min(self.batch, self.stop - self.start)
        x, _ = self.batches.convert(*self.shards.take(np.arange(self.start, self.start + n)))
        self.forward(params, self.jax.device_put(x, self.device)).block_until_ready()
        return time.perf_counter() - started

    def sums(self, params: Any) -> np.ndarray:
        """This share's sums with ``params``, float64, in ``SUMS``' order (0 where the
        model has no such metric)."""
        hits = {k: 0 for k in (1, 5) if f"top{k}" in self.metrics}
        squared, pixels = 0.0, 0
        for x, y in self._batches():
            out = np.asarray(self.forward(params, x), dtype=np.float64)
            if "mse" in self.metrics:  # y is the loss's target: the input on [0, 1]
                squared += float(np.square(1.0 / (1.0 + np.exp(-out)) - y).sum())
                pixels += y.size
            if hits:
                best = np.argsort(-out, axis=1)[:, : max(hits)] == y[:, None]
                for k in hits:
                    hits[k] += int(best[:, :k].any(axis=1).sum())
        return np.array([hits.get(1, 0), hits.get(5, 0), squared, pixels], dtype=np.float64)

    def results(self, sums: np.ndarray) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) on the whole set, from every share's ``sums`` added."""
        found = dict(zip(SUMS, (float(v) for v in sums), strict=True))
        n = self.samples
        return {m: (found[m] / found["pixels"] if m == "mse" else found[m] / n, n) for m in self.metrics}

    def evaluate(self, params: Any) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of the model with ``params`` on the whole held-out set
        (an evaluator of the whole set: a 1-rank run, or a check of the shares)."""
        if (self.start, self.stop) != (0, self.samples):
            raise RuntimeError("a share of the held-out set has no metric of its own: sum the shares")
        return self.results(self.sums(params))


def evaluate_and_decide(
    ctx: RunContext,
    iteration: int,
    heldout: HeldOut | None,
    params: Any,
    collectives: Any | None,
) -> bool:
    """After ``iteration`` (0-based) has trained and an evaluation is due: every rank
    evaluates its share, the sums are added over the ranks, rank 0 records the metric;
    every rank learns whether the quality target is met (training stops).
    ``collectives``: the run's ``distributed.Collectives`` (None in a 1-rank run).
    ``eval_s`` is rank 0's wall time of the evaluation, the sum included."""
    met = False
    if heldout is not None:
        started = time.perf_counter()
        sums = heldout.sums(params)
        if collectives is not None:
            sums = collectives.sum(sums)
        results = heldout.results(sums)
        eval_s = time.perf_counter() - started
        if ctx.rank == 0:
            met = ctx.record_eval(iteration, results, eval_s, heldout=heldout.dataset)
    if collectives is not None:
        met = collectives.any(met)
    return met

"""The JAX runner's held-out evaluation: the model's own jitted inference, between steps.

Rank 0 runs the model's forward pass (the same ``apply`` the step differentiates, no
gradient, no update) over the whole held-out shard set beside the training data, each
batch converted as a training batch (``Batches.convert``), in batches of 1,000 (at least
the run's batch) for the MNIST-sized models, of the run's batch for AlexNet. A set that
fits (``dlscale.runners.prepared``) is converted and put on the device once, before
training; a larger one is read and converted per batch at each evaluation. The forward pass is compiled before training (``HeldOut.compile``), so
an evaluation's ``eval_s`` is inference, not XLA's compiler; a last, shorter batch compiles
once at the first evaluation. Nothing here runs inside a timed step; with a quality target
the other ranks learn rank 0's decision in one collective, outside the timed step too.
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
from dlscale.runners.prepared import prepare_whole

#: Held-out samples per forward pass of an MNIST-sized model (never fewer than the run's batch).
EVAL_BATCH = 1000


class HeldOut:
    """The held-out set and the metrics of the run's model (``dlscale.quality.MODEL_METRICS``)."""

    def __init__(self, ctx: RunContext, batches: Batches, forward: Callable[[Any, Any], Any], jax: Any):
        self.jax, self.batches = jax, batches
        self.shards = ShardSet(ctx.heldout_dir, verify=True)
        self.dataset = str(self.shards.index["dataset"])
        self.batch = max(ctx.spec.batch, EVAL_BATCH) if ctx.spec.mnist_sized else ctx.spec.batch
        self.metrics = quality.metrics_of(ctx.spec.model)
        self.forward = jax.jit(forward)
        self.device = jax.local_devices()[0]
        self.prepared: list[tuple[Any, np.ndarray]] | None = None
        n = self.shards.num_samples
        if prepare_whole(np.empty((n, *self.shards.image_shape), np.uint8)):
            # Once a run, before training: the evaluation batches, converted, on the device.
            x, y = batches.convert(*self.shards.load_all())
            self.prepared = [
                (jax.device_put(x[lo : lo + self.batch], self.device), y[lo : lo + self.batch])
                for lo in range(0, n, self.batch)
            ]

    def _batches(self) -> Iterator[tuple[Any, np.ndarray]]:
        """The evaluation batches (device input, target), prepared or converted now."""
        if self.prepared is not None:
            yield from self.prepared
            return
        n = self.shards.num_samples
        for lo in range(0, n, self.batch):
            x, y = self.batches.convert(*self.shards.take(np.arange(lo, min(lo + self.batch, n))))
            yield self.jax.device_put(x, self.device), y

    def compile(self, params: Any) -> float:
        """Compile the forward pass for a whole evaluation batch; return the seconds it took."""
        started = time.perf_counter()
        n = min(self.batch, self.shards.num_samples)
        x, _ = self.batches.convert(*self.shards.take(np.arange(n)))
        self.forward(params, self.jax.device_put(x, self.device)).block_until_ready()
        return time.perf_counter() - started

    def evaluate(self, params: Any) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of the model with ``params`` on the whole held-out set."""
        n = self.shards.num_samples
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
        results: dict[str, tuple[float, int]] = {f"top{k}": (hits[k] / n, n) for k in hits}
        if "mse" in self.metrics:
            results["mse"] = (squared / pixels, n)
        return {m: results[m] for m in self.metrics}


def evaluate_and_decide(
    ctx: RunContext,
    iteration: int,
    heldout: HeldOut | None,
    params: Any,
    any_rank: Callable[[bool], bool] | None,
) -> bool:
    """After ``iteration`` (0-based) has trained and an evaluation is due: rank 0 evaluates
    and records it; every rank learns whether the quality target is met (training stops).
    ``any_rank``: the collective that shares rank 0's decision (None in a 1-rank run)."""
    met = False
    if heldout is not None:
        started = time.perf_counter()
        results = heldout.evaluate(params)
        eval_s = time.perf_counter() - started
        met = ctx.record_eval(iteration, results, eval_s, heldout=heldout.dataset)
    if any_rank is not None:
        met = any_rank(met)
    return met

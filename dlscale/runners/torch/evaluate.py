"""The torch runner's held-out evaluation: what the model learned, measured between steps.

Every rank runs the model in inference mode (``model.eval()``: no dropout, batch norm on
its running statistics; ``torch.inference_mode()``: no gradient, no update) over its own
contiguous share of the held-out shard set beside the training data
(``ShardSet.rank_range``), and one all-reduce on the run's process group sums the shares'
counts (top-k hits, squared errors, pixels): the metric is the whole set's, top-1 exactly
and the autoencoder's MSE to float rounding (float32 inference: a share batches the set differently), at 1/world of the inference per rank. Rank 0
records it and its decision to stop is broadcast, both outside every timed step, so step_s
and the run's training clock (``RunContext.train_s``) are untouched.

The share is converted once, before training, exactly as a training batch is
(``Batches.convert``: the training set's mean and std, the same memory format, the
autoencoder's [0, 1] input as its target) when it fits (``dlscale.runners.prepared``); a
share too large (an ImageNet part) is read and converted one batch at a time through the
set's memory maps. torch is passed in by the caller.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlscale import quality
from dlscale.data.shards import ShardSet
from dlscale.runners.common import RunContext
from dlscale.runners.prepared import PREPARED_LIMIT_BYTES
from dlscale.runners.torch.data import Batches

#: Held-out samples per forward pass of an MNIST-sized model (never fewer than the run's
#: batch): large passes keep the 10,000 images to a few forward calls; the ImageNet-sized
#: models evaluate at the run's batch, the size their memory is planned for.
MNIST_EVAL_BATCH = 1000


class HeldOut:
    """This rank's share of the held-out set and the metrics of the run's model
    (``dlscale.quality.MODEL_METRICS``).

    Opened (sha256-checked) once before training. ``rank``/``world``: whose share of the
    set this is (``0, 1``: the whole set, as a 1-rank run evaluates).
    """

    def __init__(self, ctx: RunContext, batches: Batches, torch: Any, rank: int = 0, world: int = 1):
        self.torch, self.batches = torch, batches
        self.shards = ShardSet(ctx.heldout_dir, verify=True)
        self.dataset = str(self.shards.index["dataset"])
        self.samples = self.shards.num_samples
        spec = ctx.spec
        self.batch = max(spec.batch, MNIST_EVAL_BATCH) if spec.mnist_sized else spec.batch
        self.metrics = quality.metrics_of(spec.model)
        self.start, self.stop = self.shards.rank_range(rank, world)
        self.prepared: tuple[Any, Any] | None = None
        if (self.stop - self.start) * int(np.prod(self.shards.image_shape)) * 4 <= PREPARED_LIMIT_BYTES:
            # Once a run, before training: each evaluation only slices these tensors.
            self.prepared = batches.convert(*self.shards.load_part(rank, world))

    def _batch(self, lo: int, hi: int) -> tuple[Any, Any]:
        """Held-out samples ``[lo, hi)`` of this share (0-based within it), converted."""
        if self.prepared is not None:
            x, y = self.prepared
            return x[lo:hi], y[lo:hi]
        return self.batches.convert(*self.shards.take(np.arange(self.start + lo, self.start + hi)))

    def sums(self, model: Any) -> dict[str, float]:
        """This share's exact sums of ``model`` (the bare module, not DDP's wrapper):
        ``top1``/``top5`` hits, ``mse`` squared errors and their ``pixels``; the model is
        back in training mode afterwards."""
        torch = self.torch
        hits = {k: 0 for k in (1, 5) if f"top{k}" in self.metrics}
        squared, pixels = 0.0, 0
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                for lo in range(0, self.stop - self.start, self.batch):
                    x, y = self._batch(lo, min(lo + self.batch, self.stop - self.start))
                    out = model(x)
                    if "mse" in self.metrics:  # y is the loss's target: the input on [0, 1]
                        squared += float((torch.sigmoid(out) - y).double().square().sum())
                        pixels += y.numel()
                    if hits:
                        best = out.topk(max(hits), dim=1).indices == y.unsqueeze(1)
                        for k in hits:
                            hits[k] += int(best[:, :k].any(dim=1).sum())
        finally:
            model.train(was_training)
        found: dict[str, float] = {f"top{k}": float(hits[k]) for k in hits}
        if "mse" in self.metrics:
            found.update(mse=squared, pixels=float(pixels))
        return found

    def results(self, sums: dict[str, float]) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) on the whole set, from the sums over every share."""
        n = self.samples
        return {m: (sums[m] / sums["pixels"] if m == "mse" else sums[m] / n, n) for m in self.metrics}

    def evaluate(self, model: Any) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of ``model`` on this share alone (the whole set when
        it holds it all: a 1-rank run, or a check against the sharded evaluation)."""
        if (self.start, self.stop) != (0, self.samples):
            raise RuntimeError("a share of the held-out set has no metric of its own: sum the shares")
        return self.results(self.sums(model))


def evaluate_and_decide(
    ctx: RunContext, iteration: int, heldout: HeldOut | None, model: Any, torch: Any, dist: Any | None
) -> bool:
    """After ``iteration`` (0-based) has trained and an evaluation is due: every rank with
    a held-out share evaluates it, the sums are all-reduced, rank 0 records the metric;
    every rank learns whether the quality target is met (training stops).

    ``dist``: torch.distributed in a multi-rank run (the sums' all-reduce and rank 0's
    decision, broadcast, also hold every rank until all are done), None in a 1-rank run.
    Only the evaluation itself is timed, as ``eval_s`` (rank 0's, the all-reduce included).
    """
    met = False
    if heldout is not None:
        started = time.perf_counter()
        sums = heldout.sums(model)
        if dist is not None:
            names = sorted(sums)
            total = torch.tensor([sums[name] for name in names], dtype=torch.float64)
            dist.all_reduce(total)
            sums = dict(zip(names, total.tolist(), strict=True))
        results = heldout.results(sums)
        eval_s = time.perf_counter() - started
        if ctx.rank == 0:
            met = ctx.record_eval(iteration, results, eval_s, heldout=heldout.dataset)
    if dist is not None:
        flag = torch.tensor([int(met)], dtype=torch.int32)
        dist.broadcast(flag, src=0)
        met = bool(flag.item())
    return met

"""The torch runner's held-out evaluation: what the model learned, measured between steps.

Rank 0 runs the model in inference mode (``model.eval()``: no dropout, batch norm on its
running statistics; ``torch.inference_mode()``: no gradient, no update) over the whole
held-out shard set beside the training data, each batch converted exactly as a training
batch (``Batches.convert``: the training set's mean and std, the same memory format, the
autoencoder's [0, 1] input as its target). Nothing here runs inside a timed step, so
step_s and the run's training clock (``RunContext.train_s``) are untouched; the other ranks
wait for rank 0's decision to stop in one broadcast, outside the timed step, so their next
step does not absorb the evaluation either. torch is passed in by the caller.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlscale import quality
from dlscale.data.shards import ShardSet
from dlscale.runners.common import RunContext
from dlscale.runners.torch.data import Batches

#: Held-out samples per forward pass of an MNIST-sized model (never fewer than the run's
#: batch): large passes keep the 10,000 images to a few forward calls; the ImageNet-sized
#: models evaluate at the run's batch, the size their memory is planned for.
MNIST_EVAL_BATCH = 1000


class HeldOut:
    """The held-out set and the metrics of the run's model (``dlscale.quality.MODEL_METRICS``).

    Opened (sha256-checked) once before training; each evaluation reads its batches
    through the set's memory maps, so a large ImageNet part is never held whole.
    """

    def __init__(self, ctx: RunContext, batches: Batches, torch: Any):
        self.torch, self.batches = torch, batches
        self.shards = ShardSet(ctx.heldout_dir, verify=True)
        self.dataset = str(self.shards.index["dataset"])
        spec = ctx.spec
        self.batch = max(spec.batch, MNIST_EVAL_BATCH) if spec.mnist_sized else spec.batch
        self.metrics = quality.metrics_of(spec.model)

    def evaluate(self, model: Any) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of ``model`` (the bare module, not DDP's wrapper) on
        the whole held-out set; the model is back in training mode afterwards."""
        torch = self.torch
        n = self.shards.num_samples
        hits = {k: 0 for k in (1, 5) if f"top{k}" in self.metrics}
        squared, pixels = 0.0, 0
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                for lo in range(0, n, self.batch):
                    x, y = self.batches.convert(*self.shards.take(np.arange(lo, min(lo + self.batch, n))))
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
        results: dict[str, tuple[float, int]] = {f"top{k}": (hits[k] / n, n) for k in hits}
        if "mse" in self.metrics:
            results["mse"] = (squared / pixels, n)
        return {m: results[m] for m in self.metrics}


def evaluate_and_decide(
    ctx: RunContext, iteration: int, heldout: HeldOut | None, model: Any, torch: Any, dist: Any | None
) -> bool:
    """After ``iteration`` (0-based) has trained and an evaluation is due: rank 0 evaluates
    and records it; every rank learns whether the quality target is met (training stops).

    ``heldout`` is rank 0's (None elsewhere); ``dist``: torch.distributed in a multi-rank
    run (rank 0's decision is broadcast, which also holds the other ranks until rank 0 is
    done), None in a 1-rank run. Only the evaluation itself is timed, as ``eval_s``.
    """
    met = False
    if heldout is not None:
        started = time.perf_counter()
        results = heldout.evaluate(model)
        eval_s = time.perf_counter() - started
        met = ctx.record_eval(iteration, results, eval_s, heldout=heldout.dataset)
    if dist is not None:
        flag = torch.tensor([int(met)], dtype=torch.int32)
        dist.broadcast(flag, src=0)
        met = bool(flag.item())
    return met

"""The BigDL runner's held-out evaluation: what the trained model learned, between segments.

BigDL trains inside one JVM call (``Optimizer.optimize``) that reports through its log,
so the driver cannot stop between two steps to evaluate. A run that evaluates before its
end therefore trains in segments: ``optimize`` up to the next iteration where an
evaluation is due (``segment_ends``), evaluate the model it returns, go on. BigDL keeps
what a segment must carry over: the iteration count (its optimiser state's ``neval``),
the cached training RDD, the weights (gathered into the driver's model, from which the
next segment starts) and, with ``reserveOptim``, each executor's optimiser state (SGD's
momentum buffer). A run without evaluations before its end, or with no held-out set, is one segment.

BigDL's own validation trigger (``set_validation``) is not used: its ``SeveralIteration``
fires when ``neval`` (the next iteration's 1-based number) is a multiple, one iteration
before the run's schedule, and its ``MaxScore`` cannot stop on a metric where lower is
better (the AutoEncoder's MSE).

The evaluation is BigDL's own inference, on the executors: ``evaluate`` of the trained
model with BigDL's validation methods (the model in evaluation mode: no dropout, batch
norm on its running statistics; no gradient, no update) over the whole held-out shard set
beside the training data, one partition per executor reading its block of it, converted
exactly as a training sample (``data.convert``: the TRAINING set's mean and std; the
AutoEncoder's [0, 1] input as its target, compared with its Sigmoid output). Only the
methods' sums come back to the driver. Nothing of it runs inside a timed step, and the
segments' ``optimize`` calls start and end outside BigDL's timed iterations.

The decision to stop (the quality target met) is the driver's alone: BigDL's ranks are
the cores of executors that the one driver hands jobs to, so none of them trains past it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale import quality
from dlscale.data.shards import ShardSet
from dlscale.runners.bigdl.data import as_samples, convert
from dlscale.runners.common import RunContext
from dlscale.runspec import RunSpec

#: Held-out samples per evaluation batch of an MNIST-sized model (never fewer than the
#: run's global batch); the ImageNet-sized models evaluate at the run's global batch, the
#: size their executors' memory is planned for.
MNIST_EVAL_BATCH = 1000


def segment_ends(spec: RunSpec, evaluates: bool = True) -> list[int]:
    """The completed iteration counts (warm-up included) after which the run evaluates:
    every ``eval_every`` and after the last (``RunSpec.eval_due``). Each ends a segment.

    A run that cannot evaluate (no held-out set beside its data) or evaluates nothing
    (``RunSpec.evaluates``: a parity reference) is one segment: a segment exists only to
    evaluate between them, and each further ``optimize`` call costs BigDL a restart and a
    slower first step (measured: docs/bench-cells.md)."""
    if not evaluates or not spec.evaluates:
        return [spec.total_iterations]
    return [done for done in range(1, spec.total_iterations + 1) if spec.eval_due(done)]


def eval_batch(spec: RunSpec, global_batch: int, parts: int) -> int:
    """Samples per evaluation batch: a multiple of ``parts`` (BigDL's ``evaluate`` splits
    it evenly over the RDD's partitions), at least the run's global batch."""
    wanted = max(global_batch, MNIST_EVAL_BATCH) if spec.mnist_sized else global_batch
    return -(-wanted // parts) * parts


def block(
    heldout_dir: str, part: int, parts: int, model: str, mean: float, std: float
) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets of held-out block ``part`` (sha256-checked), converted as
    training samples are, with the TRAINING set's ``mean`` and ``std``."""
    shards = ShardSet(heldout_dir)
    shards.verify(*shards.rank_range(part, parts))
    images, labels = shards.load_part(part, parts)
    return convert(images, labels, model, mean, std)


class HeldOut:
    """The held-out set as an RDD of Samples (one partition per executor) and BigDL's
    validation methods for the metrics of the run's model (``dlscale.quality.MODEL_METRICS``):
    ``Top1Accuracy``/``Top5Accuracy`` (hits / samples), and for the AutoEncoder ``Loss`` of
    an ``MSECriterion``, which BigDL weights by each batch's samples, so that it is the mean
    over all pixels and images whatever the batches."""

    def __init__(self, sc: Any, ctx: RunContext, parts: int, global_batch: int, mean: float, std: float):
        spec = ctx.spec
        self.shards = ShardSet(ctx.heldout_dir)  # the index and the files' sizes, on the driver
        self.dataset = str(self.shards.index["dataset"])
        self.metrics = quality.metrics_of(spec.model)
        self.batch = eval_batch(spec, global_batch, parts)
        directory, model = str(ctx.heldout_dir.resolve()), spec.model

        def samples(index: int, _: Any) -> Iterator[Any]:
            return as_samples(*block(directory, index, parts, model, mean, std))

        self.rdd = sc.parallelize(range(parts), parts).mapPartitionsWithIndex(samples)
        if spec.mnist_sized:  # 10,000 small samples: read and converted once, at the first evaluation
            self.rdd = self.rdd.cache()

    def methods(self) -> list[Any]:
        from bigdl.dllib.nn.criterion import MSECriterion
        from bigdl.dllib.optim.optimizer import Loss, Top1Accuracy, Top5Accuracy

        made = {"top1": Top1Accuracy, "top5": Top5Accuracy, "mse": lambda: Loss(MSECriterion())}
        return [made[metric]() for metric in self.metrics]

    def evaluate(self, model: Any) -> dict[str, tuple[float, int]]:
        """metric -> (value, samples) of BigDL's trained ``model`` on the whole held-out set;
        the model is back in training mode afterwards."""
        try:
            found = model.evaluate(self.rdd, self.batch, self.methods())
        finally:
            model.training()
        results: dict[str, tuple[float, int]] = {}
        for metric, result in zip(self.metrics, found, strict=True):
            n = int(result.total_num)
            if n != self.shards.num_samples:
                raise RuntimeError(f"BigDL evaluated {n} of the {self.shards.num_samples} held-out samples")
            value = float(result.result)
            if metric != "mse":  # BigDL's float32 share, back to hits / samples exactly
                value = round(value * n) / n
            results[metric] = (value, n)
        return results


def evaluate_and_decide(ctx: RunContext, iteration: int, heldout: HeldOut, model: Any) -> bool:
    """After ``iteration`` (0-based) has trained: evaluate, record, and say whether the
    quality target is met (training stops). Only the evaluation is timed, as ``eval_s``."""
    started = time.perf_counter()
    results = heldout.evaluate(model)
    eval_s = time.perf_counter() - started
    return ctx.record_eval(iteration, results, eval_s, heldout=heldout.dataset)

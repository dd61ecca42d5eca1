"""The study's shards as BigDL Samples, made where they are used: on each executor.

Each executor's part of the shard set is its rank block (``ShardSet.rank_range``, the same
contiguous split the other frameworks' ranks read), read and converted in the executor's
Python worker, so the driver never holds or ships the data. Only as many samples as the
run will consume are converted (a run of a few hundred steps does not pay for all of
MNIST). Before it reads anything, a partition checks the sha256 of every shard file its
block overlaps against the shard index (a corrupted shard fails the run loudly, as in the
other runners, and each executor hashes only what it reads).

Two ways in (the study's ``input``):

- ``memory`` (default): one partition per executor reads its whole block at once
  (``ShardSet.load_part``) and keeps the samples it needs.
- ``pipeline``: Spark's own input pipeline, an RDD of the block's index ranges with
  ``input_workers`` partitions per executor; each partition reads only its rows through
  memory maps (``ShardSet.take``), a batch at a time.

Either way DistriOptimizer materialises (caches) the whole training RDD before its first
step and then takes every mini-batch from that in-memory cache (its ``data.next()``, which
BigDL times together with the weight fetch as ``get weights average``): a BigDL step never
waits for the shards. What input costs BigDL is that one-off caching, which the driver log
brackets ("caching training rdd ..." .. "Cache thread models..."); the runner records it
as ``input_load_s`` (see dlscale.runners.bigdl.train).

With ``init: shared`` (the parity check's runs) an executor holds instead its ranks'
slices of one global batch sequence over the whole training set (``shared_rdd``); BigDL
still draws each mini-batch from its cache in its own order, a designed difference.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.data.shards import GlobalBatchSlices, ShardSet

CHUNK = 512  # rows per ``take`` in pipeline mode: bounded memory per Python worker


def picks(n: int, limit: int, seed: int) -> np.ndarray:
    """Sorted positions (within a block of ``n``) of the ``limit`` samples a run consumes."""
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:limit])


def pipeline_indices(start: int, stop: int, limit: int, seed: int, worker: int, workers: int) -> np.ndarray:
    """Global sample positions that input worker ``worker`` of ``workers`` reads from the
    block ``[start, stop)``: a contiguous slice of the block's ``picks``, so the workers of
    one block read disjoint sets that together are exactly what ``memory`` mode reads."""
    mine = picks(stop - start, limit, seed)
    return mine[worker * len(mine) // workers : (worker + 1) * len(mine) // workers] + start


def convert(
    images: np.ndarray, labels: np.ndarray, model: str, mean: float, std: float
) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, C, H, W float32) and targets, normalised as the torch runner does.

    Classifier targets are 1-based class indices (ClassNLLCriterion); the AutoEncoder's
    target is its own input, flattened, on [0, 1].
    """
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255.0)
    if model == "autoencoder":
        return x, x.reshape(len(x), -1).copy()
    x = (x - np.float32(mean)) / np.float32(std)
    return x, (labels.astype(np.float32) + 1.0).reshape(-1, 1)


def arrays(
    data_dir: str, part: int, parts: int, model: str, limit: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``memory`` mode: features and targets of one executor's block, read at once."""
    shards = ShardSet(data_dir)
    start, stop = shards.rank_range(part, parts)
    shards.verify(start, stop)
    images, labels = shards.load_part(part, parts)
    pick = picks(len(labels), limit, seed + part)
    return convert(images[pick], labels[pick], model, shards.mean, shards.std)


def as_samples(features: np.ndarray, targets: np.ndarray) -> Iterator[Any]:
    """BigDL Samples of converted features and targets (also the held-out set's)."""
    from bigdl.dllib.utils.common import Sample

    for x, y in zip(features, targets, strict=True):
        yield Sample.from_ndarray(x, y)


def samples(data_dir: str, part: int, parts: int, model: str, limit: int, seed: int) -> Iterator[Any]:
    yield from as_samples(*arrays(data_dir, part, parts, model, limit, seed))


def pipeline_samples(
    data_dir: str, part: int, parts: int, worker: int, workers: int, model: str, limit: int, seed: int
) -> Iterator[Any]:
    """``pipeline`` mode: the ``worker``-th of ``workers`` slices of executor ``part``'s picks.

    The slices of one block together are exactly the samples ``memory`` mode picks; each
    is read a chunk of rows at a time through memory maps.
    """
    shards = ShardSet(data_dir)
    start, stop = shards.rank_range(part, parts)
    mine = pipeline_indices(start, stop, limit, seed + part, worker, workers)
    if len(mine):
        shards.verify(int(mine[0]), int(mine[-1]) + 1)
    for first in range(0, len(mine), CHUNK):
        images, labels = shards.take(mine[first : first + CHUNK])
        yield from as_samples(*convert(images, labels, model, shards.mean, shards.std))


def training_rdd(
    sc: Any, data_dir: str, model: str, parts: int, limit: int, seed: int, input_workers: int = 0
) -> Any:
    """An RDD of Samples: one partition per executor (``memory``), or ``input_workers`` per
    executor reading index slices (``pipeline``, when ``input_workers`` > 0)."""
    if input_workers <= 0:

        def load(index: int, _: Any) -> Iterator[Any]:
            return samples(data_dir, index, parts, model, limit, seed)

        return sc.parallelize(range(parts), parts).mapPartitionsWithIndex(load)

    def read(index: int, _: Any) -> Iterator[Any]:
        part, worker = divmod(index, input_workers)
        return pipeline_samples(data_dir, part, parts, worker, input_workers, model, limit, seed)

    total = parts * input_workers
    return sc.parallelize(range(total), total).mapPartitionsWithIndex(read)


def shared_indices(n: int, batch: int, world: int, ranks: range, seed: int, iterations: int) -> np.ndarray:
    """``init: shared``: the global sample positions an executor's ``ranks`` train on, each
    rank's slices of the first ``iterations`` global batches (``GlobalBatchSlices`` over
    the whole set), so that N ranks of ``batch`` hold exactly what one rank of N x
    ``batch`` holds. BigDL still draws its mini-batches from them in its own order."""
    slices = []
    for rank in ranks:
        batches = GlobalBatchSlices(n, batch, world, rank, seed)
        slices.extend(next(batches) for _ in range(iterations))
    return np.concatenate(slices) if slices else np.zeros(0, dtype=np.int64)


def shared_samples(
    data_dir: str, ranks: range, world: int, batch: int, model: str, iterations: int, seed: int
) -> Iterator[Any]:
    """``init: shared``: the Samples of an executor's ranks' global batch slices (the whole
    set is checksummed: every sample may be drawn; MNIST-sized data only)."""
    shards = ShardSet(data_dir)
    shards.verify()
    mine = shared_indices(shards.num_samples, batch, world, ranks, seed, iterations)
    for first in range(0, len(mine), CHUNK):
        images, labels = shards.take(mine[first : first + CHUNK])
        yield from as_samples(*convert(images, labels, model, shards.mean, shards.std))


def shared_rdd(
    sc: Any,
    data_dir: str,
    model: str,
    parts: int,
    ranks_per_part: int,
    batch: int,
    iterations: int,
    seed: int,
) -> Any:
    """``init: shared``: one partition per executor, holding its ranks' slices of the run's
    global batch sequence (executor k's ranks are ``k x ranks_per_part ..``)."""
    world = parts * ranks_per_part

    def load(index: int, _: Any) -> Iterator[Any]:
        ranks = range(index * ranks_per_part, (index + 1) * ranks_per_part)
        return shared_samples(data_dir, ranks, world, batch, model, iterations, seed)

    return sc.parallelize(range(parts), parts).mapPartitionsWithIndex(load)

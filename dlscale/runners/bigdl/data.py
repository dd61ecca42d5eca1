"""The study's shards as BigDL Samples, made where they are used: on each executor.

Each Spark partition is one executor's part of the shard set (``ShardSet.load_part``, the
same contiguous split the other frameworks' ranks read), converted in the executor's Python
worker, so the driver never holds or ships the data. Only as many samples as the run will
consume are converted (a run of a few hundred steps does not pay for all of MNIST).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.data.shards import ShardSet


def arrays(
    data_dir: str, part: int, parts: int, model: str, limit: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, C, H, W float32) and targets of one part, normalised as the torch runner does.

    Classifier targets are 1-based class indices (ClassNLLCriterion); the AutoEncoder's
    target is its own input, flattened, on [0, 1].
    """
    shards = ShardSet(data_dir)
    images, labels = shards.load_part(part, parts)
    if len(labels) > limit:
        pick = np.sort(np.random.default_rng(seed + part).permutation(len(labels))[:limit])
        images, labels = images[pick], labels[pick]
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255.0)
    if model == "autoencoder":
        return x, x.reshape(len(x), -1).copy()
    x = (x - np.float32(shards.mean)) / np.float32(shards.std)
    return x, (labels.astype(np.float32) + 1.0).reshape(-1, 1)


def samples(data_dir: str, part: int, parts: int, model: str, limit: int, seed: int) -> Iterator[Any]:
    from bigdl.dllib.utils.common import Sample

    features, targets = arrays(data_dir, part, parts, model, limit, seed)
    for x, y in zip(features, targets, strict=True):
        yield Sample.from_ndarray(x, y)


def training_rdd(sc: Any, data_dir: str, model: str, parts: int, limit: int, seed: int) -> Any:
    """An RDD of Samples with one partition per executor, each built from its own part."""

    def load(index: int, _: Any) -> Iterator[Any]:
        return samples(data_dir, index, parts, model, limit, seed)

    return sc.parallelize(range(parts), parts).mapPartitionsWithIndex(load)

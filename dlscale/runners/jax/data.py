"""The JAX runner's batches: numpy arrays of the rank's own part, prepared before training.

The sampling every runner shares (``dlscale.data.shards``): the rank's own block,
reshuffled per epoch with ``seed + rank`` (``IndexBatches``), or with ``init: shared`` its
slice of one global batch sequence over the whole set (``GlobalBatchSlices``). The part is
normalised whole before training when it fits (``dlscale.runners.prepared``), as the torch
runner's: [0, 1] pixels for the autoencoder, else standardised with the training set's
mean and std. ``input: memory`` only (a ``pipeline`` run fails at once, saying so).
Numpy only: the step puts a batch on the device itself.
"""

from __future__ import annotations

import numpy as np

from dlscale.data.shards import GlobalBatchSlices, IndexBatches, ShardSet
from dlscale.runners.common import RunContext, RunFailure
from dlscale.runners.prepared import prepare_whole


def normalise(images: np.ndarray, model: str, mean: float, std: float) -> np.ndarray:
    """float32 NHWC input as the torch runner computes it (the same numbers, channels last)."""
    x = images.astype(np.float32) / np.float32(255.0)
    if model == "autoencoder":
        return x  # the autoencoder reconstructs raw [0, 1] pixels
    return (x - np.float32(mean)) / np.float32(std)


class Batches:
    """Endless (x, y) numpy batches of this rank: y is int32 labels, or for the autoencoder
    its flattened [0, 1] input (the loss's target)."""

    def __init__(self, ctx: RunContext):
        spec = ctx.spec
        if spec.input != "memory":
            raise RunFailure(
                f"the jax runner feeds batches from memory only (input: {spec.input} is not written)"
            )
        shards = ShardSet(ctx.data_dir, verify=True)  # a corrupted shard fails the run, loudly
        shared = spec.init == "shared"
        images, labels = shards.load_all() if shared else shards.load_part(ctx.rank, ctx.world_size)
        needed = spec.batch * ctx.world_size if shared else spec.batch
        if len(labels) < needed:
            raise ValueError(
                f"rank {ctx.rank} holds {len(labels)} samples, fewer than its batch of {spec.batch}"
                + (f" x {ctx.world_size} ranks (init: shared)" if shared else "")
                + ": make the dataset larger or the batch smaller"
            )
        self.model, self.mean, self.std = spec.model, float(shards.mean), float(shards.std)
        self.indices: IndexBatches | GlobalBatchSlices = (
            GlobalBatchSlices(len(labels), spec.batch, ctx.world_size, ctx.rank, spec.seed)
            if shared
            else IndexBatches(len(labels), spec.batch, spec.seed + ctx.rank)
        )
        self.images, self.labels = images, labels
        self.x_all = normalise(images, spec.model, self.mean, self.std) if prepare_whole(images) else None

    def convert(self, images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Uint8 images and labels as the step takes them (the evaluation converts here too)."""
        x = normalise(images, self.model, self.mean, self.std)
        return x, self.target(x, labels)

    def target(self, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
        if self.model == "autoencoder":
            return x.reshape(x.shape[0], -1)
        return labels.astype(np.int32)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        index = next(self.indices)
        if self.x_all is None:
            return self.convert(self.images[index], self.labels[index])
        x = self.x_all[index]
        return x, self.target(x, self.labels[index])

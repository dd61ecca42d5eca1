"""Mini-batches for the TensorFlow runner, in numpy (no TF import).

The same sampling as the torch runner: one part of the shard set per worker (its own
contiguous block), reshuffled every epoch with ``seed + part``, sorted indices for memory-map
friendly reads. Batches stay uint8 until ``normalise``: in ps mode they travel to the
workers as uint8 (4x less traffic) and are normalised there.
"""

from __future__ import annotations

import numpy as np

from dlscale.data.shards import ShardSet

MNIST_MODELS = ("lenet", "autoencoder")


class Batches:
    """Endless mini-batches of one part (``part`` of ``parts``) of a shard set."""

    def __init__(self, data_dir: str, part: int, parts: int, batch: int, seed: int):
        shards = ShardSet(data_dir, verify=True)  # a corrupted shard fails the run, loudly
        self.images, self.labels = shards.load_part(part, parts)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = batch
        if len(self.labels) < batch:
            raise ValueError(
                f"part {part} of {parts} holds {len(self.labels)} samples, fewer than its batch of {batch}:"
                " make the dataset larger or the batch smaller"
            )
        self.rng = np.random.default_rng(seed + part)
        self.order = self.rng.permutation(len(self.labels))
        self.position = 0

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next (uint8 NHWC images, int64 labels)."""
        if self.position + self.batch > len(self.order):
            self.order = self.rng.permutation(len(self.labels))
            self.position = 0
        index = np.sort(self.order[self.position : self.position + self.batch])
        self.position += self.batch
        return np.ascontiguousarray(self.images[index]), self.labels[index].astype(np.int64)


def normalise(images: np.ndarray, model: str, mean: float, std: float) -> np.ndarray:
    """float32 input as the torch runner feeds it: [0, 1] for the autoencoder, else standardised."""
    x = images.astype(np.float32) / 255.0
    if model == "autoencoder":
        return x  # the autoencoder reconstructs raw [0, 1] pixels
    return (x - np.float32(mean)) / np.float32(std)

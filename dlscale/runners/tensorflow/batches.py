"""Mini-batches for the TensorFlow runner: from memory, or through a tf.data pipeline.

The same sampling as the torch runner: one part of the shard set per worker (its own
contiguous block), reshuffled every epoch with ``seed + part``, sorted indices for memory-map
friendly reads (``IndexBatches``). Batches stay uint8 until ``normalise``: in ps mode they
travel to the workers as uint8 (4x less traffic) and are normalised there.

With ``init: shared`` (the parity check) a part is instead its slice of one global batch
sequence over the whole set (``GlobalBatchSlices``): N parts of ``batch`` see exactly the
samples one part of N x ``batch`` sees.

Two feeds, chosen by the run spec's ``input`` (``feed``):
- ``memory`` (default, ``MemoryFeed``): the part is loaded before training
  (``ShardSet.load_part``) and, when it fits (``dlscale.runners.prepared``), normalised
  whole there; each step's batch is then only gathered and made a tensor (a part too large
  is normalised one batch at a time).
- ``pipeline`` (``PipelineFeed``): nothing is loaded up front. A ``tf.data`` pipeline
  draws the same index batches from a generator, reads each one from the shards through
  memory maps (``ShardSet.take`` in a ``tf.numpy_function``) and normalises it, in
  ``input_workers`` parallel map calls on a private thread pool of that size, and keeps
  two batches prefetched while the step runs; this is how a TensorFlow job streams a set
  too large for memory. The normalisation is the very numpy code of the memory feed, so
  both feeds give bit-identical batches in the same order (the same losses), and only
  the time the step waits for its batch differs.
Either way ``next()`` returns tensors, and the caller times it as ``input_s``.

Nothing here imports TensorFlow: the caller passes its module in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.data.shards import GlobalBatchSlices, IndexBatches, ShardSet
from dlscale.runners.prepared import prepare_whole
from dlscale.runspec import RunSpec


def _check_part(size: int, part: int, parts: int, batch: int) -> None:
    if size < batch:
        raise ValueError(
            f"part {part} of {parts} holds {size} samples, fewer than its batch of {batch}:"
            " make the dataset larger or the batch smaller"
        )


def index_stream(n: int, part: int, parts: int, batch: int, seed: int, shared: bool) -> Any:
    """The part's index batches: over its own block of ``n`` (``IndexBatches``, seed + part),
    or with ``shared`` its slice of one global batch sequence over the whole set of ``n``."""
    if shared:
        return GlobalBatchSlices(n, batch, parts, part, seed)
    return IndexBatches(n, batch, seed + part)


class Batches:
    """Endless mini-batches of one part (``part`` of ``parts``) of a shard set, in memory.

    ``shared`` (``init: shared``): the whole set is loaded and the part trains on its slice
    of each global batch (``GlobalBatchSlices``)."""

    def __init__(self, data_dir: str, part: int, parts: int, batch: int, seed: int, shared: bool = False):
        shards = ShardSet(data_dir, verify=True)  # a corrupted shard fails the run, loudly
        self.images, self.labels = shards.load_all() if shared else shards.load_part(part, parts)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = batch
        _check_part(len(self.labels), part, parts, batch * parts if shared else batch)
        self.indices = index_stream(len(self.labels), part, parts, batch, seed, shared)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next (uint8 NHWC images, int64 labels)."""
        index = next(self.indices)
        return np.ascontiguousarray(self.images[index]), self.labels[index].astype(np.int64)


def normalise(images: np.ndarray, model: str, mean: float, std: float) -> np.ndarray:
    """float32 input as the torch runner feeds it: [0, 1] for the autoencoder, else standardised."""
    x = images.astype(np.float32) / 255.0
    if model == "autoencoder":
        return x  # the autoencoder reconstructs raw [0, 1] pixels
    return (x - np.float32(mean)) / np.float32(std)


class MemoryFeed:
    """``input: memory``: batches indexed from the part loaded in memory, made tensors.

    ``normalised=False`` keeps them uint8 (ps mode: the worker normalises).
    """

    def __init__(self, tf: Any, batches: Batches, model: str, normalised: bool = True):
        self.tf, self.batches, self.model, self.normalised = tf, batches, model, normalised
        self.image_shape = batches.image_shape
        self.mean, self.std = batches.mean, batches.std
        self.x_all: np.ndarray | None = None
        if normalised and prepare_whole(batches.images):
            # Before training: each step only gathers its rows (no conversion in the loop).
            self.x_all = normalise(batches.images, model, self.mean, self.std)
            self.y_all = batches.labels.astype(np.int64)

    def next(self) -> tuple[Any, Any]:
        if self.x_all is not None:
            index = next(self.batches.indices)
            return self.tf.constant(self.x_all[index]), self.tf.constant(self.y_all[index])
        images, labels = self.batches.next()
        if self.normalised:
            images = normalise(images, self.model, self.mean, self.std)
        return self.tf.constant(images), self.tf.constant(labels)

    def close(self) -> None:
        """Nothing runs in the background of a memory feed."""


class PipelineFeed:
    """``input: pipeline``: a tf.data pipeline over part ``part`` of ``parts`` of the shards.

    generator of index batches (``IndexBatches``, same seed as memory mode)
      -> ``map(take [+ normalise])`` in ``workers`` parallel, order-preserving calls
      -> ``prefetch(2)``; on a private thread pool of ``workers`` threads, so the pipeline
    uses the threads the study gave it, beside the rank's intra/inter-op pools.
    """

    PREFETCH = 2

    def __init__(
        self,
        tf: Any,
        data_dir: str,
        part: int,
        parts: int,
        batch: int,
        seed: int,
        model: str,
        workers: int,
        normalised: bool = True,
        shared: bool = False,
    ):
        shards = ShardSet(data_dir, verify=True)  # a corrupted shard fails the run, loudly
        start, stop = (0, shards.num_samples) if shared else shards.rank_range(part, parts)
        _check_part(stop - start, part, parts, batch * parts if shared else batch)
        self.tf, self.model, self.normalised = tf, model, normalised
        self.image_shape: tuple[int, ...] = tuple(shards.image_shape)
        self.mean, self.std = float(shards.mean), float(shards.std)
        indices = index_stream(stop - start, part, parts, batch, seed, shared)

        def index_batches() -> Any:
            for index in indices:
                yield start + index  # global positions of this part's samples

        def read(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            images, labels = shards.take(index)  # memory maps: only these rows are read
            if normalised:
                return normalise(images, model, self.mean, self.std), labels
            return images, labels

        x_type = tf.float32 if normalised else tf.uint8
        x_shape = [batch, *self.image_shape]

        def read_graph(index: Any) -> tuple[Any, Any]:
            images, labels = tf.numpy_function(read, [index], [x_type, tf.int64], stateful=False)
            return tf.ensure_shape(images, x_shape), tf.ensure_shape(labels, [batch])

        options = tf.data.Options()
        options.threading.private_threadpool_size = max(1, workers)
        options.threading.max_intra_op_parallelism = 1
        options.autotune.enabled = False  # the pipeline's shape is the study's, not tuned away
        dataset = (
            tf.data.Dataset.from_generator(index_batches, output_signature=tf.TensorSpec([batch], tf.int64))
            .map(read_graph, num_parallel_calls=max(1, workers), deterministic=True)
            .prefetch(self.PREFETCH)
            .with_options(options)
        )
        self.iterator: Any = iter(dataset)  # starts filling the prefetch buffer now

    def next(self) -> tuple[Any, Any]:
        return next(self.iterator)

    def close(self) -> None:
        """Stop the pipeline's threads (the iterator owns them)."""
        self.iterator = None


def feed(
    tf: Any, spec: RunSpec, data_dir: str, part: int, parts: int, normalised: bool = True
) -> MemoryFeed | PipelineFeed:
    """The feed the run spec asks for (``input``: memory, the default, or pipeline)."""
    shared = spec.init == "shared"
    if spec.input == "pipeline":
        workers = spec.input_workers
        return PipelineFeed(
            tf, data_dir, part, parts, spec.batch, spec.seed, spec.model, workers, normalised, shared
        )
    batches = Batches(data_dir, part, parts, spec.batch, spec.seed, shared)
    return MemoryFeed(tf, batches, spec.model, normalised)

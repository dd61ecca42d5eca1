"""How a Caffe rank gets its mini-batches: from memory, or through a prefetching data layer.

Both feeds draw the same index batches from the rank's own part of the shards (one
permutation per epoch, seeded ``seed + rank``, sorted indices; as the torch and TensorFlow
runners) and convert them with the same ``preprocess``, so they train on bit-identical
batches in the same order and only the time the step waits for its batch (``input_s``)
differs. With the shared initialisation (``shared=True``, run spec ``init: shared``) they
draw the rank's slice of one global batch sequence over the whole set instead
(``GlobalBatchSlices``): N ranks of b then see exactly what one rank of N x b sees.

- ``input: memory`` (``Batches``): the part is loaded before training and, when it fits
  (``dlscale.runners.prepared``), converted whole there; before each step the batch's
  rows are gathered straight into the net's ``Input`` blobs (one copy, no conversion; a
  part too large is converted one batch at a time).
- ``input: pipeline`` (``PrefetchFeed``): the net starts with Caffe's ``MemoryData`` data
  layer instead (``models.memory_data``), and a background thread reads each batch from
  the shards through memory maps (``ShardSet.take``; nothing is loaded up front) and
  converts it into a ring of ``PREFETCH`` batch slots, ahead of the steps. This is the
  shape of Caffe's own ``BasePrefetchingDataLayer`` (a prefetch thread filling
  ``data_param.prefetch`` = 4 batches, the step taking the next full one). The ring is
  handed to the layer once (``net.set_input_arrays``): the layer's forward points its
  ``data``/``label`` tops at the next slot (no copy) and moves on by one batch per step,
  cycling through the slots in the order the thread fills them; the runner waits for that
  slot to be full before the step (``input_s``) and frees it after.

Why not pycaffe's ``Python`` layer (a data layer written in Python, the usual way to feed
pycaffe from custom readers): the project's Caffe build (``scripts/build_caffe.sh``) is made
without ``WITH_PYTHON_LAYER``, so the layer type does not exist there (``Unknown layer
type: Python``); ``MemoryData`` is compiled into every Caffe. A Python layer would not
overlap more either: its ``forward`` runs inside ``solver.step`` like this feed's wait.

The prefetcher is a thread, one per rank, as in Caffe (``input_workers`` is not used).
pycaffe holds Python's GIL for the whole of ``solver.step`` (its bindings do not release
it), so the thread reads and converts only while the rank is in Python: between steps
(writing events), waiting for its batch, and, with several ranks, during the gradient
all-reduce (its MPI calls wait in Python, ``parallel.interruptible``). On one rank most of
a batch's reading and conversion therefore shows up as ``input_s``; Caffe's own C++
prefetch thread (LMDB/LevelDB ``Data`` layer) would overlap it with the step, but those
databases are not built here.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np

from dlscale.data.shards import GlobalBatchSlices, IndexBatches, ShardSet
from dlscale.runners.prepared import prepare_whole

#: Batches in the prefetch ring: Caffe's ``data_param.prefetch`` default.
PREFETCH = 4


def preprocess(
    images: np.ndarray, model: str, mean: float, std: float, out: np.ndarray | None = None
) -> np.ndarray:
    """uint8 NHWC -> float32 NCHW in [0, 1], normalised except for the autoencoder.

    The same transform as the torch runner, so both train on identical numbers. ``out``
    (C-contiguous float32 NCHW) receives the result in place: the prefetcher writes
    straight into its ring slot.
    """
    x = images.transpose(0, 3, 1, 2)
    if out is None:
        out = np.empty(x.shape, dtype=np.float32)
    np.divide(x, np.float32(255.0), out=out, dtype=np.float32)  # uint8 -> float32 is exact
    if model != "autoencoder":
        out -= np.float32(mean)
        out /= np.float32(std)
    return out


def _check_part(size: int, rank: int, batch: int) -> None:
    if size < batch:
        raise ValueError(
            f"rank {rank} holds {size} samples, fewer than its batch of {batch}:"
            " make the dataset larger or the batch smaller"
        )


def rank_batches(
    shards: ShardSet, rank: int, world: int, batch: int, seed: int, shared: bool
) -> tuple[int, int, IndexBatches | GlobalBatchSlices]:
    """``(start, stop, indices)``: the sample range this rank draws from and its index
    batches within it (offsets from ``start``): its own block (``IndexBatches``, seeded
    ``seed + rank``), or with ``shared`` the whole set and its slice of the global batches."""
    if shared:
        if shards.num_samples < batch * world:
            raise ValueError(
                f"the dataset holds {shards.num_samples} samples, fewer than the global batch of"
                f" {batch * world}: make the dataset larger or the batch smaller"
            )
        return 0, shards.num_samples, GlobalBatchSlices(shards.num_samples, batch, world, rank, seed)
    start, stop = shards.rank_range(rank, world)
    _check_part(stop - start, rank, batch)
    return start, stop, IndexBatches(stop - start, batch, seed + rank)


class Batches:
    """``input: memory``: endless mini-batches from this rank's part, loaded up front."""

    def __init__(
        self, data_dir: Any, rank: int, world: int, batch: int, seed: int, model: str, shared: bool = False
    ) -> None:
        shards = ShardSet(data_dir, verify=True)  # a corrupted shard fails the run, loudly
        _, _, self.indices = rank_batches(shards, rank, world, batch, seed, shared)
        self.images, self.labels = shards.load_all() if shared else shards.load_part(rank, world)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.model = model
        self.x_all: np.ndarray | None = None
        if prepare_whole(self.images):
            # Before training: a step only gathers its rows (``into``), no conversion.
            self.x_all = preprocess(self.images, model, self.mean, self.std)
            self.y_all = self.labels.astype(np.float32)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next (float32 NCHW images, float32 labels), as the net's blobs take them."""
        index = next(self.indices)
        if self.x_all is not None:
            return self.x_all[index], self.y_all[index]
        x = preprocess(self.images[index], self.model, self.mean, self.std)
        return x, self.labels[index].astype(np.float32)

    def into(self, data: np.ndarray, label: np.ndarray | None) -> None:
        """The next batch written into the net's blobs ``data`` (and ``label``), in place."""
        if self.x_all is None:
            x, y = self.next()
            data[...] = x
            if label is not None:
                label.reshape(-1)[...] = y
            return
        index = next(self.indices)
        np.take(self.x_all, index, axis=0, out=data)
        if label is not None:
            np.take(self.y_all, index, out=label.reshape(-1))


class InputPipelineError(RuntimeError):
    """The prefetch thread failed (an unreadable shard, ...): the run fails with its cause."""


class PrefetchFeed:
    """``input: pipeline``: a prefetch thread filling a ring that a MemoryData layer reads.

    Use: ``wait()`` before each step (blocks until the layer's next slot is full),
    ``solver.step(1)``, ``done(slot)`` after it; ``close()`` at the end.
    """

    def __init__(
        self, net: Any, data_dir: Any, rank: int, world: int, batch: int, seed: int, model: str,
        slots: int = PREFETCH, shared: bool = False,
    ) -> None:  # fmt: skip
        shards = ShardSet(data_dir, verify=True)  # a corrupted shard fails the run, loudly
        start, _, self.indices = rank_batches(shards, rank, world, batch, seed, shared)
        self.net, self.shards, self.start, self.batch, self.model = net, shards, start, batch, model
        self.mean, self.std = float(shards.mean), float(shards.std)
        height, width, channels = shards.image_shape
        self.slots = slots
        self.data = np.zeros((slots * batch, channels, height, width), dtype=np.float32)
        self.labels = np.zeros((slots * batch, 1, 1, 1), dtype=np.float32)
        # Once: the layer keeps pointers into the ring and wraps around it by itself. (Each
        # call would also pin its arrays to the net for the net's life: once is leak-free.)
        net.set_input_arrays(self.data, self.labels)
        self.free: queue.Queue[int | None] = queue.Queue()
        self.full: queue.Queue[int | BaseException] = queue.Queue()
        for slot in range(slots):
            self.free.put(slot)
        self.expected = 0  # the slot the layer's next forward reads
        self.thread = threading.Thread(target=self._fill, name="caffe-prefetch", daemon=True)
        self.thread.start()

    def _rows(self, slot: int) -> slice:
        return slice(slot * self.batch, (slot + 1) * self.batch)

    def _fill(self) -> None:
        try:
            while True:
                slot = self.free.get()
                if slot is None:
                    return
                images, labels = self.shards.take(self.start + next(self.indices))
                rows = self._rows(slot)
                preprocess(images, self.model, self.mean, self.std, out=self.data[rows])
                self.labels[rows, 0, 0, 0] = labels
                self.full.put(slot)
        except BaseException as err:  # noqa: BLE001 - handed to the training thread
            self.full.put(err)

    def wait(self) -> int:
        """Block until the slot the data layer reads next is full; return it."""
        item = self.full.get()
        if isinstance(item, BaseException):
            raise InputPipelineError(f"input pipeline failed: {type(item).__name__}: {item}") from item
        if item != self.expected:  # cannot happen with one FIFO filler; guard the invariant
            raise InputPipelineError(f"prefetched slot {item}, but the data layer reads slot {self.expected}")
        return item

    def done(self, slot: int) -> None:
        """After the step: check the layer read ``slot``, and let the thread refill it."""
        # The data top points into the ring after MemoryData's forward: at this slot.
        if self.net.blobs["data"].data.ctypes.data != self.data[self._rows(slot)].ctypes.data:
            raise InputPipelineError(f"the data layer did not read prefetched slot {slot}")
        self.expected = (slot + 1) % self.slots
        self.free.put(slot)

    def close(self) -> None:
        """Stop the prefetch thread (it ends after the batch it is converting, if any)."""
        self.free.put(None)
        self.thread.join(timeout=10)

"""The torch runner's batches: the rank's own part of the shards, in memory or through a
DataLoader with workers (``input: pipeline``), as the other runners' ``data``/``batches``
modules do for their frameworks. torch is passed in by the caller, never imported here at
module level.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dlscale.data.shards import GlobalBatchSlices, IndexBatches, ShardSet
from dlscale.runners.common import RunContext
from dlscale.runners.prepared import prepare_whole
from dlscale.runners.torch import settings as torch_settings


class Batches:
    """Endless mini-batches from this rank's own part of the shards, reshuffled per epoch.

    ``input: memory`` (the default): the part is loaded and, when it fits
    (``dlscale.runners.prepared``), normalised whole before training; a step then only
    gathers its rows (a part too large is converted one batch at a time). ``input: pipeline``: nothing is loaded up front; a
    torch DataLoader with ``input_workers`` worker processes reads each batch from the
    shards (memory maps) and converts it, overlapped with training, which is how a real
    job feeds a large set. Both modes draw the same index sequence (same seed), so they
    train on the same batches and only the time the step waits for input differs.

    ``init: shared`` (the parity check): the rank's part is the whole set, and it trains on
    its slice of one global batch sequence (``GlobalBatchSlices``), so N ranks of b see the
    samples one rank of N x b sees.
    """

    def __init__(self, ctx: RunContext, torch: Any):
        self.torch = torch
        shards = ShardSet(ctx.data_dir, verify=True)  # a corrupted shard fails the run, loudly
        spec = ctx.spec
        shared = spec.init == "shared"
        start, stop = (0, shards.num_samples) if shared else shards.rank_range(ctx.rank, ctx.world_size)
        self.mean, self.std = float(shards.mean), float(shards.std)
        self.batch = spec.batch
        self.model = spec.model
        self.channels_last = torch_settings.channels_last(spec)
        needed = self.batch * ctx.world_size if shared else self.batch
        if stop - start < needed:
            raise ValueError(
                f"rank {ctx.rank} holds {stop - start} samples, fewer than its batch of {self.batch}"
                + (f" x {ctx.world_size} ranks (init: shared)" if shared else "")
                + ": make the dataset larger or the batch smaller"
            )
        self.indices: IndexBatches | GlobalBatchSlices = (
            GlobalBatchSlices(stop, self.batch, ctx.world_size, ctx.rank, spec.seed)
            if shared
            else IndexBatches(stop - start, self.batch, spec.seed + ctx.rank)
        )
        self.loader: Any = None
        self.x_all: Any = None  # the whole part, normalised (memory mode, when it fits)
        if spec.input == "pipeline":
            workers = spec.input_workers
            loader = torch.utils.data.DataLoader(
                _ShardBatches(self, shards, start),
                batch_size=None,  # the sampler yields whole batches of indices
                sampler=self.indices,
                num_workers=workers,
                prefetch_factor=2,
                worker_init_fn=_worker_init,
                # Its own generator: the loader's seed draw must not move the global RNG
                # that initialises the model (both modes start from the same weights).
                generator=torch.Generator().manual_seed(spec.seed + ctx.rank),
            )
            self.loader = iter(loader)  # forks the workers now, before any collective starts
        else:
            self.images, self.labels = (
                shards.load_all() if shared else shards.load_part(ctx.rank, ctx.world_size)
            )
            if prepare_whole(self.images):
                # Before training: the steps gather rows of these tensors, nothing else.
                self.x_all = self._tensor(self.images)
                self.y_all = torch.from_numpy(self.labels.astype(np.int64))
                self.images = None

    def _tensor(self, images: np.ndarray) -> Any:
        torch = self.torch
        # One layout for every feed, with canonical strides: contiguous NCHW (as the gathered
        # rows of memory mode and a plain loop's tensors), or channels_last for the ImageNet
        # CNNs. A permuted view of a 1-channel batch also counts as contiguous but keeps other
        # strides, which pick other kernels whose summation order drifts the losses (1e-5).
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        pixels = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
        x = torch.empty(pixels.shape, dtype=torch.float32, memory_format=layout).copy_(pixels).div_(255.0)
        if self.model == "autoencoder":
            return x  # the autoencoder reconstructs raw [0, 1] pixels
        return x.sub_(self.mean).div_(self.std)

    def convert(self, images: np.ndarray, labels: np.ndarray) -> tuple[Any, Any]:
        """Uint8 images and their labels as the step takes them: input normalised with the
        training set's mean and std, and the loss's target (the autoencoder's: its [0, 1]
        input, flattened). The held-out evaluation converts its batches here too."""
        x = self._tensor(images)
        if self.model == "autoencoder":
            return x, x.flatten(1)
        return x, self.torch.from_numpy(labels.astype(np.int64))

    def next(self) -> tuple[Any, Any]:
        if self.loader is not None:
            return next(self.loader)
        index = next(self.indices)
        if self.x_all is None:
            return self.convert(self.images[index], self.labels[index])
        rows = self.torch.from_numpy(index)
        x = self.x_all.index_select(0, rows)
        if self.channels_last:
            x = x.contiguous(memory_format=self.torch.channels_last)
        if self.model == "autoencoder":
            return x, x.flatten(1)
        return x, self.y_all.index_select(0, rows)

    def close(self) -> None:
        """Stop the pipeline's workers (nothing to do in memory mode)."""
        if self.loader is not None:
            # What the iterator's __del__ does, done now: workers must not outlive the run.
            self.loader._shutdown_workers()
            self.loader = None


class _ShardBatches:
    """The pipeline's map-style dataset: a batch of rank-local indices -> converted tensors.

    Runs in the DataLoader's workers: each reads its rows through its own memory maps
    (``ShardSet.take``) and converts them exactly as memory mode does.
    """

    def __init__(self, batches: Batches, shards: ShardSet, start: int):
        self.batches, self.shards, self.start = batches, shards, start

    def __getitem__(self, index: np.ndarray) -> tuple[Any, Any]:
        images, labels = self.shards.take(self.start + index)
        return self.batches.convert(images, labels)


def _worker_init(worker_id: int) -> None:
    import tempfile

    import torch

    torch.set_num_threads(1)  # a worker converts batches; the rank's threads train
    # A worker hands each batch's tensors over by passing file descriptors through a Unix
    # socket that multiprocessing creates under TMPDIR, and socket paths are limited to 107
    # bytes. The launcher points TMPDIR into the run's own directory, which on a cluster
    # (or under pytest) is often too deep: the socket cannot be bound, and the rank waits
    # for its batch forever. Such a worker keeps its few bytes of sockets in /tmp instead.
    if len(tempfile.gettempdir()) > 64 and os.access("/tmp", os.W_OK):
        tempfile.tempdir = "/tmp"

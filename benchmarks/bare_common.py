"""Helpers the bare-loop arms share; standard library + numpy only (any framework venv).

A bare arm (``bare`` in ``benchmarks.<fw>_worker``) trains the model in the framework's
plainest loop, fed as a plain user loop over an in-memory dataset is fed: the whole set
normalised once before training (``Dataset``), and per step a fresh batch gathered from
it (the same index batches as the runner's, ``IndexBatches`` with the run's seed), so the
bare loop pays for what any training loop pays for and the ratio isolates the harness.
It stamps the end of every iteration (wall and process CPU time: throughputs from the
median gap, and from the low quantile of the CPU gaps as the runner arm's); the peak arm measures a
float32 matmul peak with the same threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.timing import CPU_QUANTILE, median_gap, quantile_gap, throughput
from dlscale.host.roofline import matmul_peak, numpy_matmul  # noqa: F401  (the workers call them from here)

if TYPE_CHECKING:
    from dlscale.runspec import RunSpec


class Dataset:
    """The whole shard set in memory, normalised once (float32, NHWC or NCHW), int64 labels;
    ``batches()`` yields fresh (x, y) numpy batches in the runner's order, forever."""

    def __init__(self, data: Path, model: str, nchw: bool):
        from dlscale.data.shards import ShardSet

        shards = ShardSet(data)
        images, labels = shards.load_part(0, 1)
        self.image_shape: tuple[int, ...] = tuple(images.shape[1:])
        self.x = normalised(images, model, float(shards.mean), float(shards.std), nchw)
        self.y = labels.astype(np.int64)

    def indices(self, batch: int, seed: int) -> Any:
        """The index batches a lone rank of a run with ``seed`` draws (``IndexBatches``)."""
        from dlscale.data.shards import IndexBatches

        return IndexBatches(len(self.y), batch, seed)

    def batches(self, batch: int, seed: int) -> Any:
        """Endless fresh (x, y) batches: rows gathered from the normalised set per step."""
        for index in self.indices(batch, seed):
            yield self.x[index], self.y[index]


def normalised(images: np.ndarray, model: str, mean: float, std: float, nchw: bool) -> np.ndarray:
    """float32 pixels as every runner feeds them: [0, 1] for the autoencoder, else standardised."""
    x = images.astype(np.float32)
    x /= np.float32(255.0)
    if model != "autoencoder":
        x -= np.float32(mean)
        x /= np.float32(std)
    if nchw:
        # A copy with canonical strides, not ascontiguousarray: the transposed view of 1-channel
        # images already counts as C-contiguous, so ascontiguousarray kept its strides, and the
        # gathered batches reached torch with a channel stride of 28 where the runner's have 784
        # (dlscale.runners.torch.data): a layout that kernels may tell apart, so not the runner's.
        return x.transpose(0, 3, 1, 2).copy(order="C")
    return np.ascontiguousarray(x, dtype=np.float32)


def timed_loop(step: Callable[[], Any], total: int) -> tuple[list[float], list[float]]:
    """Run ``step`` ``total`` times; wall and CPU stamps at the end of each."""
    stamps, cpu = [], []
    for _ in range(total):
        step()
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
    return stamps, cpu


def intervals_throughput(batch: int, stamps: list[float], first: int, q: float | None = None) -> float:
    """Samples per second from the gaps after stamp ``first``: their median, or their
    ``q``-quantile (the runner arm's own arithmetic, ``benchmarks.timing``)."""
    times = stamps[first:]
    if len(times) < 2:
        return float("nan")
    return throughput(batch, median_gap(times) if q is None else quantile_gap(times, q))


def bare_loop(spec: RunSpec, step: Callable[[], Any]) -> dict[str, float]:
    """Run ``step`` for the spec's warm-up + timed iterations; the bare arm's throughputs
    (wall and CPU time), from the end of the last warm-up iteration on, as the runner arm's."""
    stamps, cpu = timed_loop(step, spec.total_iterations)
    first = spec.warmup - 1
    return {
        "samples_per_s": intervals_throughput(spec.batch, stamps, first),
        "samples_per_cpu_s": intervals_throughput(spec.batch, cpu, first),
        "samples_per_cpu_q_s": intervals_throughput(spec.batch, cpu, first, CPU_QUANTILE),
    }

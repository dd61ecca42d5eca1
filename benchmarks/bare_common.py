"""Helpers the bare-loop arms share; standard library + numpy only (any framework venv).

A bare arm (``bare`` in ``benchmarks.<fw>_worker``) trains the model in the framework's
plainest loop on one fixed batch (prepared as the runner prepares its batches), stamps
the end of every iteration (wall and process CPU time); the peak arm measures a float32
matmul peak with the same threads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dlscale.runspec import RunSpec


def first_batch(data: Path, batch: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The first ``batch`` samples of the shard set (uint8 NHWC, int64 labels), mean, std."""
    from dlscale.data.shards import ShardSet

    shards = ShardSet(data)
    images, labels = shards.take(np.arange(batch))
    return np.ascontiguousarray(images), labels.astype(np.int64), float(shards.mean), float(shards.std)


def normalised(images: np.ndarray, model: str, mean: float, std: float, nchw: bool) -> np.ndarray:
    """float32 pixels as every runner feeds them: [0, 1] for the autoencoder, else standardised."""
    x = images.astype(np.float32) / np.float32(255.0)
    if model != "autoencoder":
        x = (x - np.float32(mean)) / np.float32(std)
    if nchw:
        x = x.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(x, dtype=np.float32)


def timed_loop(step: Callable[[], Any], total: int) -> tuple[list[float], list[float]]:
    """Run ``step`` ``total`` times; wall and CPU stamps at the end of each."""
    stamps, cpu = [], []
    for _ in range(total):
        step()
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
    return stamps, cpu


def intervals_throughput(batch: int, stamps: list[float], first: int) -> float:
    gaps = [b - a for a, b in zip(stamps[first:-1], stamps[first + 1 :], strict=True)]
    return batch / statistics.median(gaps) if gaps and statistics.median(gaps) > 0 else float("nan")


def bare_loop(spec: RunSpec, step: Callable[[], Any]) -> dict[str, float]:
    """Run ``step`` for the spec's warm-up + timed iterations; the bare arm's throughputs
    (wall and CPU time), from the end of the last warm-up iteration on, as the runner arm's."""
    stamps, cpu = timed_loop(step, spec.total_iterations)
    first = spec.warmup - 1
    return {
        "samples_per_s": intervals_throughput(spec.batch, stamps, first),
        "samples_per_cpu_s": intervals_throughput(spec.batch, cpu, first),
    }


def matmul_peak(matmul: Callable[[int], Callable[[], Any]], sizes: tuple[int, ...] = (1024, 2048),
                seconds: float = 0.6) -> dict[str, float]:  # fmt: skip
    """Best float32 matmul FLOP/s over ``sizes`` (median per size), wall and CPU time.

    ``matmul(n)`` returns a thunk that multiplies two n x n float32 matrices with the
    framework's own kernel (its BLAS / oneDNN), in the threads the worker was given.
    """
    best = best_cpu = 0.0
    for n in sizes:
        call = matmul(n)
        call()
        times, cpu_times = [], []
        deadline = time.perf_counter() + seconds
        while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
            t0, c0 = time.perf_counter(), time.process_time()
            call()
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        best = max(best, 2.0 * n**3 / statistics.median(times))
        best_cpu = max(best_cpu, 2.0 * n**3 / max(statistics.median(cpu_times), 1e-9))
    return {"peak_flops": best, "peak_flops_cpu": best_cpu}


def numpy_matmul(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return lambda: np.matmul(a, b, out=out)

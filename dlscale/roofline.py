"""Roofline fraction of a run: achieved FLOP/s against this host's matmul peak, same threads.

**FLOPs per sample** are counted once per model and are the same for every framework
(``FLOPS_PER_SAMPLE``): forward + backward, 2 FLOPs per multiply-add of every matmul and
convolution, counted by ``torch.utils.flop_counter.FlopCounterMode`` on the project's torch
models (``python -m benchmarks.torch_worker flops``; tests/unit/test_tuning.py recounts them
with the torch venv and fails when a model changes). Elementwise work (activations,
pooling, the update) is not counted: a few percent of these models' work, and not what
a matmul roofline bounds.

**The peak** is measured by the workflow on the host it runs on (rule ``matmul_peak``,
``python -m dlscale.roofline peak``): float32 square matmuls (n = 1024) through
numpy's BLAS, in a fresh process per thread count with ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to it, timed as the median of
repeated calls over about 0.3 s (at least 3 calls). The thread counts are
measured ``PEAK_ROUNDS`` times, interleaved (1, 2, ..., 1, 2, ...), and the median of the
rounds is the peak; every round is kept in the file.

A run's fraction: ``throughput x FLOPS_PER_SAMPLE / (world_size x peak(threads_per_rank))``,
each rank against the peak of its own threads. Above 1 means the framework's kernels beat
numpy's BLAS GEMM at that size (oneDNN's convolutions can), well below 1 a slow path.
Standard library only at import (numpy is imported by the measurement itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dlscale import atomic

#: Forward + backward FLOPs per sample (FlopCounterMode on torch 2.13.0 models, batch 2).
FLOPS_PER_SAMPLE: Mapping[str, float] = MappingProxyType(
    {
        "lenet": 13_182_000.0,
        "autoencoder": 15_430_000.0,
        "alexnet": 4_144_577_280.0,
        "resnet50": 24_299_077_632.0,
    }
)
#: Rounds of the whole thread sweep (the peak is their median).
PEAK_ROUNDS = 3
MATMUL_SIZES = (1024,)
SECONDS_PER_SIZE = 0.3
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def flops_per_sample(model: str) -> float:
    """A model's FLOPs per sample (NaN for a model without a count)."""
    return FLOPS_PER_SAMPLE.get(model, math.nan)


def thread_counts(cores: int, threads_per_rank: int) -> list[int]:
    """The thread counts to measure: 1 to the host's cores, and the study's threads."""
    return sorted({*range(1, max(cores, 1) + 1), threads_per_rank})


def numpy_matmul(n: int) -> Callable[[], Any]:
    """A thunk multiplying two n x n float32 matrices with numpy's BLAS (inputs made once)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return lambda: np.matmul(a, b, out=out)


def matmul_peak(
    matmul: Callable[[int], Callable[[], Any]], sizes: Sequence[int] = (1024, 2048), seconds: float = 0.6
) -> dict[str, float]:
    """Best float32 matmul FLOP/s over ``sizes`` (median per size), wall and CPU time.

    ``matmul(n)`` returns a thunk that multiplies two n x n float32 matrices with some
    library's kernel (numpy's BLAS here; each framework's own in ``benchmarks``), in the
    threads this process was given.
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


def _one_peak(sizes: Sequence[int] = MATMUL_SIZES, seconds: float = SECONDS_PER_SIZE) -> float:
    """Best float32 matmul FLOP/s over ``sizes`` in this process's threads (numpy BLAS)."""
    return matmul_peak(numpy_matmul, sizes, seconds)["peak_flops"]


def measure(threads: Sequence[int], rounds: int = PEAK_ROUNDS) -> dict[str, Any]:
    """The peak per thread count (module docstring: fresh process each, interleaved)."""
    samples: dict[int, list[float]] = {t: [] for t in threads}
    for _ in range(rounds):
        for count in threads:
            env = {**os.environ, **{name: str(count) for name in THREAD_VARIABLES}}
            out = subprocess.run(
                [sys.executable, "-m", "dlscale.roofline", "one"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            samples[count].append(float(out.stdout.strip()))
    import numpy as np

    return {
        "peak_flops": {str(t): statistics.median(v) for t, v in samples.items()},
        "rounds": {str(t): v for t, v in samples.items()},
        "method": (
            f"numpy {np.__version__} float32 matmul n={list(MATMUL_SIZES)}, median of repeated calls per size,"
            f" best size; a fresh process per thread count ({', '.join(THREAD_VARIABLES)}); median of"
            f" {rounds} interleaved rounds"
        ),
        "loadavg": list(os.getloadavg()),
        "cores": os.cpu_count(),
    }


def peak_of(peak: Mapping[str, Any] | None, threads: Any) -> float:
    """The measured peak FLOP/s at ``threads`` threads (NaN when not measured)."""
    if not peak:
        return math.nan
    try:
        return float(peak["peak_flops"][str(int(threads))])
    except (KeyError, TypeError, ValueError):
        return math.nan


def read_peak(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure this host's matmul peak per thread count.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("one", help="print one peak in this process's threads (internal)")
    peak = sub.add_parser("peak", help="measure every thread count and write the JSON file")
    peak.add_argument("--threads-per-rank", type=int, default=1)
    peak.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    peak.add_argument("--rounds", type=int, default=PEAK_ROUNDS)
    peak.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "one":
        print(_one_peak())
        return 0
    record = measure(thread_counts(args.cores, args.threads_per_rank), args.rounds)
    atomic.write_text(args.out, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

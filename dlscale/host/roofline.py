"""Roofline fraction of a run: achieved FLOP/s against this host's matmul peak, same threads.

**FLOPs per sample** are counted once per model and are the same for every framework
(``FLOPS_PER_SAMPLE``): forward + backward, 2 FLOPs per multiply-add of every matmul and
convolution, counted by ``torch.utils.flop_counter.FlopCounterMode`` on the project's torch
models (``python -m benchmarks.torch_worker flops``; tests/unit/test_tuning.py recounts them
with the torch venv and fails when a model changes). Elementwise work (activations,
pooling, the update) is not counted: a few percent of these models' work, and not what
a matmul roofline bounds.

**The peak** is measured by the workflow on the host it runs on (rule ``matmul_peak``,
``python -m dlscale.host.roofline peak``): float32 square matmuls (n = 1024) through
numpy's BLAS, in a fresh process per thread count with ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to it, timed as the median of
repeated calls over about 0.3 s (at least 3 calls). The thread counts are
measured ``PEAK_ROUNDS`` times, interleaved (1, 2, ..., 1, 2, ...), and the median of the
rounds is the peak; every round is kept in the file.

**Measured like a run, under the contention probe** (``dlscale.host.contention``): each sample
(one thread count in one round) times its matmuls between the probe's ``start()`` and
``stop()`` in its own process, over the CPUs that process may use, and records the share of
those CPUs that other work (and steal) took. A peak measured beside other work is too low,
and every fraction divided by it too high (one BigDL ResNet-50 fraction read 2.13 so). A
contended sample (``other_busy_share + steal_share`` fails ``contended_share``, as for a run) is
redone, up to ``PEAK_ATTEMPTS`` attempts in all; a sample still contended after them
**refuses the peak at that thread count**: the file keeps no ``peak_flops`` entry for it,
``refused`` names the measured shares of every attempt, and the count is not measured
again in later rounds. Every attempt, clean or not, is in ``attempts``.

*Refused means recorded, not failed.* The rule succeeds and writes the file; a run at a
refused thread count gets ``peak_flops`` and ``roofline_fraction`` NaN, and its ``flag``
gives the reason (``flag_of``). Failing the rule instead would stop the aggregate rule (the
peak is its input) and with it every table, finding and claim of the study, on exactly the
busy host where the study's own runs are already flagged and set aside one by one: the
fraction is one diagnostic column, not worth a study. The refusal is loud all the same: the
rule's log names the shares, the runs table's ``flag`` says it per run.

A run's fraction: ``throughput x FLOPS_PER_SAMPLE / (world_size x peak(threads_per_rank))``,
each rank against the peak of its own threads. Above 1 means the framework's kernels beat
numpy's BLAS GEMM at that size (oneDNN's convolutions can), the peak was measured slow, or
the FLOP count is wrong: a fraction that fails ``roofline_fraction`` (dlscale.thresholds) is
flagged in the runs table (``flag_of``), never silently plotted as fact.
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

from dlscale.base import atomic, foreign
from dlscale.host import contention
from dlscale.thresholds import threshold as _threshold

#: The contention rule of a run, and the fraction above which a roofline is wrong.
_CONTENDED_SHARE = _threshold("contended_share").value
_ROOFLINE = _threshold("roofline_fraction")

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
#: Attempts per sample: a contended one is redone until this many, then its thread count
#: is refused (module docstring).
PEAK_ATTEMPTS = 3
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


def _one_peak(
    sizes: Sequence[int] = MATMUL_SIZES,
    seconds: float = SECONDS_PER_SIZE,
    threshold: float = _CONTENDED_SHARE,
) -> dict[str, Any]:
    """Best float32 matmul FLOP/s over ``sizes`` in this process's threads (numpy BLAS), and
    the contention probe's fields over the measurement (this process's CPU time is its own)."""
    probe = contention.ContentionProbe(threshold=threshold)
    probe.start()
    flops = matmul_peak(numpy_matmul, sizes, seconds)["peak_flops"]
    return {"peak_flops": flops, **probe.stop()}


def sample_subprocess(count: int, threshold: float = _CONTENDED_SHARE) -> dict[str, Any]:
    """One sample: ``python -m dlscale.host.roofline one`` in a fresh process at ``count`` threads."""
    env = {**os.environ, **{name: str(count) for name in THREAD_VARIABLES}}
    out = subprocess.run(
        [sys.executable, "-m", "dlscale.host.roofline", "one", "--threshold", repr(threshold)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _refusal(count: int, tries: Sequence[Mapping[str, Any]], threshold: float) -> str:
    shares = ", ".join(
        f"{float(t['other_busy_share']):.0%}"
        + (f" + steal {float(t['steal_share']):.0%}" if t["steal_share"] else "")
        for t in tries
    )
    return (
        f"contended: other work took {shares} of the CPUs in {len(tries)} attempt(s) at {count} thread(s)"
        f" (contended from {threshold:.0%})"
    )


def measure(
    threads: Sequence[int],
    rounds: int = PEAK_ROUNDS,
    attempts: int = PEAK_ATTEMPTS,
    sample: Callable[[int], Mapping[str, Any]] | None = None,
    threshold: float = _CONTENDED_SHARE,
) -> dict[str, Any]:
    """The peak per thread count (module docstring: fresh process each, interleaved, each
    sample under the contention probe, a contended one redone, then its count refused).

    ``sample(count)`` measures one sample and returns ``peak_flops`` with the probe's fields
    (``other_busy_share``, ``steal_share``, ``contended``); by default a fresh process
    (``sample_subprocess``).
    """
    take = sample or (lambda count: sample_subprocess(count, threshold))
    samples: dict[int, list[float]] = {t: [] for t in threads}
    refused: dict[str, str] = {}
    log: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for count in threads:
            if str(count) in refused:
                continue
            tries: list[Mapping[str, Any]] = []
            for attempt in range(max(attempts, 1)):
                got = take(count)
                tries.append(got)
                log.append(
                    {
                        "threads": count,
                        "round": round_,
                        "attempt": attempt,
                        **{
                            k: got.get(k)
                            for k in ("peak_flops", "other_busy_share", "steal_share", "contended")
                        },
                    }
                )
                if not got["contended"]:
                    samples[count].append(float(got["peak_flops"]))
                    break
            else:
                refused[str(count)] = _refusal(count, tries, threshold)
                print(f"matmul peak at {count} thread(s) refused: {refused[str(count)]}", file=sys.stderr)
    try:
        import numpy as np

        library = f"numpy {np.__version__}"
    except ImportError:  # an injected sample needs no numpy here
        library = "numpy"
    return {
        "peak_flops": {str(t): statistics.median(v) for t, v in samples.items() if str(t) not in refused},
        "rounds": {str(t): v for t, v in samples.items()},
        "attempts": log,
        "refused": refused,
        "contended_share": threshold,
        "method": (
            f"{library} float32 matmul n={list(MATMUL_SIZES)}, median of repeated calls per size,"
            f" best size; a fresh process per thread count ({', '.join(THREAD_VARIABLES)}); median of"
            f" {rounds} interleaved rounds; each sample under the contention probe, redone while"
            f" contended (other work + steal above {threshold:g} of its CPUs), {attempts} attempts at most,"
            " then its thread count refused"
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


def refusal_of(peak: Mapping[str, Any] | None, threads: Any) -> str | None:
    """Why the peak at ``threads`` threads was refused (None: measured, or never checked)."""
    if not peak or not isinstance(peak.get("refused"), Mapping):
        return None
    try:
        return peak["refused"].get(str(int(threads)))
    except (TypeError, ValueError):
        return None


def above_roofline(fraction: float) -> bool:
    """Whether a roofline fraction is above the ``roofline_fraction`` threshold: a speed a
    matmul roofline rules out (NaN, no fraction, is not)."""
    return _ROOFLINE.fails(fraction)


def flag_of(fraction: float, threads: Any, peak: Mapping[str, Any] | None) -> str | None:
    """A run's roofline flag (None: nothing to say): its peak refused, so no fraction; or a
    fraction above the ``roofline_fraction`` threshold, which a matmul roofline cannot reach
    honestly."""
    why = refusal_of(peak, threads)
    if why is not None:
        return f"roofline: no fraction, the matmul peak at {threads} thread(s) was refused ({why})"
    if above_roofline(fraction):  # NaN is unknown, not a failure
        return (
            f"roofline: fraction {fraction:.2f} of the matmul peak at {threads} thread(s), above"
            f" {_ROOFLINE.value:g}: the peak was measured slow (a busy host?) or the FLOP count is wrong"
        )
    return None


#: A peak file is a few hundred bytes (one number per thread count).
MAX_PEAK_BYTES = 1 << 20


def read_peak(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The host's measured peak (``matmul_peak.json``), read as foreign input (a file from
    a copied study): a regular file of JSON, ``foreign.Refused`` naming it otherwise."""
    if path is None:
        return None
    peak = foreign.read_json(path, MAX_PEAK_BYTES)
    if not isinstance(peak, dict):
        raise foreign.Refused(foreign.file_label(path), f"not a JSON object but a JSON {type(peak).__name__}")
    return peak


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure this host's matmul peak per thread count.")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one", help="print one sample (JSON) in this process's threads (internal)")
    one.add_argument("--threshold", type=float, default=_CONTENDED_SHARE)
    peak = sub.add_parser("peak", help="measure every thread count and write the JSON file")
    peak.add_argument("--threads-per-rank", type=int, default=1)
    peak.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    peak.add_argument("--rounds", type=int, default=PEAK_ROUNDS)
    peak.add_argument("--attempts", type=int, default=PEAK_ATTEMPTS, help="per sample, while contended")
    peak.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "one":
        print(json.dumps(_one_peak(threshold=args.threshold)))
        return 0
    record = measure(thread_counts(args.cores, args.threads_per_rank), args.rounds, args.attempts)
    atomic.write_text(args.out, json.dumps(record, indent=2, sort_keys=True) + "\n")
    # Refused counts are recorded, not fatal (module docstring); stderr (the rule's log) says so.
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The arithmetic of a timed loop, for the workers: per-iteration times from time stamps,
throughputs, the arms' order, a framework's log rates.

Standard library only: the workers (``<framework>_worker``) import it inside framework
venvs, which have no scipy. It takes medians and quantiles of one loop's steps, never an
interval over repeats: those are the driver's (``benchmarks.stats``, on ``dlscale.analysis.stats``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def finite_median(values: Iterable[float | None]) -> float:
    """The median of the finite values (None, NaN and inf dropped: a missing split); NaN if none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(finite) if finite else math.nan


def arm_order(repeat: int, arms: Sequence[str]) -> list[str]:
    """The arms of one repeat, rotated by the repeat number (A B C, B C A, C A B, ...).

    Every arm runs first as often as the others, so neither gains from a warm cache or
    loses to a neighbour that starts during the first arm.
    """
    if not arms:
        return []
    shift = repeat % len(arms)
    return [*arms[shift:], *arms[:shift]]


def median_gap(times: Sequence[float]) -> float:
    """Median gap between consecutive time stamps: the per-iteration wall time of a loop.

    Taken between the ends of successive iterations, so it includes everything the loop
    does (data, bookkeeping, event writing), not just the part the loop times itself.
    """
    if len(times) < 2:
        raise ValueError(f"need at least two time stamps, got {len(times)}")
    gaps = [b - a for a, b in zip(times[:-1], times[1:], strict=True)]
    return statistics.median(gaps)


#: The quantile of a loop's per-iteration CPU times that stands for its own cost on a
#: shared host (``quantile_gap``).
CPU_QUANTILE = 0.1


def quantile_gap(times: Sequence[float], q: float) -> float:
    """The ``q``-quantile (lower order statistic) of the gaps between consecutive stamps.

    For CPU-time stamps on a shared, oversubscribed host: a neighbour on the other core
    only adds CPU time to a step (evicted caches, memory bandwidth), never removes it, so
    a low quantile of the steps (``CPU_QUANTILE``) is the loop's own cost and far steadier
    than the median (the measurements: benchmarks/README.md).
    """
    if len(times) < 2:
        raise ValueError(f"need at least two time stamps, got {len(times)}")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    gaps = sorted(b - a for a, b in zip(times[:-1], times[1:], strict=True))
    return gaps[int(q * (len(gaps) - 1))]


def throughput(samples_per_iteration: float, seconds_per_iteration: float) -> float:
    """Samples per second of a loop that handles ``samples_per_iteration`` each step."""
    if seconds_per_iteration <= 0:
        return math.nan
    return samples_per_iteration / seconds_per_iteration


def log_rates(events: Sequence[dict], warmup: int, batch: int) -> dict[str, float]:
    """Throughputs and per-step split of one run from its iteration events, for a framework
    timed from its own log (BigDL: millisecond time stamps, no CPU time of ours).

    ``events``: iteration events (0-based ``iteration``, ``time`` = the log line's time
    stamp, ``step_s`` = the framework's own step seconds, ``compute_s``/``comm_s`` or
    None). Warm-up iterations are left out; the gaps start at the end of the last warm-up
    iteration, so a run of W + N iterations gives N gaps. ``samples_per_s``: the global
    batch over the median gap (the whole loop); ``self_timed_samples_per_s``: over the
    framework's own median step.
    """
    if warmup < 1:
        raise ValueError("need at least one warm-up iteration (the first gap starts at its end)")
    ordered = sorted(events, key=lambda e: e["iteration"])
    timed = [e for e in ordered if e["iteration"] >= warmup]
    if len(timed) < 2:
        raise ValueError(f"need at least two timed iterations, got {len(timed)}")
    stamps = [float(e["time"]) for e in ordered if e["iteration"] >= warmup - 1]
    step = finite_median(e["step_s"] for e in timed)
    return {
        "samples_per_s": throughput(batch, median_gap(stamps)),
        "samples_per_cpu_s": math.nan,
        "self_timed_samples_per_s": throughput(batch, step),
        "step_s": step,
        "compute_s": finite_median(e.get("compute_s") for e in timed),
        "comm_s": finite_median(e.get("comm_s") for e in timed),
    }

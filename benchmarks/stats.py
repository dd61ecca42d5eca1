"""Pure arithmetic of the benchmarks: summaries over repeats, paired ratios, A/B order,
throughputs from time stamps.

Kept free of I/O and of any framework so that the numbers in the summary are unit-tested;
standard library only, so that workers in any framework's venv use it too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median with min/max over repeats: the one shape every benchmark figure takes."""

    median: float
    min: float
    max: float
    n: int

    def as_row(self, prefix: str) -> dict[str, float | int]:
        return {
            f"{prefix}_median": self.median,
            f"{prefix}_min": self.min,
            f"{prefix}_max": self.max,
            f"{prefix}_n": self.n,
        }


def summarize(values: Iterable[float]) -> Summary:
    """Median, min and max of the finite values (NaN/inf are dropped: a failed repeat)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return Summary(math.nan, math.nan, math.nan, 0)
    return Summary(statistics.median(finite), min(finite), max(finite), len(finite))


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-repeat ratios a_i / b_i of two arms measured side by side in repeat i.

    Pairing (rather than dividing two medians) cancels slow drift of a shared machine:
    both arms of one repeat saw the same neighbours.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"unpaired arms: {len(numerators)} vs {len(denominators)} repeats")
    return [a / b if b else math.nan for a, b in zip(numerators, denominators, strict=True)]


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> Summary:
    return summarize(paired_ratios(numerators, denominators))


def arm_order(repeat: int, arms: Sequence[str]) -> list[str]:
    """The arms of one repeat, rotated by the repeat number (A B C, B C A, C A B, ...).

    Every arm runs first as often as the others, so neither gains from a warm cache or
    loses to a neighbour that starts during the first arm.
    """
    if not arms:
        return []
    shift = repeat % len(arms)
    return [*arms[shift:], *arms[:shift]]


def median_interval(times: Sequence[float]) -> float:
    """Median gap between consecutive time stamps: the per-iteration wall time of a loop.

    Taken between the ends of successive iterations, so it includes everything the loop
    does (data, bookkeeping, event writing), not just the part the loop times itself.
    """
    if len(times) < 2:
        raise ValueError(f"need at least two time stamps, got {len(times)}")
    gaps = [b - a for a, b in zip(times[:-1], times[1:], strict=True)]
    return statistics.median(gaps)


#: The quantile of a loop's per-iteration CPU times that stands for its own cost on a
#: shared host (``quantile_interval``).
CPU_QUANTILE = 0.1


def quantile_interval(times: Sequence[float], q: float) -> float:
    """The ``q``-quantile (lower order statistic) of the gaps between consecutive stamps.

    For CPU-time stamps on a shared, oversubscribed host: a neighbour on the other core
    only adds CPU time to a step (evicted caches, memory bandwidth), never removes it, so
    a low quantile of the steps (``CPU_QUANTILE``) is the loop's own cost and far steadier
    than the median. Measured on 2 loaded cores (issue 19, load 4-6): a torch LeNet step's
    median CPU time moved 15-21 ms between repeats of the same arm; per-phase splits by the
    10th percentile agreed to 0.01 ms wherever the two arms do the same work.
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


def roofline_fraction(samples_per_s: float, flops_per_sample: float, peak_flops: float) -> float:
    """Achieved FLOP/s (throughput x FLOPs per sample) as a fraction of the matmul peak."""
    if peak_flops <= 0:
        return math.nan
    return samples_per_s * flops_per_sample / peak_flops


def bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes per second of one transfer (or one all-reduce: algorithm bandwidth)."""
    if seconds <= 0:
        return math.nan
    return nbytes / seconds


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    """``pass``, ``miss`` or ``n/a`` (no measurement) against a target."""
    if value is None or not math.isfinite(value):
        return "n/a"
    ok = value >= target if higher_is_better else value < target
    return "pass" if ok else "miss"


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
    step = summarize(e["step_s"] for e in timed).median
    return {
        "samples_per_s": throughput(batch, median_interval(stamps)),
        "samples_per_cpu_s": math.nan,
        "self_timed_samples_per_s": throughput(batch, step),
        "step_s": step,
        "compute_s": summarize(e.get("compute_s") for e in timed).median,
        "comm_s": summarize(e.get("comm_s") for e in timed).median,
    }

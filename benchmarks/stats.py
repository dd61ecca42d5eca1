"""The drivers' summaries over repeats: medians with their intervals, paired ratios, verdicts.

Every interval over repeats is ``dlscale.analysis.stats.median_interval``'s, the rule the study's
verdicts use (the min-max range up to 5 repeats, order statistics from 6, none for one),
so a benchmark's interval and a finding's mean the same. Pass/fail references come from
``dlscale.thresholds``. Runs in the workflow venv (scipy); the workers' loop arithmetic,
which runs in framework venvs, is ``benchmarks.timing``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dlscale.analysis.stats import median_interval
from dlscale.thresholds import Threshold


@dataclass(frozen=True)
class Summary:
    """Median with its interval over ``n`` repeats: the one shape every benchmark figure takes."""

    median: float
    low: float
    high: float
    n: int

    def as_row(self, prefix: str) -> dict[str, float | int]:
        return {
            f"{prefix}_median": self.median,
            f"{prefix}_low": self.low,
            f"{prefix}_high": self.high,
            f"{prefix}_n": self.n,
        }


def _finite(values: Iterable[float | None]) -> list[float]:
    out = []
    for value in values:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # None, pd.NA: a repeat without this value
            continue
        if math.isfinite(number):
            out.append(number)
    return out


def summarize(values: Iterable[float | None]) -> Summary:
    """Median and interval of the finite values (NaN/inf/None are dropped: a failed repeat)."""
    finite = _finite(values)
    interval = median_interval(finite)
    return Summary(interval.value, interval.low, interval.high, len(finite))


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-repeat ratios a_i / b_i of two arms measured side by side in repeat i.

    Pairing (rather than dividing two medians) cancels slow drift of a shared machine:
    both arms of one repeat saw the same neighbours.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"unpaired arms: {len(numerators)} vs {len(denominators)} repeats")
    return [a / b if b else math.nan for a, b in zip(numerators, denominators, strict=True)]


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> Summary:
    """The paired ratios' median and interval (the repeats' ratios are the samples)."""
    return summarize(paired_ratios(numerators, denominators))


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


def verdict(value: float | None, passes: Callable[[float], bool]) -> str:
    """``pass``, ``miss`` or ``n/a`` (no measurement) of ``value`` by ``passes`` (a
    ``dlscale.thresholds.Threshold``'s ``passes``, or a benchmark's own target)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return "pass" if passes(value) else "miss"


def interval_verdict(summary: Summary, reference: Threshold) -> str:
    """``pass``, ``miss``, ``undecided`` or ``n/a`` of a median over repeats by ``reference``,
    read from the median's interval rather than the median alone (Hoefler & Belli, rule 6):
    ``pass`` when the whole interval lies inside the reference's band, ``miss`` when it lies
    wholly outside, ``undecided`` when it reaches both sides (more repeats decide) or when
    there is no interval (one repeat decides nothing). ``n/a``: nothing measured."""
    if not math.isfinite(summary.median):
        return "n/a"
    low, high = summary.low, summary.high
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undecided"
    if reference.passes(low) and reference.passes(high):
        return "pass"
    below = reference.lower is not None and high < reference.lower
    above = reference.upper is not None and low > reference.upper
    return "miss" if below or above else "undecided"

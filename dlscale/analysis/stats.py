"""Intervals over repeats: the one place the project turns samples into an uncertainty.

Used alike by the verdicts (cells, findings, claims), the tuning stage, ``repeats: auto``
and the benchmarks, so a reported interval means the same thing wherever it appears.

Which interval, and why (Hoefler & Belli, "Scientific Benchmarking of Parallel Computing
Systems", SC15: summarise run times by the median, and do not assume normality, which
run times rarely have):

* **6 or more repeats**: the nonparametric confidence interval of the median from order
  statistics. The number of repeats below the true median is Binomial(n, 1/2), so
  ``[x_(j), x_(n+1-j)]`` covers the median with probability ``1 - 2 P(B <= j - 1)``;
  ``j`` is the largest rank that keeps this at or above 95 % (``scipy.stats.binom``).
  With 5 or fewer repeats no pair of order statistics reaches 95 % (even the whole range
  of 5 covers the median only with 1 - 2/2^5 = 94 %), which is why the method needs more
  than 5.
* **2 to 5 repeats**: the min-max range, marked ``low-n``, with its true coverage
  ``1 - 2^(1-n)`` (50 %, 75 %, 88 %, 94 %) in the ``coverage`` column. A bootstrap of a
  median from so few values only resamples those same values: its percentile interval
  lies inside the range while claiming a confidence it does not have.
* **1 repeat**: no interval (NaN). One run says nothing about the next one; a cell with
  one repeat never separates from another, so with ``repeats: 1`` a finding has a winner
  only when a single framework competes.

**Speedup and efficiency** are ratios of two cells' median throughputs (the cell's over
the baseline cell's: the same framework and comparison group at its smallest node count), so their uncertainty
comes from both cells, resampled independently:

* both cells with 6 or more repeats: a seeded percentile bootstrap of
  ``median(cell) / median(baseline)`` (``scipy.stats.bootstrap``, 9999 resamples of each
  cell's repeats, unpaired, seed ``BOOTSTRAP_SEED`` so tables are reproducible to the
  bit); percentile rather than BCa because BCa is undefined when a cell's repeats are
  all equal;
* otherwise (2-5 repeats in either): the conservative range ratio
  ``[min(cell) / max(base), max(cell) / min(base)]``, ``low-n``, whose coverage is at
  least the product of the two ranges' coverages;
* the baseline cell itself: exactly 1 (it is its own denominator);
* one repeat in either cell: no interval.

Efficiency is speedup divided by the node ratio, so its interval is the speedup's
scaled; "efficiency above 1" and "speedup above the node ratio" are the same test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
#: Fewest repeats with a distribution-free 95 % interval of the median.
MIN_CI_REPEATS = 6
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 2018

ORDER_STATISTICS = "order statistics"
RANGE_LOW_N = "range (low-n)"
SINGLE_RUN = "single run"
NO_RUNS = "no ok runs"
BOOTSTRAP = "bootstrap"
RANGE_RATIO_LOW_N = "range ratio (low-n)"
BASELINE = "baseline"


class Bounded(Protocol):
    """Anything with an interval: an ``Interval``, or a verdict's competitor."""

    low: float
    high: float


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval, how it was made and what it covers."""

    value: float
    low: float
    high: float
    method: str
    #: Probability that the interval covers the true value (a lower bound for the range
    #: ratio; NaN where none is known).
    coverage: float = math.nan

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def finite_sorted(values: Iterable[float]) -> np.ndarray:
    """The finite values, sorted (NaN and inf dropped: a failed repeat has no value)."""
    array = np.asarray(list(values), dtype="float64")
    return np.sort(array[np.isfinite(array)])


def order_statistic_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The rank ``j`` (1-based) of the lower bound ``x_(j)`` of the median's interval.

    The largest ``j`` with ``P(Binomial(n, 1/2) <= j - 1) <= (1 - confidence) / 2``, or 0
    when none exists (too few samples for that confidence).
    """
    alpha = (1.0 - confidence) / 2.0
    ranks = np.arange(1, n // 2 + 1)
    ok = ranks[stats.binom.cdf(ranks - 1, n, 0.5) <= alpha + 1e-12]
    return int(ok.max()) if len(ok) else 0


def median_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of ``values`` (one per repeat; NaN ignored) and its interval.

    See the module docstring: order statistics from ``MIN_CI_REPEATS`` values, the
    min-max range (``low-n``) below that, nothing for a single value.
    """
    x = finite_sorted(values)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, NO_RUNS)
    median = float(np.median(x))
    if n == 1:
        return Interval(median, math.nan, math.nan, SINGLE_RUN)
    j = order_statistic_rank(n, confidence)
    if j == 0:
        return Interval(median, float(x[0]), float(x[-1]), RANGE_LOW_N, 1.0 - 2.0 ** (1 - n))
    coverage = 1.0 - 2.0 * float(stats.binom.cdf(j - 1, n, 0.5))
    return Interval(median, float(x[j - 1]), float(x[n - j]), ORDER_STATISTICS, coverage)


def _median_ratio(numerator: np.ndarray, denominator: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(numerator, axis=axis) / np.median(denominator, axis=axis)


def ratio_interval(
    numerator: Iterable[float],
    denominator: Iterable[float],
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """``median(numerator) / median(denominator)`` and its interval (module docstring).

    The two samples are independent repeats of two cells and are resampled apart.
    """
    a, b = finite_sorted(numerator), finite_sorted(denominator)
    if len(a) == 0 or len(b) == 0:
        return Interval(math.nan, math.nan, math.nan, NO_RUNS)
    value = float(np.median(a) / np.median(b))
    if len(a) < 2 or len(b) < 2:
        return Interval(value, math.nan, math.nan, SINGLE_RUN)
    if len(a) >= MIN_CI_REPEATS and len(b) >= MIN_CI_REPEATS:
        result = stats.bootstrap(
            (a, b),
            _median_ratio,
            paired=False,
            vectorized=True,
            method="percentile",
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=confidence,
            rng=np.random.default_rng(seed),
        )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        return Interval(value, min(low, value), max(high, value), BOOTSTRAP, confidence)
    coverage = (1.0 - 2.0 ** (1 - min(len(a), MIN_CI_REPEATS))) * (
        1.0 - 2.0 ** (1 - min(len(b), MIN_CI_REPEATS))
    )
    return Interval(value, float(a[0] / b[-1]), float(a[-1] / b[0]), RANGE_RATIO_LOW_N, coverage)


def needs_more_repeats(values: Sequence[float], target_rel_halfwidth: float, cap: int) -> bool:
    """Should a cell (``repeats: auto``) get another repeat?

    ``values`` are the cell's per-repeat values so far (each run's median, e.g. its
    throughput; NaN, e.g. a failed run, is ignored), ``target_rel_halfwidth`` the wanted
    half-width of the median's 95 % interval relative to the median (0.05: +-5 %; the
    larger side of an asymmetric interval counts), ``cap`` the most repeats a cell may
    have (counting the given values, failed ones included, so a cell that keeps failing
    stops too).

    False once ``cap`` values exist. Otherwise True while there are fewer than
    ``MIN_CI_REPEATS`` finite values (below that there is no 95 % interval to judge, only
    a range that grows as repeats are added, so an early narrow range proves nothing) or
    while the interval's relative half-width exceeds the target.
    """
    if target_rel_halfwidth <= 0:
        raise ValueError(f"target_rel_halfwidth must be > 0, not {target_rel_halfwidth}")
    if len(values) >= cap:
        return False
    x = finite_sorted(values)
    if len(x) < MIN_CI_REPEATS:
        return True
    interval = median_interval(x)
    if interval.value == 0:
        return interval.high > interval.low
    half = max(interval.value - interval.low, interval.high - interval.value)
    return half / abs(interval.value) > target_rel_halfwidth


def separated(better: Bounded, worse: Bounded, higher: bool) -> bool:
    """True when ``better``'s interval lies wholly on the better side of ``worse``'s.

    Unknown intervals (one repeat) never separate.
    """
    values = (better.low, better.high, worse.low, worse.high)
    if any(v is None or math.isnan(v) for v in values):
        return False
    return better.low > worse.high if higher else better.high < worse.low

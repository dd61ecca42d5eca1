"""Every pass/fail threshold of the project, in one table: a value, its unit, and the band.

As ReFrame states a performance reference (value, lower, upper, unit), each entry here is a
measured variable's reference, kept apart from the code that measures it; the benchmarks,
the scaling model's validation, the verdicts and the tests read them from here. The
measurements that justify each value are dated in ``docs/thresholds.md``.

Standard library only: Snakemake imports the modules that read it when it builds the DAG.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Threshold:
    """A reference ``value`` in ``unit``; a measurement passes inside ``[lower, upper]``.

    ``lower``/``upper`` are absolute bounds (None: unbounded on that side). ``higher_is_better``
    says which way a measurement moves when it gets better, so a reader of a table knows
    whether being above the value is good news.
    """

    name: str
    value: float
    unit: str
    lower: float | None
    upper: float | None
    higher_is_better: bool
    meaning: str

    def passes(self, measured: float) -> bool:
        """Whether ``measured`` lies inside the band (NaN never passes)."""
        if measured != measured:  # NaN
            return False
        if self.lower is not None and measured < self.lower:
            return False
        return not (self.upper is not None and measured > self.upper)


def _at_least(name: str, value: float, unit: str, meaning: str) -> Threshold:
    return Threshold(name, value, unit, value, None, True, meaning)


def _at_most(name: str, value: float, unit: str, meaning: str) -> Threshold:
    return Threshold(name, value, unit, None, value, False, meaning)


THRESHOLDS: Mapping[str, Threshold] = MappingProxyType(
    {
        t.name: t
        for t in (
            _at_least(
                "harness_ratio",
                0.97,
                "ratio",
                "runner throughput / the fair bare training loop's, median over repeats",
            ),
            _at_most(
                "validation_error",
                0.10,
                "relative error",
                "scaling model: median |predicted - measured| / measured per framework, held-out runs",
            ),
            _at_most(
                "replay_median_error",
                0.05,
                "efficiency",
                "replay of published systems: median |predicted - measured efficiency| per communication"
                " pattern, every measured count but the anchor",
            ),
            _at_most(
                "replay_max_error",
                0.15,
                "efficiency",
                "replay of published systems: worst |predicted - measured efficiency| per communication pattern",
            ),
            _at_most(
                "fixed_overhead_share",
                0.10,
                "share of step",
                "1-rank exposed 'communication' above this is a fixed per-step overhead, not communication",
            ),
            _at_most(
                "contended_share",
                0.2,
                "share of host CPU",
                "other work on the host while a run is timed; above it the run is contended",
            ),
            _at_most(
                "parity_eps_factor",
                10.0,
                "x eps32 sqrt(loss terms)",
                "parity check: a shared-init run's first losses against the reference framework's, relative,"
                " in multiples of the float32 rounding of the loss's sum",
            ),
            _at_least(
                "learned_topk_factor",
                2.0,
                "x chance",
                "a classifier has learned when its held-out top-k is at least this many times k / classes",
            ),
            _at_most(
                "learned_mse_share",
                0.8,
                "x chance",
                "an autoencoder has learned when its held-out MSE is at most this share of an untrained one's",
            ),
            _at_least(
                "compare_noise_floor",
                0.05,
                "relative change",
                "two studies: a change is named only when the NEW/BASE ratio's interval lies wholly beyond"
                " 1 +/- this (identical studies made one after the other differ by study-level offsets"
                " their own repeats do not capture)",
            ),
            _at_most(
                "roofline_fraction",
                1.0,
                "fraction of matmul peak",
                "achieved FLOP/s over the measured peak; above 1 the peak or the count is wrong",
            ),
        )
    }
)


def threshold(name: str) -> Threshold:
    """The threshold called ``name`` (a KeyError names the unknown one)."""
    try:
        return THRESHOLDS[name]
    except KeyError:
        raise KeyError(f"no threshold {name!r}; known: {', '.join(sorted(THRESHOLDS))}") from None


#: Shorthands for the values most read.
HARNESS_RATIO = THRESHOLDS["harness_ratio"].value
VALIDATION_ERROR = THRESHOLDS["validation_error"].value
FIXED_OVERHEAD_SHARE = THRESHOLDS["fixed_overhead_share"].value
CONTENDED_SHARE = THRESHOLDS["contended_share"].value
ROOFLINE_FRACTION = THRESHOLDS["roofline_fraction"].value
COMPARE_NOISE_FLOOR = THRESHOLDS["compare_noise_floor"].value
PARITY_EPS_FACTOR = THRESHOLDS["parity_eps_factor"].value

"""Every pass/fail threshold of the project, in one table: a value, its unit, and the band.

As ReFrame states a performance reference (value, lower, upper, unit), each entry here is a
measured variable's reference, kept apart from the code that measures it; the benchmarks,
the scaling model's validation, the verdicts and the tests read them from here. The
measurements that justify each value are dated in ``docs/thresholds.md``.

One idiom reads a value, ``threshold(name).value``, and one decides: ``passes`` (inside the
band, its bounds included, as ReFrame's references) or ``fails`` (a number outside it). A
value may differ by profile where a site needs its own (``by_profile``, as ReFrame scopes
a reference per system): ``threshold(name, profile)`` is the threshold that site sees.

Standard library only: Snakemake imports the modules that read it when it builds the DAG.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Threshold:
    """A reference ``value`` in ``unit``; a measurement passes inside ``[lower, upper]``.

    ``lower``/``upper`` are absolute bounds (None: unbounded on that side). ``higher_is_better``
    says which way a measurement moves when it gets better, so a reader of a table knows
    whether being above the value is good news. ``by_profile``: profile name -> the value
    there (the bound that is the value moves with it); a profile not named gets ``value``.
    """

    name: str
    value: float
    unit: str
    lower: float | None
    upper: float | None
    higher_is_better: bool
    meaning: str
    by_profile: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def with_value(self, value: float) -> Threshold:
        """This threshold at another reference ``value``: the bound that was the value moves
        to it, a bound of its own stays (a command-line override, a profile's value)."""
        if value == self.value:
            return self
        return dataclasses.replace(
            self,
            value=value,
            lower=value if self.lower == self.value else self.lower,
            upper=value if self.upper == self.value else self.upper,
        )

    def at(self, profile: str | None) -> Threshold:
        """The threshold as ``profile`` sees it (its own value, or the default)."""
        if profile is None or profile not in self.by_profile:
            return self
        return self.with_value(self.by_profile[profile])

    def passes(self, measured: float, profile: str | None = None) -> bool:
        """Whether ``measured`` lies inside the band, bounds included (NaN never passes)."""
        scoped = self.at(profile)
        if measured != measured:  # NaN
            return False
        if scoped.lower is not None and measured < scoped.lower:
            return False
        return not (scoped.upper is not None and measured > scoped.upper)

    def fails(self, measured: float, profile: str | None = None) -> bool:
        """Whether ``measured`` is a number outside the band: ``not passes`` except for NaN,
        which is unknown (neither passes nor fails), so a missing measurement flags nothing."""
        return measured == measured and not self.passes(measured, profile)


def _at_least(
    name: str, value: float, unit: str, meaning: str, by_profile: Mapping[str, float] | None = None
) -> Threshold:
    return Threshold(name, value, unit, value, None, True, meaning, MappingProxyType(dict(by_profile or {})))


def _at_most(
    name: str, value: float, unit: str, meaning: str, by_profile: Mapping[str, float] | None = None
) -> Threshold:
    return Threshold(name, value, unit, None, value, False, meaning, MappingProxyType(dict(by_profile or {})))


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
            Threshold(
                "step_drift",
                1.0,
                "late/early median step",
                0.9,
                1 / 0.9,
                False,
                "a run's timed steps are steady when the second half's median step is within this band"
                " of the first half's (or the halves do not differ at step_drift_p); outside it the run"
                " is flagged unsteady",
            ),
            _at_most(
                "step_drift_p",
                0.01,
                "p-value",
                "significance level of the Mann-Whitney test between a run's halves of timed steps",
            ),
            _at_most(
                "contended_share",
                0.2,
                "share of host CPU",
                "other work (+ steal) on the host while a run is timed; above it the run is contended",
            ),
            _at_most(
                "parity_eps_factor",
                10.0,
                "x eps32 sqrt(loss terms)",
                "parity check: a shared-init run's first losses against the reference framework's, relative,"
                " in multiples of the float32 rounding of the loss's sum",
            ),
            _at_most(
                "parity_rate_budget",
                0.2,
                "summed learning rate",
                "parity check: losses are compared while the reference's learning rates summed over the"
                " steps before them stay within this (where parity_eps_factor was measured)",
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
            _at_most(
                "demo_warm_wall",
                600.0,
                "s",
                "the default study (make demo) from a fresh working folder on a machine whose"
                " environments and caches are built, 2 cores: the invocation's wall time",
            ),
            _at_least(
                "demo_timed_share",
                0.5,
                "share of run wall",
                "the default study: its runs' timed training steps over their whole wall"
                " (results/wall_split.csv, the 'all' row)",
            ),
        )
    }
)


def threshold(name: str, profile: str | None = None) -> Threshold:
    """The threshold called ``name`` as ``profile`` sees it (None: the default value); a
    KeyError names the unknown one."""
    try:
        return THRESHOLDS[name].at(profile)
    except KeyError:
        raise KeyError(f"no threshold {name!r}; known: {', '.join(sorted(THRESHOLDS))}") from None

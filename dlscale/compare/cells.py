"""What two studies' cells are compared on, and how one metric of a matched cell is judged.

The comparison's statistics (``dlscale.compare.comparison`` puts them together and writes
them): the metrics with the direction that is better, the keys that make two cells the same
experiment, each study's cells with their repeats as the samples, and per matched cell and
metric the NEW/BASE ratio with its interval, the rank test and the change it supports
(``decide_change``), or why none (``why_no_change``). The rules are described in
``dlscale.compare.comparison``'s docstring and docs/compare.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scistats

from dlscale import runid
from dlscale.analysis.speedup import COMPARISON_GROUP, batch_key
from dlscale.analysis.stats import (
    BOOTSTRAP,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    MIN_CI_REPEATS,
    NO_RUNS,
    RANGE_RATIO_LOW_N,
    SINGLE_RUN,
    Interval,
    finite_sorted,
    ratio_interval,
)
from dlscale.compare.studies import CompareError
from dlscale.networks import HOST
from dlscale.outputs import COMPARE_FILES
from dlscale.thresholds import threshold

#: The smallest relative change named (dlscale.thresholds; ``--noise-floor`` overrides it).
COMPARE_NOISE_FLOOR = threshold("compare_noise_floor").value

# --- what is compared, declared once -----------------------------------------------------

IMPROVED, REGRESSED, NO_CHANGE = "improved", "regressed", "no change"
#: A rank test rejects "no change" below this p-value (the intervals' complement).
ALPHA = 1.0 - CONFIDENCE


@dataclass(frozen=True)
class Metric:
    """A quantity compared per cell: its runs.csv column and which direction is better."""

    name: str
    higher_is_better: bool
    #: Independent of the machine's raw speed (led with when the hardware differs).
    normalised: bool
    label: str


#: Every metric compared, with the direction that is better: the one place that says so.
METRICS: tuple[Metric, ...] = (
    Metric("throughput", True, False, "throughput (samples/s, global)"),
    Metric("exposed_comm_share", False, True, "exposed-communication share of the step"),
    Metric("efficiency", True, True, "scaling efficiency against the group's smallest node count"),
    Metric("time_to_target_s", False, False, "time to the quality target (s)"),
)
METRIC_BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}

#: What makes two cells the same experiment. ``batch``: per rank under weak scaling,
#: global under strong (what stays fixed, ``speedup.batch_key``).
MATCH_KEYS: tuple[str, ...] = (
    "framework",
    "model",
    "dataset",
    "scaling",
    "network",
    "ranks_per_node",
    "batch",
    "threads_per_rank",
    "nodes",
)
#: Keys a comparison may be told to ignore (a deliberate change of that setting).
IGNORABLE_KEYS: tuple[str, ...] = ("threads_per_rank", "dataset", "network")

COMPARISON_COLUMNS: tuple[str, ...] = (
    "study",
    "base",
    "cell",
    *MATCH_KEYS,
    "metric",
    "better",
    "base_median",
    "new_median",
    "ratio",
    "ratio_lower",
    "ratio_upper",
    "coverage",
    "interval",
    "base_repeats",
    "new_repeats",
    "p_value",
    "change",
    "note",
)
VERDICT_CHANGE_COLUMNS: tuple[str, ...] = (
    "study",
    "base",
    "kind",
    *COMPARISON_GROUP,
    "question",
    "base_verdict",
    "new_verdict",
    "what_changed",
)
UNMATCHED_COLUMNS: tuple[str, ...] = ("study", "base", "only_in", "cell", *MATCH_KEYS, "repeats", "why")

#: The files ``write_comparison`` writes under the output folder.
OUTPUT_FILES: Mapping[str, str] = COMPARE_FILES

# --- cells and their samples -------------------------------------------------------------------


def _keyed(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with every match key (neutral values for columns an older table lacks)."""
    table = runs.copy()
    defaults: dict[str, Any] = {"dataset": "", "scaling": "weak", "network": HOST, "contended": False}
    for name, default in defaults.items():
        table[name] = (
            table[name].astype(object).where(table[name].notna(), default) if name in table else default
        )
    if "world_size" not in table:
        table["world_size"] = table["nodes"] * table["ranks_per_node"]
    if "global_batch" not in table:
        table["global_batch"] = table["batch_per_rank"] * table["world_size"]
    for name in ("nodes", "ranks_per_node", "batch_per_rank", "global_batch", "world_size"):
        table[name] = pd.to_numeric(table[name], errors="coerce").fillna(0).astype("int64")
    table["batch"] = batch_key(table).astype("int64")
    threads = table["threads_per_rank"] if "threads_per_rank" in table else pd.Series("", index=table.index)
    table["threads_per_rank"] = threads.map(
        lambda v: (
            "" if pd.isna(v) else str(int(v)) if isinstance(v, float) and float(v).is_integer() else str(v)
        )
    )
    table["contended"] = table["contended"].astype(str).str.lower().isin(("true", "1"))
    for name in ("exposed_comm_share", "efficiency", "time_to_target_s", "baseline_nodes", "throughput"):
        table[name] = pd.to_numeric(table[name], errors="coerce") if name in table else np.nan
    for name in ("framework", "model", "dataset", "scaling", "network"):
        table[name] = table[name].astype(str)
    return table


@dataclass(frozen=True)
class Cell:
    """One framework's matched cell at one node count in one study: its repeats' values per metric."""

    key: tuple[Any, ...]
    name: str
    values: Mapping[str, np.ndarray]
    repeats: int
    world_size: int
    nodes: int
    baseline_nodes: float


def run_keys(runs: pd.DataFrame, keys: Sequence[str] = MATCH_KEYS) -> set[tuple[Any, ...]]:
    """Every cell the study ran, usable or not (failed and contended runs included)."""
    table = _keyed(runs)
    return {tuple(k) for k in table[list(keys)].drop_duplicates().itertuples(index=False)}


def study_cells(
    runs: pd.DataFrame, keys: Sequence[str] = MATCH_KEYS, label: str = "a study"
) -> dict[tuple[Any, ...], Cell]:
    """The study's cells by their match key, each with its repeats' values: its ok runs
    with a throughput that ran alone (contended ones left out, as in the verdicts).
    ``CompareError`` when a match key left out (``--ignore-key``) would merge two of the
    study's own cells (two networks, say, of one framework at one node count)."""
    table = _keyed(runs)
    usable = table[table["status"].eq("ok") & table["throughput"].notna() & ~table["contended"]]
    ignored = [k for k in MATCH_KEYS if k not in keys]
    out: dict[tuple[Any, ...], Cell] = {}
    for key, mine in usable.groupby(list(keys), sort=True, dropna=False):
        row = mine.iloc[0]
        for name in ignored:
            if mine[name].nunique() > 1:
                raise CompareError(
                    f"--ignore-key {name}: {label} has several values of it ({', '.join(map(str, mine[name].unique()))})"
                    f" in one cell ({', '.join(f'{k}={v}' for k, v in zip(keys, key, strict=True))}): its cells"
                    " cannot be matched without it"
                )
        name = runid.cell_name(
            row["framework"],
            row["model"],
            row["network"],
            row["nodes"],
            row["ranks_per_node"],
            row["batch_per_rank"],
        )
        if "threads_per_rank" in keys and row["threads_per_rank"]:
            name += f"/t{row['threads_per_rank']}"
        values = {m.name: mine[m.name].to_numpy(dtype="float64") for m in METRICS}
        bases = mine["baseline_nodes"].dropna().unique()
        out[tuple(key)] = Cell(
            tuple(key),
            name,
            values,
            len(mine),
            int(row["world_size"]),
            int(row["nodes"]),
            float(bases[0]) if len(bases) == 1 else math.nan,
        )
    return out


def smallest_p(n_base: int, n_new: int) -> float:
    """The smallest two-sided p-value a rank test of ``n_base`` against ``n_new`` repeats
    can give (complete separation, exact: ``2 / C(n1 + n2, n1)``): 0.33 for 2 against 2,
    0.1 for 3 against 3, 0.029 for 4 against 4."""
    return min(1.0, 2.0 / math.comb(n_base + n_new, n_base)) if n_base and n_new else 1.0


def rank_test(base: Sequence[float], new: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value of ``new`` against ``base`` (scipy: exact for small
    samples without ties), or NaN with fewer than 2 repeats on a side."""
    a = np.asarray([v for v in base if np.isfinite(v)], dtype="float64")
    b = np.asarray([v for v in new if np.isfinite(v)], dtype="float64")
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0
    return float(scistats.mannwhitneyu(b, a, alternative="two-sided").pvalue)


def clears_floor(ratio: Interval, floor: float) -> bool:
    """Whether the ratio's interval lies wholly beyond ``1 +/- floor`` (the band
    ``[1 / (1 + floor), 1 + floor]``, symmetric in log-ratio)."""
    return ratio.low > 1.0 + floor or ratio.high < 1.0 / (1.0 + floor)


def decide_change(
    ratio: Interval,
    p_value: float,
    higher_is_better: bool,
    alpha: float = ALPHA,
    floor: float = COMPARE_NOISE_FLOOR,
) -> str:
    """``improved``/``regressed`` only with evidence at ``alpha``: the ratio's interval
    excludes 1 and the rank test rejects, or, where no rank test applies (``p_value`` NaN:
    efficiency, a ratio of ratios), the interval is a 95 % bootstrap one; and the interval
    clears the between-study noise floor (``clears_floor``). ``no change`` otherwise: an
    interval spanning 1 or reaching into the floor, a test that does not reject (with 2 or
    3 repeats a side it never can), a low-n range without a test, one repeat."""
    if not ratio.known or ratio.low <= 1.0 <= ratio.high:
        return NO_CHANGE
    if math.isnan(p_value):
        if ratio.method != BOOTSTRAP:
            return NO_CHANGE
    elif p_value >= alpha:
        return NO_CHANGE
    if not clears_floor(ratio, floor):
        return NO_CHANGE
    return IMPROVED if (ratio.low > 1.0) == higher_is_better else REGRESSED


def why_no_change(
    ratio: Interval,
    p_value: float,
    n_base: int,
    n_new: int,
    alpha: float = ALPHA,
    floor: float = COMPARE_NOISE_FLOOR,
) -> str | None:
    """Why an interval that excludes 1 is still ``no change`` (None when it is not so)."""
    if not ratio.known or ratio.low <= 1.0 <= ratio.high:
        return None
    if math.isnan(p_value):
        if ratio.method != BOOTSTRAP:
            return f"{ratio.method} without a rank test: no change claimed"
    elif p_value >= alpha:
        least = smallest_p(n_base, n_new)
        if least >= alpha:
            return (
                f"the interval excludes 1 but {n_base} against {n_new} repeats cannot reject at {alpha:g}"
                f" (smallest possible p {least:.2g}): more repeats needed"
            )
        return f"the interval excludes 1 but the rank test does not reject (p {p_value:.2g})"
    if not clears_floor(ratio, floor):
        return (
            f"the interval [{ratio.low:.3g}, {ratio.high:.3g}] excludes 1 but reaches into the between-study"
            f" noise floor 1 +/- {floor:g} (--noise-floor; docs/compare.md)"
        )
    return None


def _medians_ratio_of_ratios(
    new_cell: np.ndarray, new_base: np.ndarray, base_cell: np.ndarray, base_base: np.ndarray, axis: int = -1
) -> np.ndarray:
    new = np.median(new_cell, axis=axis) / np.median(new_base, axis=axis)
    return new / (np.median(base_cell, axis=axis) / np.median(base_base, axis=axis))


def efficiency_ratio_interval(
    new_cell: np.ndarray, new_base: np.ndarray, base_cell: np.ndarray, base_base: np.ndarray
) -> Interval:
    """NEW/BASE of a cell's efficiency, made from the throughputs of the four cells it
    depends on (each study's cell and its baseline cell): efficiency is
    ``median(cell) / median(baseline) / node ratio``, the node ratio cancels. The per-run
    efficiencies of runs.csv share their study's baseline median, so they are not
    independent samples; the four cells' repeats are. Interval as ``stats.ratio_interval``
    does it: a seeded percentile bootstrap (``scipy.stats.bootstrap``, the four resampled
    apart) with 6 or more repeats in each, else the conservative range, whose coverage is
    at least the product of the four ranges'."""
    samples = [finite_sorted(x) for x in (new_cell, new_base, base_cell, base_base)]
    if any(len(x) == 0 for x in samples):
        return Interval(math.nan, math.nan, math.nan, NO_RUNS)
    value = float(_medians_ratio_of_ratios(*samples))
    if any(len(x) < 2 for x in samples):
        return Interval(value, math.nan, math.nan, SINGLE_RUN)
    if all(len(x) >= MIN_CI_REPEATS for x in samples):
        result = scistats.bootstrap(
            tuple(samples),
            _medians_ratio_of_ratios,
            paired=False,
            vectorized=True,
            method="percentile",
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=CONFIDENCE,
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        return Interval(value, min(low, value), max(high, value), BOOTSTRAP, CONFIDENCE)
    nc, nb, bc, bb = samples
    coverage = float(np.prod([1.0 - 2.0 ** (1 - min(len(x), MIN_CI_REPEATS)) for x in samples]))
    low = (nc[0] / nb[-1]) / (bc[-1] / bb[0])
    high = (nc[-1] / nb[0]) / (bc[0] / bb[-1])
    return Interval(value, float(low), float(high), RANGE_RATIO_LOW_N, coverage)


def _row(
    metric: Metric, a: np.ndarray, b: np.ndarray, ratio: Interval, p_value: float, floor: float
) -> dict[str, Any]:
    return {
        "metric": metric.name,
        "better": "higher" if metric.higher_is_better else "lower",
        "base_median": float(np.median(a)),
        "new_median": float(np.median(b)),
        "ratio": ratio.value,
        "ratio_lower": ratio.low,
        "ratio_upper": ratio.high,
        "coverage": ratio.coverage,
        "interval": ratio.method,
        "base_repeats": len(a),
        "new_repeats": len(b),
        "p_value": p_value,
        "change": decide_change(ratio, p_value, metric.higher_is_better, floor=floor),
        "note": why_no_change(ratio, p_value, len(a), len(b), floor=floor),
    }


def compare_metric(
    base: np.ndarray, new: np.ndarray, metric: Metric, floor: float = COMPARE_NOISE_FLOOR
) -> dict[str, Any] | None:
    """One comparison row's numbers (``stats.ratio_interval`` and ``rank_test``), or None
    where the metric has no value on a side or the base median is 0 (a ratio of nothing)."""
    a, b = finite_sorted(base), finite_sorted(new)
    if len(a) == 0 or len(b) == 0 or float(np.median(a)) == 0.0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = ratio_interval(b, a)
    return _row(metric, a, b, ratio, rank_test(a, b), floor)


def compare_efficiency(
    base: Cell, base_baseline: Cell, new: Cell, new_baseline: Cell, floor: float = COMPARE_NOISE_FLOOR
) -> dict[str, Any] | None:
    """The efficiency row of a cell (``efficiency_ratio_interval``; no rank test)."""
    metric = METRIC_BY_NAME["efficiency"]
    a, b = finite_sorted(base.values[metric.name]), finite_sorted(new.values[metric.name])
    if len(a) == 0 or len(b) == 0 or float(np.median(a)) == 0.0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = efficiency_ratio_interval(
            new.values["throughput"],
            new_baseline.values["throughput"],
            base.values["throughput"],
            base_baseline.values["throughput"],
        )
    return _row(metric, a, b, ratio, math.nan, floor)


def metric_applies(metric: Metric, base: Cell, new: Cell) -> bool:
    if metric.name == "exposed_comm_share":
        return base.world_size > 1 and new.world_size > 1
    if metric.name == "efficiency":
        return base.baseline_nodes == new.baseline_nodes and base.nodes > base.baseline_nodes
    return True

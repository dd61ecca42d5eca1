"""Studies against each other: ``python -m dlscale.compare BASE NEW [MORE ...] --out DIR``.

People re-check a framework decision when the software or the machine changes (torch
upgraded, a setting tuned, a new cluster, a laptop study repeated on the real machine).
This module says, cell by cell and with intervals, what changed between two or more
studies, and which verdicts changed with it.

* **Input.** Each argument is a study's results folder (``runs.csv`` with ``runs/``
  beside it, as the workflow or ``python -m dlscale.analysis`` writes it, or the study
  folder above it) or its archive from ``make artifact``. An archive, and a folder with a
  ``MANIFEST.json`` (an unpacked one), is checked with ``dlscale.archive.verify`` first: an archive
  that fails is refused, never read.
* **Cells** are matched by their set-up (``MATCH_KEYS``: framework, model, dataset,
  scaling, network, ranks per node, the batch that stays fixed, threads per rank, nodes).
  A cell of one study without its match in the other is listed (``unmatched.csv``),
  never dropped silently. ``--ignore-key threads_per_rank`` matches across a deliberate
  change of that key (it then shows among the differences).
* **Per matched cell and metric** (``METRICS``, each with the direction that is better):
  the NEW/BASE ratio of the medians over the repeats, with the interval of
  ``dlscale.analysis.stats.ratio_interval`` (the verdicts' rules: a seeded bootstrap with 6 or more
  repeats on each side, else the conservative range ratio with its coverage), and a
  Mann-Whitney U test with 2 or more repeats a side (``rank_test``). Efficiency is a
  ratio of ratios (each study's cell over its baseline cell): its interval comes from the
  four cells' repeats (``efficiency_ratio_interval``) and it has no rank test. ``change``
  is ``improved`` or ``regressed`` only with evidence at ``1 - CONFIDENCE``
  (``decide_change``): the interval excludes 1 and the rank test rejects (or, without a
  test, the interval is a 95 % bootstrap one) and the interval clears the between-study
  noise floor (``clears_floor``: wholly beyond ``1 +/- COMPARE_NOISE_FLOOR``, identical
  studies differ by offsets their own repeats do not see); otherwise ``no change``, and ``note`` says
  why when the interval alone excludes 1. With 2 or 3 repeats a side no rank test can
  reject (``smallest_p``): a range that happens to exclude 1 is no evidence (2 against 2
  separate completely one time in three by chance).
* **Verdict changes**: every finding (the three questions) and seed claim whose answer
  differs between the studies (a different winner, or a winner against "no clear
  winner").
* **Differences**: what the studies ran with, as their tables, run_start events and
  archive manifests record it (``study_facts``).

The repeats are the samples, as in the verdicts: a run contributes its median over timed
iterations (``runs.csv``), never its iterations. The CLI writes every output or none
(``atomic.replace_all``); bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scistats

from dlscale.analysis import verdicts
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
from dlscale.analysis.tables import batch_key
from dlscale.base import atomic
from dlscale.compare import page as compare_page
from dlscale.compare.studies import (
    CompareError,
    Study,
    check_distinct,
    differences,
    hardware_differs,
    load_study,
    one_line,
    unique_labels,
)
from dlscale.networks import HOST
from dlscale.outputs import COMPARE_FILES
from dlscale.thresholds import COMPARE_NOISE_FLOOR

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
    Metric("efficiency", True, True, "scaling efficiency against the set-up's smallest node count"),
    Metric("time_to_target_s", False, False, "time to the quality target (s)"),
)
METRIC_BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}

#: What makes two cells the same experiment. ``batch``: per rank under weak scaling,
#: global under strong (what stays fixed, ``tables.batch_key``).
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
    *verdicts.SETUP,
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
    """One set-up at one node count in one study: its repeats' values per metric."""

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
        name = verdicts.cell_name(
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


def _applies(metric: Metric, base: Cell, new: Cell) -> bool:
    if metric.name == "exposed_comm_share":
        return base.world_size > 1 and new.world_size > 1
    if metric.name == "efficiency":
        return base.baseline_nodes == new.baseline_nodes and base.nodes > base.baseline_nodes
    return True


@dataclass
class Pair:
    """BASE against one NEW study: the comparison rows, the unmatched cells, the verdicts."""

    comparison: pd.DataFrame
    unmatched: pd.DataFrame
    verdict_changes: pd.DataFrame
    matched: int


def compare_pair(
    base: Study, new: Study, keys: Sequence[str] = MATCH_KEYS, floor: float = COMPARE_NOISE_FLOOR
) -> Pair:
    """Every matched cell's metrics (``compare_metric``), the cells of either study
    without a match, and the verdicts that changed. ``CompareError`` when no cell is in
    common."""
    mine, theirs = study_cells(base.runs, keys, base.label), study_cells(new.runs, keys, new.label)
    common = [k for k in mine if k in theirs]
    if not common:
        raise CompareError(
            f"no cell in common between {base.label} ({base.source}, {len(mine)} cells) and {new.label}"
            f" ({new.source}, {len(theirs)} cells): they ran different set-ups"
            f" (matched on {', '.join(keys)})"
        )
    rows = []
    for key in common:
        for metric in METRICS:
            if not _applies(metric, mine[key], theirs[key]):
                continue
            if metric.name == "efficiency":
                baseline = _baseline_key(key, keys, mine[key].baseline_nodes)
                if baseline not in mine or baseline not in theirs:
                    continue
                numbers = compare_efficiency(mine[key], mine[baseline], theirs[key], theirs[baseline], floor)
            else:
                numbers = compare_metric(
                    mine[key].values[metric.name], theirs[key].values[metric.name], metric, floor
                )
            if numbers is not None:
                rows.append(
                    {
                        "study": new.label,
                        "base": base.label,
                        "cell": mine[key].name,
                        **_key_dict(key, keys),
                        **numbers,
                    }
                )
    ran = {base.label: run_keys(base.runs, keys), new.label: run_keys(new.runs, keys)}
    unmatched = [
        {"study": new.label, "base": base.label, "only_in": label, "cell": cell.name, **_key_dict(k, keys),
         "repeats": cell.repeats,
         "why": f"no ok, uncontended repeat in {other_label}" if k in ran[other_label] else f"not run in {other_label}"}
        for label, cells, other, other_label in (
            (base.label, mine, theirs, new.label), (new.label, theirs, mine, base.label)
        )
        for k, cell in cells.items()
        if k not in other
    ]  # fmt: skip
    return Pair(
        pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS)),
        pd.DataFrame(unmatched, columns=list(UNMATCHED_COLUMNS)),
        verdict_changes(base, new),
        len(common),
    )


def _baseline_key(key: tuple[Any, ...], keys: Sequence[str], nodes: float) -> tuple[Any, ...]:
    """The key of a cell's baseline cell: the same set-up at ``nodes``."""
    out = list(key)
    out[list(keys).index("nodes")] = int(nodes)
    return tuple(out)


def _key_dict(key: tuple[Any, ...], keys: Sequence[str]) -> dict[str, Any]:
    out = dict.fromkeys(MATCH_KEYS, "(any)")
    out.update(zip(keys, key, strict=True))
    return out


# --- verdicts ------------------------------------------------------------------------------------


def _setup_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for name in verdicts.SETUP:
        value = row.get(name)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(HOST if name == "network" else "")
        elif isinstance(value, float) and value.is_integer():
            out.append(str(int(value)))
        else:
            out.append(str(value))
    return tuple(out)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def what_changed(base: str, new: str) -> str:
    """How a verdict changed, in words: a different winner, a winner gained or lost."""
    undecided = ("", verdicts.NO_CLEAR_WINNER)
    if base.startswith("n/a") or new.startswith("n/a") or not base or not new:
        return "asked in one study only"
    if base in undecided or new in undecided:
        return (
            f"winner {new} where there was no clear winner" if base in undecided else f"{base} no longer wins"
        )
    if base in (verdicts.REPRODUCED, verdicts.CONTRADICTED, verdicts.INCONCLUSIVE):
        return f"claim {base} -> {new}"
    return f"different winner: {base} -> {new}"


def verdict_changes(base: Study, new: Study) -> pd.DataFrame:
    """Every finding (the three questions) and seed claim answered differently by ``new``
    than by ``base``, per set-up in both studies."""
    rows: list[dict[str, Any]] = []
    theirs = {_setup_key(r): r for r in new.findings.to_dict("records")}
    for row in base.findings.to_dict("records"):
        other = theirs.get(_setup_key(row))
        if other is None:
            continue
        for question in verdicts.QUESTIONS:
            was, now = _text(row.get(question)), _text(other.get(question))
            if was != now:
                rows.append(_verdict_row(base, new, "finding", row, question, was, now))
    claims = {(_setup_key(r), str(r.get("claim"))): r for r in new.claims.to_dict("records")}
    for row in base.claims.to_dict("records"):
        other = claims.get((_setup_key(row), str(row.get("claim"))))
        if other is None:
            continue
        was, now = _text(row.get("verdict")), _text(other.get("verdict"))
        if was != now:
            rows.append(_verdict_row(base, new, "claim", row, str(row.get("claim")), was, now))
    return pd.DataFrame(rows, columns=list(VERDICT_CHANGE_COLUMNS))


def _verdict_row(
    base: Study, new: Study, kind: str, row: Mapping[str, Any], question: str, was: str, now: str
) -> dict[str, Any]:
    return {
        "study": new.label,
        "base": base.label,
        "kind": kind,
        **dict(zip(verdicts.SETUP, _setup_key(row), strict=True)),
        "question": question,
        "base_verdict": was,
        "new_verdict": now,
        "what_changed": what_changed(was, now),
    }


# --- the whole comparison ---------------------------------------------------------------------


@dataclass
class Comparison:
    """Everything ``compare`` makes (``compare_page`` draws it)."""

    studies: list[Study]
    comparison: pd.DataFrame
    verdict_changes: pd.DataFrame
    differences: pd.DataFrame
    unmatched: pd.DataFrame
    hardware: list[str]
    keys: tuple[str, ...]
    matched: dict[str, int]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per NEW study: how many cell-metrics improved, regressed or did not change."""
        out: dict[str, dict[str, int]] = {}
        for study in self.studies[1:]:
            mine = self.comparison[self.comparison["study"].eq(study.label)]
            out[study.label] = {c: int(mine["change"].eq(c).sum()) for c in (IMPROVED, REGRESSED, NO_CHANGE)}
        return out


def compare(
    targets: Sequence[str | Path], ignore: Sequence[str] = (), noise_floor: float = COMPARE_NOISE_FLOOR
) -> Comparison:
    """Compare the studies at ``targets`` (the first is BASE) cell by cell; ``ignore``:
    match keys left out of the matching (``IGNORABLE_KEYS``); ``noise_floor``: the
    between-study band a change's interval must clear (``clears_floor``)."""
    if len(targets) < 2:
        raise CompareError("give at least two studies: BASE NEW [MORE ...]")
    if not 0.0 <= noise_floor < 1.0:
        raise CompareError(f"--noise-floor {noise_floor:g}: give a relative change in [0, 1), e.g. 0.1")
    unknown = [k for k in ignore if k not in IGNORABLE_KEYS]
    if unknown:
        raise CompareError(
            f"--ignore-key {', '.join(unknown)}: only {', '.join(IGNORABLE_KEYS)} may be ignored"
        )
    check_distinct(targets)
    keys = tuple(k for k in MATCH_KEYS if k not in ignore)
    studies = [load_study(t, label) for t, label in zip(targets, unique_labels(targets), strict=True)]
    pairs = [compare_pair(studies[0], other, keys, noise_floor) for other in studies[1:]]
    diffs = differences(studies)
    return Comparison(
        studies,
        _concat([p.comparison for p in pairs], COMPARISON_COLUMNS),
        _concat([p.verdict_changes for p in pairs], VERDICT_CHANGE_COLUMNS),
        diffs,
        _concat([p.unmatched for p in pairs], UNMATCHED_COLUMNS),
        hardware_differs(diffs),
        keys,
        {s.label: p.matched for s, p in zip(studies[1:], pairs, strict=True)},
    )


def _concat(frames: Sequence[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(columns))


def write_comparison(result: Comparison, out: str | Path) -> list[Path]:
    """Write every output of ``OUTPUT_FILES`` under ``out``, all or none."""
    folder = Path(out)
    chart = compare_page.ratio_chart(
        result.comparison, [s.label for s in result.studies[1:]], result.hardware
    )
    svg = compare_page.chart_svg(chart)
    page = compare_page.page(
        [
            {"label": s.label, "role": "BASE" if i == 0 else "NEW", "source": s.source, "runs": str(len(s.runs)),
             "checked": s.verified, "table schema": str(s.schema)}
            for i, s in enumerate(result.studies)
        ],
        result.comparison,
        result.verdict_changes,
        result.differences,
        result.unmatched,
        result.hardware,
        result.counts(),
        {m.name: (m.label, m.higher_is_better, m.normalised) for m in METRICS},
        result.keys,
        svg,
    )  # fmt: skip
    tables = {
        "comparison": result.comparison,
        "verdict_changes": result.verdict_changes,
        "differences": result.differences,
        "unmatched": result.unmatched,
    }
    writers: dict[Path, Any] = {
        folder / OUTPUT_FILES[name]: (lambda tmp, t=table: t.to_csv(tmp, index=False))
        for name, table in tables.items()
    }
    writers[folder / OUTPUT_FILES["page"]] = lambda tmp: Path(tmp).write_text(page, encoding="utf-8")
    for fmt in compare_page.FIGURE_FORMATS:
        target = folder / OUTPUT_FILES[f"figure_{fmt}"]
        if fmt == "svg":
            writers[target] = lambda tmp: Path(tmp).write_text(svg, encoding="utf-8")
        else:
            writers[target] = lambda tmp, f=fmt: compare_page.save(chart, tmp, f)
    return atomic.replace_all(writers)


def summary(result: Comparison) -> list[str]:
    """Lines for the terminal: per NEW study the matched cells and the changes."""
    lines = []
    for label, counts in result.counts().items():
        changed = result.verdict_changes[result.verdict_changes["study"].eq(label)]
        only = result.unmatched[result.unmatched["study"].eq(label)]
        lines.append(
            f"{label} against {result.studies[0].label}: {result.matched[label]} cells matched"
            f" ({len(only)} unmatched); {counts[IMPROVED]} improved, {counts[REGRESSED]} regressed,"
            f" {counts[NO_CHANGE]} no change; {len(changed)} verdict(s) changed"
        )
    if result.hardware:
        lines.append(
            f"the hardware differs ({', '.join(result.hardware)}): raw throughput compares the machines"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlscale.compare BASE NEW [MORE ...] --out DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.compare",
        description="Compare studies cell by cell with intervals: NEW/BASE ratios of each metric's median,"
        " the verdicts that changed and what the studies ran with (docs/compare.md).",
    )
    parser.add_argument("base", help="the reference study: a results folder, a study folder or an archive")
    parser.add_argument("new", nargs="+", help="the study (or studies) compared with BASE")
    parser.add_argument("--out", required=True, help="folder for the comparison (created if missing)")
    parser.add_argument(
        "--ignore-key",
        action="append",
        default=[],
        choices=IGNORABLE_KEYS,
        help="match cells without this key (a deliberate change of it, e.g. threads_per_rank); repeatable",
    )
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=COMPARE_NOISE_FLOOR,
        help="a change is named only when its ratio's interval lies wholly beyond 1 +/- this"
        f" (default {COMPARE_NOISE_FLOOR:g}, measured on identical studies: docs/compare.md; 0: the test alone)",
    )
    args = parser.parse_args(argv)
    try:
        result = compare([args.base, *args.new], args.ignore_key, args.noise_floor)
    except CompareError as err:
        print(f"compare: {one_line(err)}", file=sys.stderr)
        return 2
    try:
        written = write_comparison(result, args.out)
    except atomic.WriteError as err:
        print(f"compare: {err}", file=sys.stderr)
        return 1
    for line in summary(result):
        print(line)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

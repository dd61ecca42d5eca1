"""Per-run statistics over timed iterations, and each run's final status.

The definitions (a step ends with the slowest rank; compute and communication are the mean
over ranks; per run the median over timed iterations; a failed run has NaN in every
measured column) are stated once, in ``dlscale.analysis.tables``'s docstring; this module
computes them on whole columns of the iterations table (its ``_run`` column: the run's
position), with no Python loop over iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from dlscale.thresholds import threshold


def run_statistics(iterations: pd.DataFrame, n_runs: int) -> pd.DataFrame:
    """Per-run medians over timed iterations, from per-iteration cross-rank reductions."""
    index = pd.RangeIndex(n_runs, name="_run")
    duplicates = iterations.duplicated(["_run", "rank", "iteration"])
    duplicated_runs = pd.Series(False, index=index)
    duplicated_runs[iterations.loc[duplicates, "_run"].unique()] = True

    per_iter = iterations.groupby(["_run", "iteration"], sort=False).agg(
        step_s=("step_s", "max"),
        compute_s=("compute_s", "mean"),
        comm_s=("comm_s", "mean"),
        input_s=("input_s", "mean"),
        samples=("samples", "sum"),
        warmup=("warmup", "any"),
        reports=("rank", "size"),
    )
    run_of_iter = per_iter.index.get_level_values("_run")
    expected = per_iter["reports"].groupby(run_of_iter).transform("max")
    complete = per_iter["reports"].eq(expected)
    per_iter["exposed_comm_s"] = (per_iter["step_s"] - per_iter["compute_s"]).clip(lower=0.0)
    positive = per_iter["step_s"].where(per_iter["step_s"] > 0)
    per_iter["exposed_comm_share"] = per_iter["exposed_comm_s"] / positive
    per_iter["throughput"] = per_iter["samples"] / positive

    timed = per_iter[~per_iter["warmup"] & complete]
    grouped = timed.groupby(level="_run")
    stats = grouped.agg(
        timed_iterations=("step_s", "size"),
        step_s=("step_s", "median"),
        step_s_min=("step_s", "min"),
        step_s_max=("step_s", "max"),
        compute_s=("compute_s", "median"),
        comm_s=("comm_s", "median"),
        exposed_comm_s=("exposed_comm_s", "median"),
        exposed_comm_share=("exposed_comm_share", "median"),
        input_s=("input_s", "median"),
        throughput=("throughput", "median"),
        throughput_min=("throughput", "min"),
        throughput_max=("throughput", "max"),
    ).reindex(index)
    stats["timed_iterations"] = stats["timed_iterations"].fillna(0).astype("int64")
    drift = step_drift(timed["step_s"], index)
    stats["step_drift"] = drift["step_drift"]
    stats["step_drift_p"] = drift["step_drift_p"]
    partial = (~per_iter["warmup"] & ~complete).groupby(run_of_iter).sum()
    stats["partial_iterations"] = partial.reindex(index).fillna(0).astype("int64")

    first, last = _loss_ends(iterations)
    stats["loss_first"] = first.reindex(index)
    stats["loss_last"] = last.reindex(index)
    stats["_duplicates"] = duplicated_runs
    return stats


#: Fewest timed steps in each half for ``step_drift`` to be computed (a rank test on fewer
#: cannot reach p < 0.01: with 5 and 5 the smallest two-sided p is 0.008).
DRIFT_MIN_HALF = 5


def step_drift(step_s: pd.Series, index: pd.Index) -> pd.DataFrame:
    """Whether each run's timed steps were steady: ``step_drift``, the median step of the
    second half of its timed iterations over the first half's (below 1: the steps got faster
    while timed, as a JIT compiler or cold caches make them; above 1: slower), and
    ``step_drift_p``, the two-sided Mann-Whitney U p-value that the halves differ.

    Hoefler and Belli (SC15, rule 4: state the measured state) ask that a run be timed in a
    known state; a run whose halves differ was timed partly before (or after) its steady
    state, so its median step is neither the cold nor the warm figure. ``step_s``: the timed
    steps, indexed by (run, iteration); the middle step of an odd count is in neither half.
    NaN where a half has fewer than ``DRIFT_MIN_HALF`` steps.
    """
    out = pd.DataFrame({"step_drift": np.nan, "step_drift_p": np.nan}, index=index)
    for run, steps in step_s.sort_index().groupby(level=0, sort=False):
        values = steps.to_numpy(dtype="float64")
        values = values[np.isfinite(values)]
        half = len(values) // 2
        if half < DRIFT_MIN_HALF:
            continue
        early, late = values[:half], values[-half:]
        first = float(np.median(early))
        if first <= 0:
            continue
        out.at[run, "step_drift"] = float(np.median(late)) / first
        out.at[run, "step_drift_p"] = float(mannwhitneyu(early, late, alternative="two-sided").pvalue)
    return out


def unsteady(runs: pd.DataFrame) -> pd.Series:
    """Runs whose timed steps drifted: ``step_drift`` outside the ``step_drift`` threshold's
    band and the halves different at ``step_drift_p`` below its significance level."""
    if "step_drift" not in runs:
        return pd.Series(False, index=runs.index)
    drift = pd.to_numeric(runs["step_drift"], errors="coerce")
    p = pd.to_numeric(runs["step_drift_p"], errors="coerce")
    band = threshold("step_drift")
    beyond = drift.map(band.fails).astype(bool)
    return beyond & p.lt(threshold("step_drift_p").value).fillna(False).astype(bool)


def loss_curve(iterations: pd.DataFrame, run_key: str = "run_id") -> pd.DataFrame:
    """The loss curve of each run: the loss of its lowest reporting rank, every iteration.

    Rank 0 is what every framework reports natively (BigDL and Caffe logs only carry the
    driver's / rank 0's loss), so it is the one loss comparable across frameworks. Warm-up
    iterations are kept: the start of the curve is where the loss moves most. Returns the
    rows of ``iterations`` for that rank with a non-null loss, sorted by run and iteration.
    """
    has_loss = iterations[iterations["loss"].notna()]
    lowest = has_loss.groupby(run_key)["rank"].transform("min")
    curve = has_loss[has_loss["rank"].eq(lowest)]
    return curve.sort_values([run_key, "iteration"], kind="stable")


def _loss_ends(iterations: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    curve = loss_curve(iterations[["_run", "rank", "iteration", "loss"]], run_key="_run")
    grouped = curve.groupby("_run")["loss"]
    return grouped.first(), grouped.last()


def decide_status(runs: pd.DataFrame, measured_columns: Sequence[str]) -> pd.DataFrame:
    """Final status and reason; failed runs get NaN in every one of ``measured_columns``."""
    out = runs.copy()
    reported_ok = out["reported_status"].eq("ok")
    reason = out["reported_reason"].astype(object).where(~reported_ok, None)
    failed = ~reported_ok
    reason = reason.where(~(failed & reason.isna()), "run reported failure without a reason")
    throughput = pd.to_numeric(out["throughput"], errors="coerce")
    checks: list[tuple[pd.Series, Any]] = [
        (out["_stray_events"].gt(0), "events file has run_start/run_end events in the middle"),
        (out["_duplicates"], "duplicate iteration events for the same rank and iteration"),
        (out["_missing"].notna(), out["_missing"]),
        (out["timed_iterations"].eq(0), "no timed iterations"),
        (~(throughput.gt(0) & np.isfinite(throughput)), "no throughput: every timed step took 0 s"),
    ]
    for mask, why in checks:
        newly = reported_ok & mask & ~failed
        reason = reason.where(~newly, why)
        failed = failed | newly
    out["status"] = np.where(failed, "failed", "ok")
    out["reason"] = reason
    measured = [name for name in measured_columns if name in out.columns]
    for name in measured:
        out[name] = pd.to_numeric(out[name], errors="coerce").astype("float64")
    out.loc[failed, measured] = np.nan
    for name in ("timed_iterations", "partial_iterations"):
        out[name] = out[name].round().astype("Int64")
    return out

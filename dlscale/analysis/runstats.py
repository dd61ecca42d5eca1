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
    partial = (~per_iter["warmup"] & ~complete).groupby(run_of_iter).sum()
    stats["partial_iterations"] = partial.reindex(index).fillna(0).astype("int64")

    first, last = _loss_ends(iterations)
    stats["loss_first"] = first.reindex(index)
    stats["loss_last"] = last.reindex(index)
    stats["_duplicates"] = duplicated_runs
    return stats


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

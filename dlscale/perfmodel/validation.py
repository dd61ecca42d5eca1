"""Predicted against measured step time of every held-out run (emulated networks), by run
and by cell, wholly and given each run's own compute (the model's own error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from dlscale.networks import HOST
from dlscale.perfmodel.comm import Calibration, library_comm, link_scale
from dlscale.perfmodel.fits import Fits
from dlscale.perfmodel.links import emulated_link
from dlscale.perfmodel.patterns import PATTERN_OP, RING, gradient_bytes
from dlscale.perfmodel.runs import compute_baselines, measured_runs
from dlscale.thresholds import threshold

VALIDATION_COLUMNS: tuple[str, ...] = (
    "run_id", "framework", "setup", "model", "nodes", "ranks_per_node", "world_size", "network",
    "batch_per_rank", "link_alpha_s", "link_beta_Bps", "link_scale", "measured_s", "predicted_s",
    "error", "measured_compute_s", "predicted_compute_s", "compute_source", "compute_error",
    "measured_exposed_s", "predicted_comm_s", "offset_s", "comm_error", "predicted_given_compute_s",
    "error_given_compute", "note",
)  # fmt: skip
#: A validation cell: the repeats of one set-up, model, layout and network (their medians
#: are the unit of validation: a repeat is a sample of the host's noise, not a new case).
VALIDATION_CELL: tuple[str, ...] = ("setup", "model", "network", "nodes", "ranks_per_node", "batch_per_rank")


SUMMARY_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "runs", "predicted", "cells", "median_abs_error", "max_abs_error",
    "median_error", "worst_cell", "networks", "within_target", "median_abs_compute_error",
    "max_abs_compute_error", "median_abs_error_given_compute", "max_abs_error_given_compute",
    "median_error_given_compute", "within_target_given_compute", "worst_cell_given_compute",
    "communicating", "median_abs_comm_error", "max_abs_comm_error",
)  # fmt: skip


#: Target of the validation: median |error| per framework on held-out runs (``dlscale.thresholds``).
VALIDATION_TARGET = threshold("validation_error").value


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error ``predicted / measured - 1`` (+0.1: the model predicts 10% too slow)."""
    if not measured or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1.0


def validate(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    fits: Fits | None = None,
    num_ps: int = 1,
) -> pd.DataFrame:
    """Predicted against measured step time of every held-out run (on an emulated network).

    Calibration never sees these runs: library terms come from the micro-benchmarks (or
    host runs), offsets from host runs. Two predictions per run:

    * ``predicted_s`` (``error``): everything predicted; compute from the host runs at the
      same layout when the study has them, else the smallest world's (``compute_source``;
      ``compute_error`` is that compute against the run's own);
    * ``predicted_given_compute_s`` (``error_given_compute``): the run's own measured
      compute plus the predicted communication, for runs that synchronise (a one-rank
      ring run's step is its compute: no prediction). On a shared host compute varies
      between runs, which says nothing about the model, whose job is the communication and
      the scaling: this is the model's error.

    The link's bucket holds what the compute before the synchronisation refilled
    (``Link.refilled``: the predicted compute, resp. the measured one). A run that cannot be
    predicted is a row with a note.
    """
    fits = fits or {}
    measured = measured_runs(runs)
    emulated = measured[measured["network"].ne(HOST)]
    if emulated.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in VALIDATION_COLUMNS})
    baselines = compute_baselines(measured).set_index(["setup", "model", "batch_per_rank"])
    host = measured[measured["network"].eq(HOST) & measured["compute_s"].notna()]
    same_layout = host.groupby(["setup", "model", "batch_per_rank", "nodes", "ranks_per_node"])[
        "compute_s"
    ].median()
    rows = []
    for run in emulated.itertuples(index=False):
        row: dict[str, Any] = {name: getattr(run, name, math.nan) for name in VALIDATION_COLUMNS}
        row.update(
            measured_s=run.step_s, measured_compute_s=run.compute_s, measured_exposed_s=run.exposed_s,
            predicted_s=math.nan, predicted_compute_s=math.nan, predicted_comm_s=math.nan, error=math.nan,
            comm_error=math.nan, offset_s=math.nan, compute_source="", note="", compute_error=math.nan,
            predicted_given_compute_s=math.nan, error_given_compute=math.nan, link_scale=math.nan,
        )  # fmt: skip
        try:
            link = emulated_link(run.network, fits)
        except KeyError:
            row["note"] = f"unknown network {run.network!r}"
            rows.append(row)
            continue
        row["link_alpha_s"], row["link_beta_Bps"] = link.alpha_s, link.beta_Bps
        layout = (run.setup, run.model, run.batch_per_rank, run.nodes, run.ranks_per_node)
        key = (run.setup, run.model, run.batch_per_rank)
        if layout in same_layout.index:
            row["predicted_compute_s"] = float(same_layout.loc[layout])
            row["compute_source"] = f"host runs at n{run.nodes}x{run.ranks_per_node}"
        elif key in baselines.index:
            entry = baselines.loc[key]
            row["predicted_compute_s"] = float(entry["compute_s"])
            row["compute_source"] = f"smallest world ({int(entry['world_size'])})"
        own_compute = float(run.compute_s) if pd.notna(run.compute_s) else math.nan
        row["compute_error"] = prediction_error(row["predicted_compute_s"], own_compute)
        cal = calibrations.get(run.setup)
        if cal is None:
            row["note"] = f"no micro-benchmarks or host-network runs of {run.setup} to calibrate from"
            rows.append(row)
            continue
        cores = cal.host_cores or None
        main = cal.fits.get(PATTERN_OP[cal.pattern])
        row["link_scale"] = link_scale(main)
        offset = float(cal.offset([run.nodes], run.ranks_per_node, nbytes=gradient_bytes(run.model))[0])

        def comm_after(idle_s: float, link=link, cal=cal, run=run, cores=cores, offset=offset) -> float:
            refilled = link.refilled(idle_s if math.isfinite(idle_s) else 0.0)
            return offset + float(
                library_comm(cal, run.model, [run.nodes], run.ranks_per_node, refilled, cores, num_ps,
                             run.batch_per_rank, run.dataset)[0]
            )  # fmt: skip

        comm = comm_after(row["predicted_compute_s"])
        row["predicted_comm_s"], row["offset_s"] = comm, offset
        if pd.notna(run.exposed_s) and run.exposed_s > 0:
            row["comm_error"] = comm_after(own_compute) / run.exposed_s - 1.0
        talks = run.world_size > 1 or cal.pattern != RING
        if math.isfinite(own_compute) and talks:  # (a lone ring rank: nothing to predict)
            row["predicted_given_compute_s"] = own_compute + comm_after(own_compute)
            row["error_given_compute"] = prediction_error(row["predicted_given_compute_s"], run.step_s)
        if math.isnan(row["predicted_compute_s"]):
            row["note"] = "no compute measurement for this set-up, model and batch"
        else:
            row["predicted_s"] = row["predicted_compute_s"] + comm
            row["error"] = prediction_error(row["predicted_s"], run.step_s)
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(VALIDATION_COLUMNS))
    return table.sort_values(
        ["setup", "model", "network", "world_size", "run_id"], kind="stable"
    ).reset_index(drop=True)


def validation_cells(validation: pd.DataFrame) -> pd.DataFrame:
    """The held-out runs by cell (``VALIDATION_CELL``): medians over the cell's repeats of
    what was measured and predicted, and the errors of those medians."""
    if validation.empty:
        return pd.DataFrame()
    numeric = [
        "measured_s", "predicted_s", "measured_compute_s", "predicted_compute_s", "measured_exposed_s",
        "predicted_comm_s", "predicted_given_compute_s",
    ]  # fmt: skip
    frame = validation.copy()
    for name in numeric:
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    keys = list(VALIDATION_CELL)
    cells = frame.groupby(keys, as_index=False, sort=True).agg(
        framework=("framework", "first"),
        repeats=("run_id", "size"),
        run_ids=("run_id", lambda ids: ";".join(sorted(ids))),
        **{name: (name, "median") for name in numeric},
    )

    def err(predicted: pd.Series, measured: pd.Series) -> pd.Series:
        return (predicted / measured.where(measured > 0) - 1.0).astype("float64")

    cells["error"] = err(cells["predicted_s"], cells["measured_s"])
    cells["compute_error"] = err(cells["predicted_compute_s"], cells["measured_compute_s"])
    cells["error_given_compute"] = err(cells["predicted_given_compute_s"], cells["measured_s"])
    communicating = frame[pd.to_numeric(frame["comm_error"], errors="coerce").notna()]
    comm = (
        communicating.groupby(keys)["comm_error"].median() if len(communicating) else pd.Series(dtype=float)
    )
    cells["comm_error"] = [comm.get(tuple(row), math.nan) for row in cells[keys].itertuples(index=False)]
    cells["cell"] = [
        f"{r.setup}/{r.model}/n{r.nodes}x{r.ranks_per_node}/{r.network}"
        for r in cells.itertuples(index=False)
    ]
    return cells


def validation_summary(validation: pd.DataFrame, target: float = VALIDATION_TARGET) -> pd.DataFrame:
    """Per set-up, over its held-out cells (``validation_cells``: medians of repeats):
    median and worst |error| of the step as wholly predicted, of the compute alone, of the
    step given the run's own compute (the model's error: ``*_given_compute``), and of the
    communication alone (``comm_error``: predicted against the exposed time, cells that
    communicate); ``within_target*``: that median at most ``target`` (the ``validation_error``
    threshold's ``passes`` at that value)."""
    within = threshold("validation_error").with_value(target).passes
    if validation.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SUMMARY_COLUMNS})
    cells = validation_cells(validation)
    rows = []
    for setup, group in cells.groupby("setup", sort=True):
        runs = validation[validation["setup"].eq(setup)]

        def stats(column: str, group=group) -> tuple[float, float, float, str]:
            values = pd.to_numeric(group[column], errors="coerce").dropna()
            if values.empty:
                return math.nan, math.nan, math.nan, ""
            worst = str(group.loc[values.abs().idxmax(), "cell"])
            return float(values.abs().median()), float(values.abs().max()), float(values.median()), worst

        step, compute = stats("error"), stats("compute_error")
        given, comm = stats("error_given_compute"), stats("comm_error")
        rows.append(
            {
                "setup": setup, "framework": group["framework"].iloc[0], "runs": len(runs),
                "predicted": int(pd.to_numeric(runs["error"], errors="coerce").notna().sum()),
                "cells": len(group), "median_abs_error": step[0], "max_abs_error": step[1],
                "median_error": step[2], "worst_cell": step[3],
                "networks": ";".join(sorted(group["network"].astype(str).unique())),
                "within_target": within(step[0]),
                "median_abs_compute_error": compute[0], "max_abs_compute_error": compute[1],
                "median_abs_error_given_compute": given[0], "max_abs_error_given_compute": given[1],
                "median_error_given_compute": given[2], "within_target_given_compute": within(given[0]),
                "worst_cell_given_compute": given[3],
                "communicating": int(pd.to_numeric(group["comm_error"], errors="coerce").notna().sum()),
                "median_abs_comm_error": comm[0], "max_abs_comm_error": comm[1],
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))

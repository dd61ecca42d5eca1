"""Per set-up calibration: the library's micro-benchmark fits, BigDL's per-iteration Spark
line and the runner's offset from the host-network runs (``calibration.csv``).

Only host-network runs are fitted here; the emulated-network runs stay held out for
``validation``. Without micro-benchmarks the library terms are fitted on the host runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from dlscale.commbench import LIBRARIES
from dlscale.networks import HOST
from dlscale.perfmodel.comm import Calibration, combine, exchange_parts, library_comm, spark_lookup_cost
from dlscale.perfmodel.fits import LIBRARY_OPS, WEIGHT_FLOOR_S, Fit, Fits, fit_cells
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import (
    BIGDL,
    BIGDL_JOBS_PER_ITERATION,
    PATTERN_OP,
    PS,
    RING,
    SETUP_PATTERN,
    SPARK_STEP,
    contention,
    ring_terms,
)
from dlscale.perfmodel.runs import communicating, measured_runs

#: The smallest exposed time a host run's weight in the offset fit divides by: a ring's
#: exposed time is a difference of two medians (step - compute) and can come out at
#: microseconds by noise, below the host's scheduling jitter of about a millisecond
#: (``docs/perfmodel.md``), so a run weighs at most as a 1 ms one.
_OFFSET_SCALE_FLOOR_S = 1e-3

CALIBRATION_COLUMNS: tuple[str, ...] = (
    "setup",
    "runs",
    "world_sizes",
    "models",
    "overhead_s", "framework", "pattern", "library", "source", "c_s", "alpha_s", "beta_Bps",
    "per_worker_s", "server_beta_Bps", "job_s", "job_per_executor_s", "spark_source", "spark_step_s",
    "spark_step_per_executor_s", "spark_executors", "spark_points", "spark_rmse_s", "spark_rel_rmse",
    "spark_residuals_s", "offset_s", "offset_per_contention_s", "offset_per_byte_s", "projection_offset_s",
    "projection_offset_per_byte_s", "host_runs", "host_rel_rmse", "fitted", "note",
)  # fmt: skip


def fit_spark_step(cal: Calibration, host_runs: pd.DataFrame) -> Fit | None:
    """BigDL's per-iteration Spark cost as a line in the executors ``N``, fitted on its
    host-network runs: ``exposed - exchange(N) = s_0 + s_1·N``, ``s_0, s_1 >= 0``.

    Why from runs: a training iteration's Spark cost grows far faster with the executors
    than a JVM-only job of ``N`` empty tasks (the micro-benchmark's), since a real task
    deserialises the model, fetches the weights and its driver waits for the slowest
    executor. The block exchange (``exchange_parts``, with the host's contention) is taken
    off each run's exposed time and a line with non-negative coefficients is fitted by
    bounded least squares (``scipy.optimize.lsq_linear``, exact ``bvls``; absolute
    residuals: the points are of one order of magnitude). None where the runs cannot pin a
    slope (fewer than two executor counts) or the set-up is not BigDL's; the model then
    falls back to the micro-benchmark (``spark_step_cost``). Only host-network runs belong
    here; on a shared host their slope carries the contention of ``N`` JVMs too, which a
    projection keeps (no measurement separates the two).
    """
    if cal.pattern != BIGDL or "shuffle" not in cal.fits or host_runs.empty:
        return None
    group = host_runs[host_runs["exposed_s"].notna() & host_runs["network"].eq(HOST)]
    if group["nodes"].nunique() < 2:
        return None
    shuffle = cal.fits["shuffle"]
    n = group["nodes"].to_numpy(dtype="float64")
    size = group["gradient_bytes"].to_numpy(dtype="float64")
    exchange = combine(
        *exchange_parts(shuffle, n, size, Link.host(), cal.host_cores or None), shuffle.get("overlap")
    )
    # the driver's block lookups (``spark_lookup_cost``) are modelled apart: the line is the rest
    exchange = exchange + spark_lookup_cost(n)
    measured = group["exposed_s"].to_numpy(dtype="float64")
    design_matrix = np.column_stack([np.ones_like(n), n])
    solution = lsq_linear(design_matrix, measured - exchange, bounds=(0.0, np.inf), method="bvls").x
    residual = measured - (exchange + design_matrix @ solution)
    rel = residual / np.maximum(np.abs(measured), WEIGHT_FLOOR_S)
    by_count = pd.Series(residual).groupby(n.astype("int64")).median()
    return Fit(
        library=cal.library,
        op=SPARK_STEP,
        coefficients={"c": float(solution[0]), "per_executor": float(solution[1])},
        identified=("c", "per_executor"),
        points=len(group),
        worlds=tuple(int(w) for w in sorted(set(n.astype("int64")))),
        sizes=tuple(int(s) for s in sorted(set(size))),
        rel_rmse=float(np.sqrt(np.mean(rel**2))),
        max_abs_rel_error=float(np.max(np.abs(rel))),
        host_cores=cal.host_cores,
        network=HOST,
        rmse_s=float(np.sqrt(np.mean(residual**2))),
        residuals_s=tuple((int(k), float(v)) for k, v in by_count.items()),
    )


def with_spark_step(cal: Calibration, host_runs: pd.DataFrame) -> Calibration:
    """``cal`` with BigDL's per-iteration Spark cost from its host runs where they pin it
    (``fit_spark_step``), and a note of the term's source; other set-ups unchanged."""
    if cal.pattern != BIGDL:
        return cal
    step = fit_spark_step(cal, host_runs)
    counts = sorted(int(c) for c in host_runs["nodes"].unique()) if len(host_runs) else []
    if step is None:
        where = f"at one executor count ({counts[0]})" if counts else "none"
        return dataclasses.replace(
            cal, note=f"Spark per-iteration cost from the micro-benchmark (host runs: {where})"
        )
    return dataclasses.replace(
        cal,
        fits={**cal.fits, SPARK_STEP: step},
        note=f"Spark per-iteration cost from {step.points} host runs at {';'.join(map(str, step.worlds))} executors",
    )


def _runs_fit(setup: str, pattern: str, host: pd.DataFrame, num_ps: int) -> Calibration | None:
    """The fallback: library terms fitted on the set-up's host runs (no micro-benchmarks)."""
    group = host[host["exposed_s"].notna() & host["exposed_s"].gt(0)]
    if group.empty:
        return None
    p = group["world_size"].to_numpy(dtype="float64")
    n = group["nodes"].to_numpy(dtype="float64")
    s = group["gradient_bytes"].to_numpy(dtype="float64")
    cells = pd.DataFrame({"seconds": group["exposed_s"].to_numpy(), "world": p, "nbytes": s})
    ones = np.ones_like(p)
    library = LIBRARIES.get(setup, setup)
    if pattern == RING:
        m, b = ring_terms(p, s)
        fit = fit_cells(
            library, "allreduce", cells, {"c": ones, "alpha": m, "gamma": b}, ("gamma", "c", "alpha")
        )
        fits = {"allreduce": fit}
    elif pattern == PS:
        columns = {"c": ones, "per_worker": p, "gamma_worker": s, "gamma_server": p * s / num_ps}
        fits = {
            "pushpull": fit_cells(
                library, "pushpull", cells, columns, ("gamma_server", "c", "gamma_worker", "per_worker")
            )
        }
    else:
        cells["world"] = n
        columns = {"c": ones, "alpha": 2 * (n - 1), "gamma": 2 * (n - 1) / n * s}
        fits = {"shuffle": fit_cells(library, "shuffle", cells, columns, ("gamma", "c", "alpha"))}
    fit = next(iter(fits.values()))
    return Calibration(
        setup=setup,
        pattern=pattern,
        library=library,
        source="runs",
        fits=fits,
        host_runs=len(group),
        host_rel_rmse=fit.rel_rmse,
        note="no micro-benchmarks: library terms fitted on the host runs' exposed time",
        world_sizes=tuple(sorted(int(w) for w in group["world_size"].unique())),
        models=tuple(sorted(str(m) for m in group["model"].unique())),
    )


def calibrate(
    runs: pd.DataFrame,
    fits: Fits | None = None,
    num_ps: int = 1,
) -> dict[str, Calibration]:
    """Per set-up: its library's micro-benchmark fits and the offset from its host runs
    (or, without micro-benchmarks, library terms fitted on the host runs)."""
    return calibrate_measured(measured_runs(runs), fits, num_ps)


def calibrate_measured(
    measured: pd.DataFrame, fits: Fits | None = None, num_ps: int = 1
) -> dict[str, Calibration]:
    """``calibrate`` on a table of ``measured_runs``."""
    fits = fits or {}
    host = measured[measured["network"].eq(HOST) & communicating(measured)] if len(measured) else measured
    out: dict[str, Calibration] = {}
    setups = sorted(
        set(host["setup"]) | {s for s, lib in LIBRARIES.items() if any(k[0] == lib for k in fits)}
    )
    for setup in setups:
        pattern = SETUP_PATTERN.get(setup)
        if pattern is None:
            continue
        library = LIBRARIES[setup]
        own = {
            op: fits[(library, op, HOST)]
            for op in LIBRARY_OPS.get(library, ())
            if (library, op, HOST) in fits
        }
        group = host[host["setup"].eq(setup)] if len(host) else host
        needed = PATTERN_OP[pattern]
        if needed not in own:
            cal = _runs_fit(setup, pattern, group, num_ps)
            if cal is not None:
                out[setup] = cal
            continue
        cal = with_spark_step(Calibration(setup, pattern, library, "commbench", own), group)
        out[setup] = with_offset(cal, group, num_ps)
    return out


def with_offset(cal: Calibration, host_runs: pd.DataFrame, num_ps: int = 1) -> Calibration:
    """``cal`` with its offset: what its host runs' exposed time has beyond the library model.

    The ranks of a host run share its cores, so a run with more ranks than cores waits for
    the rank the scheduler ran last (about linear in ``rho(P) - 1``), and the runner copies
    the gradient in and out of the library's buffer, every rank at once (per gradient byte):
    the offset is ``o_0 + o_1·(rho - 1) + o_2·S·rho``, each term where the runs identify it
    (``offset_fit``), else their median. BigDL keeps the median: its Spark line in the
    executors is fitted on the same runs and already grows with them. The projection's
    offset is fitted the same way on the skew-free synchronisation of the runs with a core
    per rank (``p_0 + p_2·S``). The measurements behind both terms: ``docs/perfmodel.md``.
    """
    group = host_runs[host_runs["exposed_s"].notna()]
    if group.empty:
        return dataclasses.replace(cal, note="; ".join(filter(None, ("no host runs: offset 0", cal.note))))
    cores = cal.host_cores or None
    measured = group["exposed_s"].to_numpy(dtype="float64")
    modelled = np.empty(len(group))
    keys = ["model", "ranks_per_node", "batch_per_rank", "dataset"]
    for (model, rpn, batch, dataset), index in group.groupby(keys, sort=False).indices.items():
        nodes = group["nodes"].to_numpy()[index]
        modelled[index] = library_comm(
            cal, model, nodes, int(rpn), Link.host(), cores, num_ps, int(batch), dataset
        )
    residual = measured - modelled
    if cal.pattern == BIGDL:
        nbytes, rho_fit = np.zeros(len(group)), np.ones(len(group))
    else:
        nbytes = group["gradient_bytes"].to_numpy(dtype="float64")
        rho_fit = contention(group["world_size"].to_numpy(dtype="float64"), cores)
    offset, per_contention, per_byte = offset_fit(residual, rho_fit - 1.0, nbytes, rho_fit, measured)
    fitted = offset + per_contention * (rho_fit - 1.0) + per_byte * nbytes * rho_fit
    rel = (modelled + fitted - measured) / np.maximum(measured, WEIGHT_FLOOR_S)
    # For nodes of their own: the synchronisation timed skew-free (``sync_s``: the wait for
    # the slowest rank is this shared host's), of runs whose ranks had a core each (with
    # more ranks than cores, the library's time is this host's contention too).
    sync = group["sync_s"].to_numpy(dtype="float64") if "sync_s" in group else measured
    uncontended = (group["world_size"].to_numpy() <= (cores or np.inf)) & np.isfinite(sync)
    projected, projected_per_byte = 0.0, 0.0
    if uncontended.any():
        own = uncontended
        projected, _, projected_per_byte = offset_fit(
            (sync - modelled)[own], np.zeros(own.sum()), nbytes[own], scale=sync[own]
        )
        if projected_per_byte == 0.0:
            projected = max(projected, 0.0)
    return dataclasses.replace(
        cal,
        offset_s=offset,
        offset_per_contention_s=per_contention,
        offset_per_byte_s=per_byte,
        projection_offset_s=projected,
        projection_offset_per_byte_s=projected_per_byte,
        host_runs=len(group),
        host_rel_rmse=float(np.sqrt(np.mean(rel**2))),
        world_sizes=tuple(sorted(int(w) for w in group["world_size"].unique())),
        models=tuple(sorted(str(m) for m in group["model"].unique())),
    )


def offset_fit(
    residual: Any, excess: Any, nbytes: Any = None, rho: Any = None, scale: Any = None
) -> tuple[float, float, float]:
    """``(o_0, o_1, o_2)`` of ``residual ≈ o_0 + o_1·excess + o_2·nbytes·rho``, ``o_1, o_2 >=
    0`` (``scipy.optimize.lsq_linear``, exact ``bvls``), each run's error divided by its
    ``scale`` (its measured exposed time: a LeNet run's milliseconds count as much as an
    AlexNet run's seconds, as in the library fits; none: absolute errors).

    ``excess`` is each run's oversubscription of the host ``rho - 1``, ``nbytes`` its
    gradient's bytes. A term enters only where the runs identify it: ``o_1`` where
    ``excess`` takes two or more values, ``o_2`` where ``nbytes`` does (with one gradient
    size ``nbytes·rho`` is a multiple of the other two columns); with neither it is
    ``(median(residual), 0, 0)``, as robust as one level allows.
    """
    residual = np.asarray(residual, dtype="float64")
    excess = np.asarray(excess, dtype="float64")
    nbytes = np.zeros_like(residual) if nbytes is None else np.asarray(nbytes, dtype="float64")
    rho = np.ones_like(residual) if rho is None else np.asarray(rho, dtype="float64")
    scale = None if scale is None else np.asarray(scale, dtype="float64")
    columns = {"o_0": np.ones_like(residual)}
    if len(np.unique(np.round(excess, 9))) >= 2:
        columns["o_1"] = excess
    if len(np.unique(nbytes)) >= 2:
        columns["o_2"] = nbytes * rho
    if len(columns) == 1:
        return float(np.median(residual)), 0.0, 0.0
    lower = [-np.inf] + [0.0] * (len(columns) - 1)
    weight = (
        np.ones_like(residual) if scale is None else 1.0 / np.maximum(np.abs(scale), _OFFSET_SCALE_FLOOR_S)
    )
    design_matrix = np.column_stack(list(columns.values())) * weight[:, None]
    solution = lsq_linear(design_matrix, residual * weight, bounds=(lower, np.inf), method="bvls").x
    found = dict(zip(columns, solution, strict=True))
    return float(found["o_0"]), float(found.get("o_1", 0.0)), float(found.get("o_2", 0.0))


def calibration_table(calibrations: Mapping[str, Calibration]) -> pd.DataFrame:
    """One row per set-up (``calibration.csv``): the library terms used and the offset."""
    rows = []
    for cal in calibrations.values():
        main = cal.fits.get(PATTERN_OP[cal.pattern])
        gamma = main.get("gamma" if cal.pattern != PS else "gamma_worker") if main else math.nan
        job = cal.fits.get("job")
        rows.append(
            {
                "setup": cal.setup, "runs": cal.host_runs, "world_sizes": ";".join(map(str, cal.world_sizes)),
                "models": ";".join(cal.models), "overhead_s": main.get("c") if main else math.nan,
                "framework": cal.setup.split("-")[0], "pattern": cal.pattern,
                "library": cal.library, "source": cal.source,
                "c_s": main.get("c") if main else math.nan,
                "alpha_s": main.get("alpha") if main else math.nan,
                "beta_Bps": (math.inf if gamma <= 0 else 1.0 / gamma) if main else math.nan,
                "per_worker_s": main.get("per_worker") if main and cal.pattern == PS else math.nan,
                "server_beta_Bps": (
                    (math.inf if main.get("gamma_server") <= 0 else 1.0 / main.get("gamma_server"))
                    if main and cal.pattern == PS else math.nan
                ),
                "job_s": job.get("c") if job else math.nan,
                "job_per_executor_s": job.get("per_task") if job else math.nan,
                **spark_step_columns(cal),
                "offset_s": cal.offset_s, "offset_per_contention_s": cal.offset_per_contention_s,
                "offset_per_byte_s": cal.offset_per_byte_s, "projection_offset_s": cal.projection_offset_s,
                "projection_offset_per_byte_s": cal.projection_offset_per_byte_s,
                "host_runs": cal.host_runs, "host_rel_rmse": cal.host_rel_rmse,
                "fitted": ";".join(f"{op}:{'+'.join(f.identified)}" for op, f in cal.fits.items()),
                "note": cal.note,
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS))


def spark_step_columns(cal: Calibration) -> dict[str, Any]:
    """``calibration.csv``'s columns of BigDL's per-iteration Spark cost: its source
    (``runs``: fitted on host runs, ``commbench``: the micro-benchmark's two jobs,
    ``library-runs``: the whole library fitted on runs), the per-iteration fixed cost and
    slope in the executors, the executor counts and points it was fitted on, and its residuals
    (root mean square in seconds, relative, and the median residual per executor count)."""
    step, job = cal.fits.get(SPARK_STEP), cal.fits.get("job")
    empty = dict.fromkeys(
        ("spark_step_s", "spark_step_per_executor_s", "spark_points", "spark_rmse_s", "spark_rel_rmse"),
        math.nan,
    )
    if cal.pattern != BIGDL:
        return {"spark_source": "", "spark_executors": "", "spark_residuals_s": "", **empty}
    if step is not None:
        return {
            "spark_source": "runs", "spark_step_s": step.get("c"),
            "spark_step_per_executor_s": step.get("per_executor"), "spark_executors": ";".join(map(str, step.worlds)),
            "spark_points": step.points, "spark_rmse_s": step.rmse_s, "spark_rel_rmse": step.rel_rmse,
            "spark_residuals_s": ";".join(f"{k}:{v:+.4g}" for k, v in step.residuals_s),
        }  # fmt: skip
    if job is not None:
        return {
            "spark_source": "commbench", "spark_step_s": BIGDL_JOBS_PER_ITERATION * job.get("c"),
            "spark_step_per_executor_s": BIGDL_JOBS_PER_ITERATION * job.get("per_task"),
            "spark_executors": ";".join(map(str, job.worlds)), "spark_points": job.points,
            "spark_rmse_s": math.nan, "spark_rel_rmse": job.rel_rmse, "spark_residuals_s": "",
        }  # fmt: skip
    shuffle = cal.fits.get("shuffle")
    return {
        **empty, "spark_source": "library-runs" if cal.source == "runs" else "commbench-shuffle", "spark_step_s": shuffle.get("c") if shuffle else math.nan,
        "spark_step_per_executor_s": 0.0, "spark_executors": ";".join(map(str, cal.world_sizes)),
        "spark_residuals_s": "",
    }  # fmt: skip

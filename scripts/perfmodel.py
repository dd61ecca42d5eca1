"""Snakemake glue: runs + micro-benchmarks -> the scaling model's fits, validation, projection.

Inputs: ``runs`` (parquet), optional ``iterations`` (parquet: compute per iteration, for
the bootstrap) and ``commbench`` (the micro-benchmark CSVs, none when the study skips
them). Outputs: the tables ``calibration``, ``validation``, ``validation_summary``,
``projection`` and, where the rule declares them, ``efficiency50``, ``commbench``,
``commbench_fits``, ``commbench_checks``, ``latency_sensitivity``; the figures as
``<figure>_<format>`` for every figure of ``dlscale.perfmodel_figures`` the rule declares.
Params: ``network``, ``max_nodes``, ``ranks_per_node``, ``num_ps``, ``bootstrap``
(replicates) and ``seed``. All logic lives in ``dlscale.perfmodel`` and
``dlscale.perfmodel_figures``; a study with nothing to calibrate from still gets every file.
"""

import logging
from pathlib import Path

import pandas as pd

from dlscale import atomic, perfmodel_figures
from dlscale import perfmodel as pm
from dlscale.logsetup import log_to
from dlscale.outputs import FIGURE_FORMATS

log_to(snakemake.log[0])
log = logging.getLogger("perfmodel")


def write_csv(table: pd.DataFrame, target: str) -> None:
    atomic.replace_with(target, lambda tmp: table.to_csv(tmp, index=False))


def read_commbench(paths: list[str]) -> pd.DataFrame:
    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        except pd.errors.EmptyDataError:
            continue
        if len(frame):
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


try:
    inputs, params, out = snakemake.input, snakemake.params, snakemake.output
    runs = pd.read_parquet(inputs.runs)
    iterations = None
    if "iterations" in inputs.keys() and Path(inputs.iterations).exists():
        iterations = pd.read_parquet(inputs.iterations)
    studies = list(getattr(params, "pool_studies", []) or [])
    if studies:
        # Only the frameworks this study has micro-benchmarks of: another framework's runs
        # would be calibrated without its library's fits.
        frameworks = set(runs["framework"]) if "framework" in runs else set()
        before = len(runs)
        runs = pm.pool_studies(
            runs, studies, [pm.runs_of(pd.read_parquet(path), frameworks) for path in inputs.pooled_runs]
        )
        if iterations is not None:  # the pooled runs' iterations only
            iterations = pm.pool_studies(
                iterations, studies, [pd.read_parquet(path) for path in inputs.pooled_iterations]
            )
            iterations = iterations[iterations["run_id"].isin(set(runs["run_id"]))]
        log.info(
            "pooled %d runs of %s (frameworks %s): %d runs in all",
            len(runs) - before, ", ".join(studies), ", ".join(sorted(frameworks)), len(runs),
        )  # fmt: skip
    raw = read_commbench(list(inputs.commbench) if "commbench" in inputs.keys() else [])
    num_ps, ranks_per_node, max_nodes = int(params.num_ps), int(params.ranks_per_node), int(params.max_nodes)
    replicates = int(getattr(params, "bootstrap", 200))
    seed = int(getattr(params, "seed", 0))

    cells = pm.commbench_cells(raw)
    fits = pm.fit_commbench(cells)
    for fit in fits.values():
        log.info(
            "fit %s %s on %s: %s (rel rmse %.3f, worst %.3f)",
            fit.library, fit.op, fit.network, dict(fit.coefficients), fit.rel_rmse, fit.max_abs_rel_error,
        )  # fmt: skip
    calibrations = pm.calibrate(runs, fits, num_ps)
    for cal in calibrations.values():
        log.info(
            "calibrated %s from %s: offset %.6f s + %.6f s per unit of oversubscription on this host"
            " + %.3g s per gradient byte; projected %.6f s + %.3g s per gradient byte (%s)",
            cal.setup, cal.source, cal.offset_s, cal.offset_per_contention_s, cal.offset_per_byte_s,
            cal.projection_offset_s, cal.projection_offset_per_byte_s, cal.note,
        )  # fmt: skip
    if not calibrations:
        log.warning("no micro-benchmarks and no ok host-network run that communicates: nothing to calibrate")

    validation = pm.validate(runs, calibrations, fits, num_ps)
    summary = pm.validation_summary(validation)
    for row in summary.itertuples():
        log.info(
            "validation %s: %d held-out runs in %d cells, median |error| %s, worst %s (%s); given each"
            " run's compute %s, worst %s; compute alone %s",
            row.setup, row.runs, row.cells, row.median_abs_error, row.max_abs_error, row.worst_cell,
            row.median_abs_error_given_compute, row.max_abs_error_given_compute, row.median_abs_compute_error,
        )  # fmt: skip

    network = pm.preset_named(str(params.network))
    reps, rep_curves = pm.bootstrap(runs, raw, replicates, num_ps, seed, iterations)
    projection = pm.project(runs, calibrations, network, max_nodes, ranks_per_node, num_ps, reps, rep_curves)
    for row in projection.efficiency50.itertuples():
        log.info("50%% efficiency on %s: %s %s at %s nodes", row.network, row.setup, row.model, row.summary)
    ok = runs[runs["status"].eq("ok")] if "status" in runs else runs
    host_nodes = ok.loc[
        ok.get("network", pd.Series("host", index=ok.index)).fillna("host").eq("host"), "nodes"
    ]
    host_model = pm.project(
        runs, calibrations, pm.preset_named(pm.LOOPBACK), max(int(host_nodes.max()) if len(host_nodes) else 1, 2),
        ranks_per_node, num_ps,
    ).table  # fmt: skip
    sensitivity = pm.latency_sensitivity(
        runs, calibrations, network, max_nodes=max_nodes, ranks_per_node=ranks_per_node, num_ps=num_ps
    )

    tables = {
        "calibration": pm.calibration_table(calibrations),
        "validation": validation,
        "validation_summary": summary,
        "projection": projection.table,
        "efficiency50": projection.efficiency50,
        "commbench": raw,
        "commbench_fits": pm.fits_table(fits),
        "commbench_checks": pm.commbench_checks(cells, fits),
        "latency_sensitivity": sensitivity,
    }
    names = set(out.keys())
    for name, table in tables.items():
        if name in names:
            write_csv(table, getattr(out, name))
    paths = {
        name: {fmt: str(getattr(out, f"{name}_{fmt}")) for fmt in FIGURE_FORMATS if f"{name}_{fmt}" in names}
        for name in perfmodel_figures.PERFMODEL_FIGURES
    }
    perfmodel_figures.make_perfmodel_figures(
        {name: p for name, p in paths.items() if p},
        projection.table,
        runs,
        validation,
        summary,
        sensitivity,
        cells[cells["op"].ne("allreduce-blobs")] if len(cells) else cells,
        pm.fit_curves(fits),
        host_model=host_model,
        efficiency50=projection.efficiency50,
    )
    log.info("wrote %s", ", ".join(str(path) for path in out))
except Exception:
    log.exception("perfmodel failed")
    raise

"""Snakemake glue: the runs table -> the scaling model's calibration, validation and projection.

Outputs: ``calibration``, ``validation``, ``validation_summary``, ``projection`` (CSV) and
the ``projection``/``validation`` figures as ``<figure>_<format>``; params ``network``
and ``max_nodes`` (the config's ``projection``), ``ranks_per_node`` and ``num_ps``. All
logic lives in ``dlscale.perfmodel`` and ``dlscale.figures``. A study with nothing to
calibrate from still gets every file (empty tables, figures that say why).
"""

import logging

import pandas as pd

from dlscale import atomic, figures
from dlscale import perfmodel as pm
from dlscale.logsetup import log_to

log_to(snakemake.log[0])
log = logging.getLogger("perfmodel")


def write_csv(table: pd.DataFrame, target: str) -> None:
    atomic.replace_with(target, lambda tmp: table.to_csv(tmp, index=False))


try:
    runs = pd.read_parquet(snakemake.input.runs)
    params = snakemake.params
    num_ps = int(params.num_ps)
    ranks_per_node = int(params.ranks_per_node)
    calibrations = pm.calibrate(runs, num_ps=num_ps)
    loopback = pm.loopback_preset(calibrations)
    network = pm.network_preset(str(params.network), loopback)
    log.info("%s: %s", loopback.name, loopback)
    for cal in calibrations.values():
        log.info("calibrated %s", cal)
    if not calibrations:
        log.warning("no ok host-network run at world > 1: nothing to calibrate the model from")

    validation = pm.validate(runs, calibrations, loopback, num_ps=num_ps)
    summary = pm.validation_summary(validation)
    for row in summary.itertuples():
        log.info("validation %s: %d runs, median |error| %s", row.setup, row.runs, row.median_abs_error)
    projection = pm.project(
        runs, calibrations, network, loopback, int(params.max_nodes), ranks_per_node, num_ps=num_ps
    )
    network_of = runs["network"] if "network" in runs else pd.Series("host", index=runs.index)
    host_runs = runs[runs["status"].eq("ok") & network_of.fillna("host").eq("host")] if len(runs) else runs
    measured_nodes = int(host_runs["nodes"].max()) if len(host_runs) else 1
    host_model = pm.project(
        runs, calibrations, loopback, loopback, max(measured_nodes, 2), ranks_per_node, num_ps
    )

    out = snakemake.output
    write_csv(pm.calibration_table(calibrations, loopback), out.calibration)
    write_csv(validation, out.validation)
    write_csv(summary, out.validation_summary)
    write_csv(projection, out.projection)
    paths = {
        name: {fmt: str(getattr(out, f"{name}_{fmt}")) for fmt in figures.FORMATS}
        for name in figures.PERFMODEL_FIGURES
    }
    figures.make_perfmodel_figures(projection, runs, validation, summary, paths, host_model=host_model)
    log.info("wrote %s", ", ".join(str(path) for path in out))
except Exception:
    log.exception("perfmodel failed")
    raise

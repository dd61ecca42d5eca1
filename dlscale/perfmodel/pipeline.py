"""The scaling model on a study's tables in one call: fit the micro-benchmarks, calibrate on
the host-network runs, validate on the held-out ones, project with a bootstrap band.

``scripts/perfmodel.py`` only reads the rule's files, calls ``run`` and writes what it
returns; tests and notebooks call ``run`` on tables in memory. The settings are the study's
own (``Settings.from_study``), and what a caller leaves out is the config schema's default
(``Settings.of``): the schema is the one place a default is written.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dlscale import catalog, outputs
from dlscale.networks import HOST
from dlscale.perfmodel.bootstrap import bootstrap
from dlscale.perfmodel.calibration import calibrate, calibration_table
from dlscale.perfmodel.comm import Calibration
from dlscale.perfmodel.fits import Fit, FitKey, commbench_cells, fit_curves, fits_table
from dlscale.perfmodel.library import commbench_checks, fit_commbench
from dlscale.perfmodel.links import LOOPBACK, preset_named
from dlscale.perfmodel.projection import latency_sensitivity, project
from dlscale.perfmodel.runs import pool_studies, runs_of
from dlscale.perfmodel.validation import validate, validation_summary

log = logging.getLogger(__name__)

SCHEMA = catalog.CONFIG_SCHEMA
#: The tables ``run`` gives, by the name of the rule's output (``<name>.csv``), in order.
TABLES: tuple[str, ...] = outputs.PERFMODEL_ALL_TABLES


@functools.cache
def schema_defaults() -> Mapping[str, Any]:
    """The schema's defaults of what ``Settings`` holds: the ``projection`` section's keys,
    ``ranks_per_node`` and TensorFlow's ``num_ps`` (from its runner's options schema)."""
    properties = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))["properties"]
    tensorflow = json.loads(catalog.FRAMEWORKS["tensorflow"].options_schema.read_text(encoding="utf-8"))
    defaults = {k: v["default"] for k, v in properties["projection"]["properties"].items() if "default" in v}
    defaults["ranks_per_node"] = properties["ranks_per_node"]["default"]
    defaults["num_ps"] = tensorflow["properties"]["num_ps"]["default"]
    return defaults


@dataclass(frozen=True)
class Settings:
    """What the model reads of a study: its ``projection`` section (the preset projected
    onto, the largest node count, bootstrap replicates and their seed), the ranks per node
    and TensorFlow's parameter servers."""

    network: str
    max_nodes: int
    bootstrap: int
    seed: int
    ranks_per_node: int
    num_ps: int

    @classmethod
    def from_study(cls, study: Mapping[str, Any]) -> Settings:
        """From a validated study (``dlscale.study.validation.validate_config`` filled its defaults)."""
        return cls.of(study["projection"], study["ranks_per_node"], study["tensorflow"]["num_ps"])

    @classmethod
    def of(
        cls,
        projection: Mapping[str, Any] | None = None,
        ranks_per_node: int | None = None,
        num_ps: int | None = None,
    ) -> Settings:
        """From a ``projection`` section as far as it is given; the rest from the schema."""
        given = {**(projection or {}), "ranks_per_node": ranks_per_node, "num_ps": num_ps}
        merged = {**schema_defaults(), **{k: v for k, v in given.items() if v is not None}}
        return cls(
            network=str(merged["network"]),
            max_nodes=int(merged["max_nodes"]),
            bootstrap=int(merged["bootstrap"]),
            seed=int(merged["seed"]),
            ranks_per_node=int(merged["ranks_per_node"]),
            num_ps=int(merged["num_ps"]),
        )


@dataclass(frozen=True)
class Tables:
    """What ``run`` gives: the rule's tables (``TABLES``, ``csv()``), what the figures draw
    beside them, and the fits and calibrations they came from."""

    calibration: pd.DataFrame
    validation: pd.DataFrame
    validation_summary: pd.DataFrame
    projection: pd.DataFrame
    efficiency50: pd.DataFrame
    commbench: pd.DataFrame
    commbench_fits: pd.DataFrame
    commbench_checks: pd.DataFrame
    latency_sensitivity: pd.DataFrame
    #: The micro-benchmark cells the figure shows (Caffe's per-blob rows left out), the
    #: fits' curves through them, and the model on this host over its measured node counts.
    cells: pd.DataFrame
    fit_curves: pd.DataFrame
    host_model: pd.DataFrame
    fits: Mapping[FitKey, Fit]
    calibrations: Mapping[str, Calibration]

    def csv(self) -> dict[str, pd.DataFrame]:
        """The tables written as ``<name>.csv``, by name."""
        return {name: getattr(self, name) for name in TABLES}


def read_commbench(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The micro-benchmark rows of every CSV (an empty file or one without rows adds none)."""
    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        except pd.errors.EmptyDataError:
            continue
        if len(frame):
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def pool(
    runs: pd.DataFrame,
    iterations: pd.DataFrame | None,
    studies: Sequence[str],
    pooled_runs: Sequence[pd.DataFrame],
    pooled_iterations: Sequence[pd.DataFrame] = (),
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """This study's runs and iterations with other studies' (``projection.pool_studies``).

    Only the runs of this study's frameworks join: another framework's would be calibrated
    without its library's fits (the micro-benchmarks are this study's). Of the pooled
    iterations only the pooled runs' are kept.
    """
    if not studies:
        return runs, iterations
    frameworks = set(runs["framework"]) if "framework" in runs else set()
    pooled = pool_studies(runs, studies, [runs_of(table, frameworks) for table in pooled_runs])
    if iterations is not None:
        iterations = pool_studies(iterations, studies, list(pooled_iterations))
        iterations = iterations[iterations["run_id"].isin(set(pooled["run_id"]))]
    log.info(
        "pooled %d runs of %s (frameworks %s): %d runs in all",
        len(pooled) - len(runs), ", ".join(studies), ", ".join(sorted(frameworks)), len(pooled),
    )  # fmt: skip
    return pooled, iterations


def host_node_count(runs: pd.DataFrame) -> int:
    """The largest node count of the ok host-network runs (at least 2: the model on this
    host is drawn over the measured node counts)."""
    ok = runs[runs["status"].eq("ok")] if "status" in runs else runs
    network = ok.get("network", pd.Series(HOST, index=ok.index)).fillna(HOST)
    nodes = ok.loc[network.eq(HOST), "nodes"] if "nodes" in ok else pd.Series(dtype="int64")
    return max(int(nodes.max()) if len(nodes) else 1, 2)


def run(
    runs: pd.DataFrame, iterations: pd.DataFrame | None, commbench: pd.DataFrame, config: Settings
) -> Tables:
    """Every table of the scaling model from a study's runs, their iterations (the bootstrap
    resamples compute from them; None: from the runs' medians) and its micro-benchmark rows
    (empty: the library terms are fitted on the host runs). A study with nothing to
    calibrate from still gets every table, empty where nothing can be said."""
    cells = commbench_cells(commbench)
    fits = fit_commbench(cells)
    for fit in fits.values():
        log.info(
            "fit %s %s on %s: %s (rel rmse %.3f, worst %.3f)",
            fit.library, fit.op, fit.network, dict(fit.coefficients), fit.rel_rmse, fit.max_abs_rel_error,
        )  # fmt: skip
    calibrations = calibrate(runs, fits, config.num_ps)
    for cal in calibrations.values():
        log.info(
            "calibrated %s from %s: offset %.6f s + %.6f s per unit of oversubscription on this host"
            " + %.3g s per gradient byte; projected %.6f s + %.3g s per gradient byte (%s)",
            cal.setup, cal.source, cal.offset_s, cal.offset_per_contention_s, cal.offset_per_byte_s,
            cal.projection_offset_s, cal.projection_offset_per_byte_s, cal.note,
        )  # fmt: skip
    if not calibrations:
        log.warning("no micro-benchmarks and no ok host-network run that communicates: nothing to calibrate")

    validation = validate(runs, calibrations, fits, config.num_ps)
    summary = validation_summary(validation)
    for row in summary.itertuples():
        log.info(
            "validation %s: %d held-out runs in %d cells, median |error| %s, worst %s (%s); given each"
            " run's compute %s, worst %s; compute alone %s",
            row.setup, row.runs, row.cells, row.median_abs_error, row.max_abs_error, row.worst_cell,
            row.median_abs_error_given_compute, row.max_abs_error_given_compute, row.median_abs_compute_error,
        )  # fmt: skip

    network = preset_named(config.network)
    reps, rep_curves = bootstrap(runs, commbench, config.bootstrap, config.num_ps, config.seed, iterations)
    projection = project(
        runs, calibrations, network, config.max_nodes, config.ranks_per_node, config.num_ps, reps, rep_curves
    )
    for row in projection.efficiency50.itertuples():
        log.info(
            "efficiency on %s stays below 50%% from (nodes): %s %s %s",
            row.network,
            row.setup,
            row.model,
            row.summary,
        )
    on_host = preset_named(LOOPBACK)
    host_model = project(
        runs, calibrations, on_host, host_node_count(runs), config.ranks_per_node, config.num_ps
    ).table
    # The cores of the host the model is for: where its runs had a core per rank (the
    # held-out check of time to target compares only those, dlscale.perfmodel.time_to_target).
    host_model["host_cores"] = max((cal.host_cores for cal in calibrations.values()), default=0)
    sensitivity = latency_sensitivity(
        runs, calibrations, network, max_nodes=config.max_nodes, ranks_per_node=config.ranks_per_node,
        num_ps=config.num_ps,
    )  # fmt: skip
    return Tables(
        calibration=calibration_table(calibrations),
        validation=validation,
        validation_summary=summary,
        projection=projection.table,
        efficiency50=projection.efficiency50,
        commbench=commbench,
        commbench_fits=fits_table(fits),
        commbench_checks=commbench_checks(cells, fits),
        latency_sensitivity=sensitivity,
        cells=cells[cells["op"].ne("allreduce-blobs")] if len(cells) else cells,
        fit_curves=fit_curves(fits),
        host_model=host_model,
        fits=fits,
        calibrations=calibrations,
    )

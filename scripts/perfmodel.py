"""Snakemake glue: runs + micro-benchmarks -> the scaling model's tables and figures; the
published record -> the replay's tables and figure.

Inputs: ``runs`` and ``iterations`` (parquet), ``commbench`` (the micro-benchmark CSVs,
none when the study skips them), ``pooled_runs``/``pooled_iterations`` (the studies of
``pool_studies``), ``systems`` (``published/*.yaml`` of the workflow; none where a copy of
the workflow lacks the folder: empty tables and a figure saying so). Outputs: every table
of ``dlscale.perfmodel.pipeline.TABLES`` the rule declares, each figure of
``dlscale.perfmodel.figures`` as ``<figure>_<format>``, ``replay`` and ``replay_summary``
(CSV) and the replay's figure as ``replay_figure_<format>``. Params: ``band_note`` (the TH
Express-2 preset's basis and band, under the replay figure's title). All logic lives in
``dlscale.perfmodel.pipeline.run`` and ``dlscale.perfmodel.replay`` (the network-level model
alone: no study's calibration, so the same numbers as ``published/replay.csv``); this script
reads, calls and writes.
"""

import logging
from pathlib import Path

import pandas as pd

from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.base.untrusted import write_csv
from dlscale.outputs import FIGURE_FORMATS, PERFMODEL_ALL_FIGURES
from dlscale.perfmodel import figures, pipeline, replay

log_to(snakemake.log[0])
log = logging.getLogger("perfmodel")

try:
    inputs, params, out = snakemake.input, snakemake.params, snakemake.output
    runs = pd.read_parquet(inputs.runs)
    iterations = pd.read_parquet(inputs.iterations) if Path(inputs.iterations).exists() else None
    runs, iterations = pipeline.pool(
        runs,
        iterations,
        list(params.pool_studies),
        [pd.read_parquet(path) for path in inputs.pooled_runs],
        [pd.read_parquet(path) for path in inputs.pooled_iterations],
    )
    settings = pipeline.Settings(
        network=str(params.network), max_nodes=int(params.max_nodes), bootstrap=int(params.bootstrap),
        seed=int(params.seed), ranks_per_node=int(params.ranks_per_node), num_ps=int(params.num_ps),
    )  # fmt: skip
    tables = pipeline.run(runs, iterations, pipeline.read_commbench(list(inputs.commbench)), settings)

    names = set(out.keys())
    for name, table in tables.csv().items():
        if name in names:
            atomic.replace_with(getattr(out, name), lambda tmp, table=table: write_csv(table, tmp))
    paths = {
        name: {fmt: str(getattr(out, f"{name}_{fmt}")) for fmt in FIGURE_FORMATS if f"{name}_{fmt}" in names}
        for name in PERFMODEL_ALL_FIGURES
    }
    figures.make_perfmodel_figures(
        {name: p for name, p in paths.items() if p},
        tables.projection, runs, tables.validation, tables.validation_summary, tables.latency_sensitivity,
        tables.cells, tables.fit_curves, host_model=tables.host_model, efficiency50=tables.efficiency50,
    )  # fmt: skip

    record = replay.replay(replay.load_systems(sorted(inputs.systems)))
    summary = replay.summary(record)
    atomic.replace_with(out.replay, lambda tmp: write_csv(record, tmp))
    atomic.replace_with(out.replay_summary, lambda tmp: write_csv(summary, tmp))
    replay_paths = {fmt: str(getattr(out, f"replay_figure_{fmt}")) for fmt in FIGURE_FORMATS}
    figures.make_replay_figure(replay_paths, record, summary, str(params.band_note))
    for row in summary.itertuples(index=False):
        log.info(
            "replay, %s: median |error| %.3f, worst %.3f (%s)",
            row.communication, row.median_abs_error, row.max_abs_error, row.worst,
        )  # fmt: skip
    log.info("wrote %s", ", ".join(str(path) for path in out))
except Exception:
    log.exception("perfmodel failed")
    raise

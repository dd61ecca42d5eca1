"""Snakemake glue: runs + micro-benchmarks -> the scaling model's tables and figures.

Inputs: ``runs`` and ``iterations`` (parquet), ``commbench`` (the micro-benchmark CSVs,
none when the study skips them), ``pooled_runs``/``pooled_iterations`` (the studies of
``pool_studies``). Outputs: every table of ``dlscale.perfmodel.pipeline.TABLES`` the rule
declares, and each figure of ``dlscale.perfmodel.figures`` as ``<figure>_<format>``. All
logic lives in ``dlscale.perfmodel.pipeline.run``; this script reads, calls and writes.
"""

import logging
from pathlib import Path

import pandas as pd

from dlscale import atomic
from dlscale.logsetup import log_to
from dlscale.outputs import FIGURE_FORMATS
from dlscale.perfmodel import figures, pipeline

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
            atomic.replace_with(getattr(out, name), lambda tmp, table=table: table.to_csv(tmp, index=False))
    paths = {
        name: {fmt: str(getattr(out, f"{name}_{fmt}")) for fmt in FIGURE_FORMATS if f"{name}_{fmt}" in names}
        for name in figures.PERFMODEL_FIGURES
    }
    figures.make_perfmodel_figures(
        {name: p for name, p in paths.items() if p},
        tables.projection, runs, tables.validation, tables.validation_summary, tables.latency_sensitivity,
        tables.cells, tables.fit_curves, host_model=tables.host_model, efficiency50=tables.efficiency50,
    )  # fmt: skip
    log.info("wrote %s", ", ".join(str(path) for path in out))
except Exception:
    log.exception("perfmodel failed")
    raise

"""Snakemake glue: runs/iterations parquet and evals.csv -> the study's figures in html, svg and png.

Outputs are named ``<figure>_<format>`` (e.g. ``throughput_png``); all logic lives in
``dlscale.figures.charts`` and ``dlscale.figures.quality``. The intervals the figures draw are the cells' of ``dlscale.analysis.verdicts``,
recomputed from runs.parquet by the same seeded function that wrote cells.csv.
"""

import logging

import pandas as pd

from dlscale.analysis import verdicts
from dlscale.base.logsetup import log_to
from dlscale.figures import charts
from dlscale.figures.quality import QUALITY_FIGURES, make_quality_figures

log_to(snakemake.log[0])
log = logging.getLogger("figures")

try:
    runs = pd.read_parquet(snakemake.input.runs)
    iterations = pd.read_parquet(snakemake.input.iterations)
    out = {
        name: {fmt: str(getattr(snakemake.output, f"{name}_{fmt}")) for fmt in charts.FORMATS}
        for name in charts.FIGURES
    }
    ok = int(runs["status"].eq("ok").sum()) if len(runs) else 0
    log.info("%d runs (%d ok), %d iteration rows", len(runs), ok, len(iterations))
    evals = pd.read_csv(snakemake.input.evals)
    charts.make_figures(runs, iterations, {name: out[name] for name in charts.STUDY_FIGURES})
    make_quality_figures(runs, verdicts.cells(runs), evals, {name: out[name] for name in QUALITY_FIGURES})
    log.info("wrote %s", ", ".join(path for paths in out.values() for path in paths.values()))
except Exception:
    log.exception("figures failed")
    raise

"""Snakemake glue: runs/iterations parquet and evals.csv -> the study's figures in html, svg and png.

Outputs are named ``<figure>_<format>`` (e.g. ``throughput_png``); all logic lives in
``dlscale.figures`` and ``dlscale.quality_figures``. The intervals the figures draw are the cells' of ``dlscale.verdicts``,
recomputed from runs.parquet by the same seeded function that wrote cells.csv.
"""

import logging

import pandas as pd

from dlscale import figures, verdicts
from dlscale.logsetup import log_to
from dlscale.quality_figures import QUALITY_FIGURES, make_quality_figures

log_to(snakemake.log[0])
log = logging.getLogger("figures")

try:
    runs = pd.read_parquet(snakemake.input.runs)
    iterations = pd.read_parquet(snakemake.input.iterations)
    out = {
        name: {fmt: str(getattr(snakemake.output, f"{name}_{fmt}")) for fmt in figures.FORMATS}
        for name in figures.FIGURES
    }
    ok = int(runs["status"].eq("ok").sum()) if len(runs) else 0
    log.info("%d runs (%d ok), %d iteration rows", len(runs), ok, len(iterations))
    evals = pd.read_csv(snakemake.input.evals)
    figures.make_figures(runs, iterations, {name: out[name] for name in figures.STUDY_FIGURES})
    make_quality_figures(runs, verdicts.cells(runs), evals, {name: out[name] for name in QUALITY_FIGURES})
    log.info("wrote %s", ", ".join(path for paths in out.values() for path in paths.values()))
except Exception:
    log.exception("figures failed")
    raise

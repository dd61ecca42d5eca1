"""Snakemake glue: the aggregation's tables on disk (runs/iterations parquet, cells.csv,
evals.csv) -> the study's figures in html, svg and png, each checked panel by panel
against those tables (a figure whose panel shows other rows fails the rule).

Outputs are named ``<figure>_<format>`` (e.g. ``throughput_png``); all logic lives in
``dlscale.figures.study`` (the same functions ``python -m dlscale.figures RESULTS_DIR``
uses) and ``dlscale.figures.shown`` (the check).
"""

import logging
from pathlib import Path

from dlscale.base.logsetup import log_to
from dlscale.figures.shown import check_figures
from dlscale.figures.study import draw_figures, read_tables
from dlscale.outputs import FIGURE_FORMATS, FIGURES

log_to(snakemake.log[0])
log = logging.getLogger("figures")

try:
    source = snakemake.input
    tables = read_tables(source.runs, source.iterations, source.cells, source.evals)
    ok = int(tables.runs["status"].eq("ok").sum()) if len(tables.runs) else 0
    log.info(
        "%d runs (%d ok), %d iteration rows, %d cells",
        len(tables.runs),
        ok,
        len(tables.iterations),
        len(tables.cells),
    )
    out = {
        name: {fmt: str(getattr(snakemake.output, f"{name}_{fmt}")) for fmt in FIGURE_FORMATS}
        for name in FIGURES
    }
    written = draw_figures(tables, out)
    log.info("wrote %s", ", ".join(str(path) for path in written))
    problems = check_figures(tables, Path(out[FIGURES[0]]["html"]).parent)
    for problem in problems:
        log.error("a figure does not show its table: %s", problem)
    if problems:
        raise SystemExit(f"figures: {len(problems)} panel(s) do not show their table's rows (see the log)")
except Exception:
    log.exception("figures failed")
    raise

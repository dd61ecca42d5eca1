"""Snakemake glue: events files -> runs.csv/.parquet, iterations.parquet, findings.csv.

All logic lives in ``dlscale.analysis``; this script only maps Snakemake's input/output
names onto it and logs to the rule's log file.
"""

import logging

from dlscale import analysis
from dlscale.logsetup import log_to

log_to(snakemake.log[0])
log = logging.getLogger("aggregate")

try:
    events = snakemake.input.events
    paths = [events] if isinstance(events, str) else list(events)
    runs, iterations = analysis.load_events(paths)
    log.info("%s", analysis.summary(runs))
    for row in runs[runs["status"].eq("failed")].itertuples():
        log.warning("failed run %s: %s", row.run_id, row.reason)
    table = analysis.findings(runs)
    out = snakemake.output
    analysis.write_tables(
        runs,
        iterations,
        table,
        runs_csv=out.runs_csv,
        runs_parquet=out.runs_parquet,
        iterations_parquet=out.iterations_parquet,
        findings_csv=out.findings_csv,
    )
    log.info("wrote %s, %s, %s, %s", out.runs_csv, out.runs_parquet, out.iterations_parquet, out.findings_csv)
except Exception:
    log.exception("aggregation failed")
    raise

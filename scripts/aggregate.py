"""Snakemake glue: events files -> runs.csv/.parquet, iterations.parquet, cells.csv,
findings.csv and claims.csv.

All logic lives in ``dlscale.analysis.aggregate`` (``aggregate`` and ``write_outputs``, the same two
functions ``python -m dlscale.analysis RUNS_DIR --out DIR`` uses); this script only maps
Snakemake's input/output names onto them and logs to the rule's log file.
"""

import logging
import sys

from dlscale.analysis import aggregate
from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.host import roofline

log_to(snakemake.log[0])
log = logging.getLogger("aggregate")

try:
    events = snakemake.input.events
    paths = [events] if isinstance(events, str) else list(events)
    peak = roofline.read_peak(snakemake.input.peak) if hasattr(snakemake.input, "peak") else None
    tables = aggregate.aggregate(paths, peak, same_work_only=bool(snakemake.params.same_work_only))
    log.info("%s", aggregate.summary(tables.runs))
    for row in tables.runs[tables.runs["status"].eq("failed")].itertuples():
        log.warning("failed run %s: %s", row.run_id, row.reason)
    for row in tables.runs[tables.runs["flag"].notna()].itertuples():
        log.warning("flagged run %s: %s", row.run_id, row.flag)
    out = snakemake.output
    targets = {name: getattr(out, name) for name in aggregate.OUTPUT_FILES if hasattr(out, name)}
    aggregate.write_outputs(tables, targets)
    log.info("wrote %s", ", ".join(str(path) for path in targets.values()))
except atomic.WriteError as err:
    # A full disk or quota: one line naming the table (pandas' traceback names none).
    log.error("aggregation failed: %s", err)
    sys.exit(f"aggregate: {err}")
except Exception:
    log.exception("aggregation failed")
    raise

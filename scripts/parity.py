"""Snakemake glue: the study's runs -> results/parity.csv (``dlscale.analysis.parity``: every
framework's first losses against the reference framework's, under ``init: shared``)."""

import logging

from dlscale.analysis import parity
from dlscale.base.logsetup import log_to

log_to(snakemake.log[0])
log = logging.getLogger("parity")

try:
    paths = [
        *([snakemake.input.events] if isinstance(snakemake.input.events, str) else snakemake.input.events),
        *snakemake.input.references,
    ]
    table = parity.parity_table(paths)
    for row in table.itertuples():
        log.info("%s %s: %s", {None: "n/a", True: "pass", False: "FAIL"}[row.passes], row.run_id, row.reason)
    parity.write_table(table, snakemake.output.parity)
except Exception:
    log.exception("parity check failed")
    raise
